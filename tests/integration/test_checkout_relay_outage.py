"""A wallet's authorization and an agent's x402 payment while the chain's node is down: 503 with
``Retry-After``, nothing sent, the order's claim given back; once the node is back (anvil keeps its
chain in a state file) the same signatures pay, once. A platform of its own on anvil, on
SQLite."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from eth_account import Account

from tests.harness import PlatformHarness, postgres_database
from tests.waiting import eventually
from x402mw.client import Wallet
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.db import tables
from x402mw.platform.server import PlatformServer
from x402mw.platform.settings import ChainSettings, PlatformSettings
from x402mw.protocol.codec import decode_payment_required, encode_header


@pytest.fixture(scope="module")
def node_and_platform(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AnvilProcess, Any]]:
    workdir = tmp_path_factory.mktemp(f"outage-{database}")
    with contextlib.ExitStack() as stack:
        anvil = stack.enter_context(AnvilProcess(args=["--state", str(workdir / "anvil.json")]))

        async def deploy() -> dict[str, str]:
            rpc = HttpJsonRpc(anvil.url)
            try:
                return await deploy_test_tokens(rpc, ANVIL_DEV_KEYS[0])
            finally:
                await rpc.aclose()

        tokens = asyncio.run(deploy())
        url = stack.enter_context(postgres_database()) if database == "postgresql" else None
        settings = PlatformSettings(
            database_url=url or f"sqlite:///{workdir / 'platform.sqlite3'}",
            data_dir=workdir,
            chains=[ChainSettings(rpc_url=anvil.url, tokens=tokens, minter_key=ANVIL_DEV_KEYS[0].hex())],
            relayer_key=ANVIL_DEV_KEYS[1].hex(),
            run_worker=False,
        )
        server = stack.enter_context(PlatformServer(settings))
        yield anvil, PlatformHarness(server)


def _claim(harness: PlatformHarness, payment_id: str) -> str | None:
    async def read(platform: Any) -> str | None:
        table = tables.payment_intents
        async with platform.engine.connect() as conn:
            found: str | None = await conn.scalar(
                table.select().with_only_columns(table.c.relay_hash).where(table.c.id == payment_id)
            )
            return found

    return harness.server.call(read)


def test_payments_while_the_node_is_down_are_503s_and_pay_once_it_is_back(
    node_and_platform: tuple[AnvilProcess, PlatformHarness],
) -> None:
    anvil, harness = node_and_platform
    _, key, _ = harness.merchant()
    api = httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    checkout = httpx.Client(base_url=harness.url.removesuffix("/v1") + "/checkout/v1", timeout=60)
    with api, checkout:
        orders = [
            api.post("/payment-intents", json={"orderId": str(uuid.uuid4()), "amount": "2", "currency": "USDC"}).json()[
                "paymentIntent"
            ]
            for _ in range(2)
        ]
        wallet, agent = Account.create(), Wallet(Account.create().key)
        harness.fund(key, wallet.address, "2")
        harness.fund(key, agent.address, "2")
        typed = checkout.post(
            f"/payment-intents/{orders[0]['id']}/attempts",
            json={"network": harness.network, "currency": "USDC", "method": "wallet"},
        ).json()["authorization"]
        message = {**typed["message"], "from": wallet.address}
        signature = Account.sign_typed_data(wallet.key, full_message={**typed, "message": message}).signature
        body = {
            "network": harness.network,
            "currency": "USDC",
            "authorization": message,
            "signature": "0x" + bytes(signature).hex(),
        }
        required = decode_payment_required(httpx.get(orders[1]["x402Url"], timeout=60).headers["PAYMENT-REQUIRED"])
        paid_header = encode_header(agent.sign_payment(required.accepts[0]))

        anvil.stop()
        try:
            for _ in range(2):  # the first finds the node gone; the second is refused at once
                down = checkout.post(f"/payment-intents/{orders[0]['id']}/authorizations", json=body)
                assert down.status_code == 503, down.text
                assert down.json()["error"]["code"] == "chain_unavailable" and int(down.headers["retry-after"]) >= 1
                assert _claim(harness, orders[0]["id"]) is None, "the claim was given back"
            agent_down = httpx.get(orders[1]["x402Url"], headers={"PAYMENT-SIGNATURE": paid_header}, timeout=60)
            assert agent_down.status_code == 503, agent_down.text
            assert "PAYMENT-REQUIRED" not in agent_down.headers
        finally:
            anvil.start()
        assert harness.balance(wallet.address) == 2_000_000 and harness.balance(agent.address) == 2_000_000
        # the node is back: the same signatures pay (the relayer notices within its reconciliation)
        again = eventually(
            lambda: checkout.post(f"/payment-intents/{orders[0]['id']}/authorizations", json=body),
            until=lambda answer: answer.status_code != 503,
            what="an answer other than 503 once the node is back",
        )
        assert again.status_code == 200, again.text
        assert again.json()["status"] == "succeeded"
        agent_paid = httpx.get(orders[1]["x402Url"], headers={"PAYMENT-SIGNATURE": paid_header}, timeout=60)
        assert agent_paid.status_code == 200, agent_paid.text
        assert harness.balance(wallet.address) == 0 and harness.balance(agent.address) == 0
        balances = api.get("/balances").json()["data"]
        assert [b["available"] for b in balances if b["currency"] == "USDC"] == ["4.00"]
