"""The deposit watcher against a real chain: transfers to deposit addresses made by a buyer's own
wallet (not the sandbox), reorgs, and deposit addresses (fresh per order, fixed per customer)."""

from __future__ import annotations

import secrets
import uuid
from decimal import Decimal
from typing import Any

import httpx

from tests.harness import PlatformHarness
from x402mw.client import Wallet
from x402mw.evm.hd import derive_private_key
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.services.deposits import assign_deposit_address, authorization_call
from x402mw.platform.services.payment_intents import find_payment_intent


def _api(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _deposit_address(harness: PlatformHarness, merchant_id: str, order_id: str) -> str:
    async def assign(platform: Any) -> str:
        async with platform.engine.connect() as conn:
            row = await find_payment_intent(conn, merchant_id, False, order_id)
        return await assign_deposit_address(platform.engine, platform.deposit_keys, row)

    return harness.server.call(assign)


def _buyer_pays(harness: PlatformHarness, api_key: str, to: str, amount: int) -> str:
    """A buyer funded by the faucet signs a transfer to ``to``; the relayer submits it."""
    buyer = new_private_key()
    harness.fund(api_key, address_of(buyer), str(Decimal(amount).scaleb(-6)))
    chain = harness.chain
    data, _, _ = authorization_call(chain, harness.usdc, buyer, to, amount, secrets.token_bytes(32))

    async def send(platform: Any) -> str:
        tx = await chain.relayer.send(harness.usdc, data)
        await chain.wait_for(tx)
        return tx

    return harness.server.call(send)


def _order(api: httpx.Client, order_id: str) -> dict[str, Any]:
    reply = api.get(f"/payment-intents/{order_id}")
    assert reply.status_code == 200, reply.text
    order: dict[str, Any] = reply.json()["paymentIntent"]
    return order


def test_a_reorg_takes_a_payment_back_and_the_next_one_counts(quiet_dev_platform: PlatformHarness) -> None:
    # Without the background worker: its watcher, every 2 s, could confirm the payment between the
    # scan below and the rewind (the dev chain needs one confirmation), which made this test flaky.
    merchant_id, key, _ = quiet_dev_platform.merchant()
    rpc = quiet_dev_platform.chain.rpc
    with _api(quiet_dev_platform, key) as api:
        created = api.post("/payment-intents", json={"orderId": f"o-{uuid.uuid4()}", "amount": "4", "currency": "USDC"})
        order_id = created.json()["paymentIntent"]["id"]
        address = _deposit_address(quiet_dev_platform, merchant_id, order_id)
        snapshot = quiet_dev_platform.server.call(lambda p: rpc.request("evm_snapshot", []))
        first = _buyer_pays(quiet_dev_platform, key, address, 4_000_000)
        quiet_dev_platform.server.call(lambda p: p.watcher.scan(quiet_dev_platform.chain))
        seen = _order(api, order_id)
        assert (seen["status"], seen["amountReceived"], seen["txHash"]) == ("processing", "4", first)

        quiet_dev_platform.server.call(lambda p: rpc.request("evm_revert", [snapshot]))
        quiet_dev_platform.server.call(lambda p: p.watcher.run_once())
        reverted = _order(api, order_id)
        assert (reverted["status"], reverted["amountReceived"], reverted["txHash"]) == ("requires_payment", "0", None)
        assert reverted["payer"] is None and reverted["paidAt"] is None
        types = [e["type"] for e in api.get("/events", params={"limit": 10}).json()["data"]]
        assert types[:2] == ["payment_intent.reverted", "payment_intent.processing"]
        assert api.get("/balances").json()["data"] == []

        second = _buyer_pays(quiet_dev_platform, key, address, 4_000_000)  # at heights the watcher read before
        quiet_dev_platform.server.call(lambda p: p.watcher.run_once())
        paid = _order(api, order_id)
        assert (paid["status"], paid["amountReceived"], paid["txHash"]) == ("succeeded", "4", second)
        balances = api.get("/balances").json()["data"]
        assert [(b["currency"], b["available"]) for b in balances] == [("USDC", "4.00")]


def test_deposit_addresses_are_derived_per_order_and_fixed_per_customer(dev_platform: PlatformHarness) -> None:
    merchant_id, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:

        def order(**fields: Any) -> str:
            body = {"orderId": f"o-{uuid.uuid4()}", "amount": "1", "currency": "USDC", **fields}
            reply = api.post("/payment-intents", json=body)
            assert reply.status_code == 201, reply.text
            return str(reply.json()["paymentIntent"]["id"])

        plain = [_deposit_address(dev_platform, merchant_id, order()) for _ in range(2)]
        assert plain[0] != plain[1]
        fixed = {"metadata": {"fixed_transfer_customer_id": "cus_42"}}
        first = order(**fixed)
        address = _deposit_address(dev_platform, merchant_id, first)
        assert _deposit_address(dev_platform, merchant_id, first) == address  # stable
        assert api.post(f"/payment-intents/{first}/cancel").status_code == 200
        assert _deposit_address(dev_platform, merchant_id, order(**fixed)) == address  # reused

    seed = bytes.fromhex((dev_platform.platform.settings.data_dir / "deposit.seed").read_text().strip())

    async def indices(platform: Any) -> list[int]:
        from sqlalchemy import select

        from x402mw.platform.db import tables

        table = tables.deposit_addresses
        async with platform.engine.connect() as conn:
            rows = await conn.execute(select(table.c.id).where(table.c.address.in_([*plain, address])))
            return sorted(int(i) for i in rows.scalars())

    found = dev_platform.server.call(indices)
    derived = {Wallet(derive_private_key(seed, f"m/44'/60'/0'/0/{i}")).address for i in found}
    assert derived == {*plain, address}  # a backup of the seed restores every deposit key
