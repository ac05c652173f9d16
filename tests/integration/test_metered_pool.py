"""Metered routes on a platform whose relayer is a pool of accounts: the ``upto`` witness names the
facilitator account, the same whatever pool account this process holds at the moment, and the
settlement is sent from it (the upto proxy refuses any other sender). The pool's own accounts keep
sending ``exact`` payments."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from tests.harness import PlatformHarness, sqlite_only, start_anvil_platform
from tests.metered_fixtures import metered_app, metered_deployment
from tests.sellers import asgi_transport, lifespan, starlette_app
from x402mw.client import X402Auth
from x402mw.platform.chain.pool import RelayerPool
from x402mw.protocol import decode_settlement_response

pytestmark = [pytest.mark.anyio, pytest.mark.anvil, sqlite_only]


@pytest.fixture(scope="module")
def pooled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformHarness]:
    with start_anvil_platform(tmp_path_factory.mktemp("pooled-platform"), relayer_pool_size=2) as harness:
        yield harness


def _sender(harness: PlatformHarness, tx: str) -> str:
    found = harness.server.call(lambda _p: harness.chain.rpc.request("eth_getTransactionByHash", [tx]))
    return str(found["from"]).lower()


async def test_upto_is_sent_from_the_facilitator_account_and_exact_from_the_pool(
    pooled: PlatformHarness, database: str
) -> None:
    harness = pooled
    pool = harness.chain.relayer
    assert isinstance(pool, RelayerPool) and pool.addresses
    facilitator = harness.chain.facilitator.address
    assert facilitator.lower() == pool.reader.address.lower()
    assert facilitator.lower() not in {a.lower() for a in pool.addresses}  # not an account that moves

    deployment = await asyncio.to_thread(metered_deployment, harness, ceiling=40_000)
    with deployment.api() as api:
        terms = api.get(f"/agent/endpoints/{deployment.endpoint_id}").json()["endpoint"]
        supported = api.get("/x402/supported").json()
    assert terms["facilitatorAddress"] == facilitator
    (upto,) = [kind for kind in supported["kinds"] if kind["scheme"] == "upto"]
    assert upto["extra"]["facilitatorAddress"] == facilitator
    assert facilitator in supported["signers"]["eip155:*"]

    app = metered_app(deployment.api_key, harness.url, deployment.endpoint_id)
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=harness.platform.receipt_address)
    async with (
        lifespan(app),
        httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver", auth=auth) as agent,
    ):
        first = await agent.get("/generate", params={"use": "1500"})
        second = await agent.get("/generate", params={"use": "40000"})
    assert first.status_code == 200 and second.status_code == 200, (first.text, second.text)
    assert [(p.amount, p.verified) for p in auth.payments] == [(1500, True), (40_000, True)]
    for payment in auth.payments:
        assert payment.transaction and _sender(harness, payment.transaction) == facilitator.lower()
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 41_500

    # an exact payment on the same platform goes out from one of the pool's accounts
    exact = await asyncio.to_thread(harness.deploy)
    seller = starlette_app(exact.api_key, harness.url, exact.endpoint_id)
    async with (
        lifespan(seller),
        httpx.AsyncClient(
            transport=asgi_transport(seller), base_url="http://testserver", auth=X402Auth(exact.agent)
        ) as client,
    ):
        paid = await client.get("/weather")
    assert paid.status_code == 200, paid.text
    settled = decode_settlement_response(paid.headers["PAYMENT-RESPONSE"])
    assert _sender(harness, settled.transaction) in {a.lower() for a in pool.addresses}
