"""Settlements while the chain goes away: the platform on anvil behind a proxy (`tests.rpc_proxy`)
that is killed mid-payment. The settlement is pending, never failed; the same authorization sent
again gets that pending outcome (not a 503 saying nothing was taken); once the chain is back it
completes, and the payer is charged exactly once. For ``upto`` (the proxy killed while the handler
runs) and for ``exact`` (killed while the transfer waits in the node's pool)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from tests.harness import PlatformHarness, platform_server
from tests.metered_fixtures import approve_permit2, metered_app, metered_deployment
from tests.rpc_proxy import RpcProxy
from tests.sellers import asgi_transport, lifespan, starlette_app
from tests.waiting import eventually_async
from x402mw.client import X402Auth
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.settings import ChainSettings, PlatformSettings

pytestmark = [pytest.mark.anyio, pytest.mark.anvil]

USE = 12_345
SETTLE_TIMEOUT = 5.0
"""How long the seller waits for a settlement before it is answered pending (the default's 30 s
would only make these tests wait longer for the same answer)."""
TAKEOVER_SECONDS = 5.0
"""After how long the worker finishes a settlement its own request left pending (the default's 20 s
would only delay the same recovery)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def proxy() -> Iterator[RpcProxy]:
    with AnvilProcess() as anvil, RpcProxy(anvil.url, max_pending=64) as proxy:
        yield proxy


@pytest.fixture
def platform(proxy: RpcProxy, tmp_path: Path) -> Iterator[PlatformHarness]:
    async def deploy() -> dict[str, str]:
        rpc = HttpJsonRpc(proxy.url)
        try:
            return await deploy_test_tokens(rpc, ANVIL_DEV_KEYS[0])
        finally:
            await rpc.aclose()

    settings = PlatformSettings(
        database_url=f"sqlite:///{tmp_path / 'platform.sqlite3'}",
        data_dir=tmp_path,
        chains=[ChainSettings(rpc_url=proxy.url, tokens=asyncio.run(deploy()), minter_key=ANVIL_DEV_KEYS[0].hex())],
        relayer_key=ANVIL_DEV_KEYS[1].hex(),
        # the worker finishes a settlement left pending TAKEOVER_SECONDS after its claim (20 s by default)
        takeover_seconds=TAKEOVER_SECONDS,
    )
    with platform_server(settings) as server:
        yield PlatformHarness(server)


@contextlib.asynccontextmanager
async def _clients(app: Any, auth: X402Auth) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, list[str]]]:
    """The app running, an agent paying it with ``auth``, a raw client for resending a signature by
    hand, and the ``PAYMENT-SIGNATURE`` headers the agent sent."""
    signatures: list[str] = []

    async def keep_signature(request: httpx.Request) -> None:
        if "PAYMENT-SIGNATURE" in request.headers:
            signatures.append(request.headers["PAYMENT-SIGNATURE"])

    async with (
        lifespan(app),
        httpx.AsyncClient(
            transport=asgi_transport(app),
            base_url="http://testserver",
            auth=auth,
            timeout=120,
            event_hooks={"request": [keep_signature]},
        ) as agent,
        httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver", timeout=120) as raw,
    ):
        yield agent, raw, signatures


def _payment_response(response: httpx.Response) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(base64.b64decode(response.headers["PAYMENT-RESPONSE"]))
    return decoded


async def test_an_upto_settlement_the_chain_cannot_take_is_pending_then_completes_once(
    platform: PlatformHarness, proxy: RpcProxy
) -> None:
    harness = platform
    deployment = await asyncio.to_thread(metered_deployment, harness, ceiling=50_000)
    await asyncio.to_thread(approve_permit2, harness, deployment.agent_key)
    payer = deployment.agent.address
    funded = await asyncio.to_thread(harness.balance, payer)
    cut = {"done": False}

    async def chain_goes_away(request: Request) -> None:
        # authorized (verified, simulated, held) while the chain answered; settled after it left
        if not cut["done"]:
            cut["done"] = True
            await asyncio.to_thread(proxy.kill)

    app = metered_app(
        deployment.api_key, harness.url, deployment.endpoint_id, before=chain_goes_away, settle_timeout=SETTLE_TIMEOUT
    )
    auth = X402Auth(deployment.agent, max_amount="0.05")
    async with _clients(app, auth) as (agent, raw, signatures):
        served = await agent.get("/generate", params={"use": str(USE)})
        assert cut["done"]
        # The handler's response is served; its settlement is pending, not failed.
        assert served.status_code == 200, served.text
        pending = _payment_response(served)
        assert pending["success"] is False and pending["errorReason"] == "settlement_pending", pending
        [signature] = signatures
        again = await raw.get("/generate", params={"use": "1"}, headers={"PAYMENT-SIGNATURE": signature})
        assert again.status_code == 402 and again.json()["error"]["code"] == "settlement_pending", again.text
        assert _payment_response(again)["errorReason"] == "settlement_pending"
        assert _statuses(deployment) in (["claimed"], ["sent"], ["pending"]), _statuses(deployment)

        await asyncio.to_thread(proxy.start)  # the chain is back: recovery finishes the settlement
        await eventually_async(
            lambda: _statuses(deployment), until=lambda s: s == ["settled"], timeout=90, what="the payment settled"
        )
        after = await raw.get("/generate", params={"use": "1"}, headers={"PAYMENT-SIGNATURE": signature})
    # the same authorization now answers its outcome (settled for the first usage): never a second charge
    assert after.status_code == 402, after.text
    settled = _payment_response(after)
    assert settled["success"] is True and settled["amount"] == str(USE) and settled["transaction"]
    assert await asyncio.to_thread(harness.balance, deployment.payout) == USE
    assert await asyncio.to_thread(harness.balance, payer) == funded - USE


def _statuses(deployment: Any) -> list[str]:
    with deployment.api() as api:
        return [payment["status"] for payment in api.get("/agent/payments").json()["data"]]


async def test_an_exact_settlement_whose_chain_went_away_answers_its_retries_pending_then_completes_once(
    platform: PlatformHarness, proxy: RpcProxy
) -> None:
    deployment = await asyncio.to_thread(platform.deploy)
    payer = deployment.agent.address
    funded = await asyncio.to_thread(platform.balance, payer)
    rpc = HttpJsonRpc(proxy.url)
    await rpc.request("evm_setAutomine", [False])  # the transfer waits in the node's pool
    # the seller waits SETTLE_TIMEOUT for the transfer that cannot be mined, not the default 30 s
    app = starlette_app(deployment.api_key, platform.url, deployment.endpoint_id, settle_timeout=SETTLE_TIMEOUT)
    auth = X402Auth(deployment.agent, max_amount="0.05", pending_retries=0)
    async with _clients(app, auth) as (agent, raw, signatures):
        first = await agent.get("/weather")
        assert first.status_code == 402 and first.json()["error"]["code"] == "settlement_pending", first.text
        [signature] = signatures
        await asyncio.to_thread(proxy.kill)
        readyz = platform.url.removesuffix("/v1") + "/readyz"
        await eventually_async(
            lambda: httpx.get(readyz, timeout=10).status_code == 503, what="the platform to see its node gone"
        )
        again = await raw.get("/weather", headers={"PAYMENT-SIGNATURE": signature})
        assert again.status_code == 402 and again.json()["error"]["code"] == "settlement_pending", again.text

        await asyncio.to_thread(proxy.start)
        await rpc.request("evm_setAutomine", [True])  # the chain is back and mines the waiting transfer
        await eventually_async(
            lambda: _statuses(deployment), until=lambda s: s == ["settled"], timeout=90, what="the payment settled"
        )
        served = await raw.get("/weather", headers={"PAYMENT-SIGNATURE": signature})
    await rpc.aclose()
    assert served.status_code == 200, served.text
    assert _payment_response(served)["success"] is True
    assert await asyncio.to_thread(platform.balance, deployment.payout) == 10_000
    assert await asyncio.to_thread(platform.balance, payer) == funded - 10_000
