"""Payments arriving, the ledger and refunds, end to end over HTTP: orders paid on the chain by the
sandbox (real transfers, seen by the deposit watcher), balances credited, refunds sent from the
treasury by the relayer, and every step reported by signed webhooks."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from standardwebhooks import Webhook

from tests.harness import PlatformHarness, postgres_database, start_dev_platform
from tests.integration.test_webhook_delivery import Received, Receiver
from tests.waiting import eventually
from x402mw.client.webhooks import construct_event
from x402mw.platform.chain.token import balance_of
from x402mw.platform.db import tables
from x402mw.platform.services.deposits import authorization_call, sweep_order
from x402mw.platform.services.ledger import apply_entry
from x402mw.platform.services.merchants import create_api_key


def _api(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _order(api: httpx.Client, amount: str = "12.5", **fields: Any) -> dict[str, Any]:
    body = {"orderId": f"o-{uuid.uuid4()}", "amount": amount, "currency": "USDC", **fields}
    reply = api.post("/payment-intents", json=body)
    assert reply.status_code == 201, reply.text
    order: dict[str, Any] = reply.json()["paymentIntent"]
    return order


def _pay(api: httpx.Client, order: dict[str, Any], scenario: str = "exact") -> dict[str, Any]:
    # pi_<uuid>, as the order's checkoutUrl shows its id, is taken here too
    reply = api.post(f"/sandbox/payment-intents/pi_{order['id']}/simulate-payment", json={"scenario": scenario})
    assert reply.status_code == 200, reply.text
    payment: dict[str, Any] = reply.json()
    return payment


def _balances(api: httpx.Client) -> dict[str, tuple[str, str]]:
    reply = api.get("/balances")
    assert reply.status_code == 200, reply.text
    return {b["currency"]: (b["available"], b["reserved"]) for b in reply.json()["data"]}


def _error(reply: httpx.Response, status: int, code: str, param: str | None = None) -> None:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["code"] == code, error
    assert error.get("param") == param, error
    assert error["requestId"] == reply.headers["request-id"]


def test_an_order_is_paid_refunded_and_reported(dev_platform: PlatformHarness) -> None:
    receiver = Receiver().start()
    try:
        _, key, _ = dev_platform.merchant()
        with _api(dev_platform, key) as api:
            hook = api.post("/webhook-endpoints", json={"url": receiver.url("hooks"), "enabledEvents": ["*"]})
            assert hook.status_code == 201, hook.text
            secret = hook.json()["webhookEndpoint"]["secret"]
            order = _order(api, successUrl="https://shop.example/thanks")
            assert order["status"] == "requires_payment" and order["txHash"] is None and order["paidAt"] is None

            payment = _pay(api, order)
            paid = payment["paymentIntent"]
            assert paid["status"] == "succeeded" and paid["exceptions"] == []
            assert paid["txHash"] == payment["txHash"] and paid["paidAt"] is not None
            assert paid["payer"] == payment["payer"] and paid["amountReceived"] == "12.5"
            assert paid["network"] == dev_platform.network and paid["paidCurrency"] == "USDC"
            assert _balances(api) == {"USDC": ("12.50", "0.00")}
            assert dev_platform.balance(payment["payer"]) == 0

            # the order's id as its checkoutUrl shows it (pi_<uuid>) is taken as well as the bare one
            reply = api.post(f"/payment-intents/pi_{order['id']}/refunds", json={"reason": "requested_by_customer"})
            assert reply.status_code == 201, reply.text
            refund = reply.json()["refund"]
            assert refund["status"] == "completed" and refund["txHash"] and refund["completedAt"]
            assert refund["amount"] == "12.5" and refund["destination"] == payment["payer"]
            assert refund["paymentId"] == order["id"] and refund["reason"] == "requested_by_customer"
            assert dev_platform.balance(payment["payer"]) == 12_500_000
            assert _balances(api) == {"USDC": ("0.00", "0.00")}
            assert api.get(f"/payment-intents/{order['id']}").json()["paymentIntent"]["status"] == "refunded"
            assert api.get(f"/refunds/{refund['id']}").json()["refund"] == refund
            listed = api.get("/refunds", params={"paymentId": order["id"]}).json()
            assert [r["id"] for r in listed["data"]] == [refund["id"]] and listed["hasMore"] is False
            assert api.get("/refunds", params={"paymentId": "pi_" + order["id"]}).json() == listed

        wanted = [
            "payment_intent.created",
            "payment_intent.processing",
            "payment_intent.succeeded",
            "refund.processing",
            "refund.completed",
            "payment_intent.refunded",
        ]

        def delivered() -> list[Received]:
            if len(hooks := receiver.at("hooks")) < len(wanted):
                dev_platform.server.call(lambda p: p.webhooks.deliver_due())
            return hooks

        eventually(delivered, until=lambda hooks: len(hooks) >= len(wanted), what=f"the {len(wanted)} events delivered")
        events = [construct_event(r.body, r.headers, secret) for r in receiver.at("hooks")]
        for received in receiver.at("hooks"):
            Webhook(secret).verify(received.body, received.headers)
        assert sorted(e.type for e in events) == sorted(wanted)
        succeeded = next(e for e in events if e.type == "payment_intent.succeeded")
        assert succeeded.data["paymentIntent"]["txHash"] == paid["txHash"]
        completed = next(e for e in events if e.type == "refund.completed")
        assert completed.data["refund"]["txHash"] == refund["txHash"]
    finally:
        receiver.stop()


@pytest.mark.parametrize(
    ("scenario", "status", "received", "exceptions", "credited"),
    [
        ("underpaid", "requires_payment", "1.5", ["underpaid"], None),
        ("overpaid", "succeeded", "3.3", ["overpaid"], "3.30"),
        ("late", "succeeded", "3", ["paid_late"], "3.00"),
        ("wrong_asset", "requires_payment", "0", ["wrong_asset"], None),
    ],
)
def test_the_sandbox_scenarios(
    dev_platform: PlatformHarness,
    scenario: str,
    status: str,
    received: str,
    exceptions: list[str],
    credited: str | None,
) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        order = _order(api, amount="3")
        payment = _pay(api, order, scenario)
        seen = payment["paymentIntent"]
        assert (seen["status"], seen["amountReceived"], seen["exceptions"]) == (status, received, exceptions)
        assert payment["currency"] == ("EURC" if scenario == "wrong_asset" else "USDC")
        assert _balances(api) == ({"USDC": (credited, "0.00")} if credited else {})
        if scenario == "late":
            assert seen["expiresAt"] is not None and seen["paidAt"] is not None
        if status == "requires_payment":
            refused = api.post(f"/payment-intents/{order['id']}/refunds", json={})
            _error(refused, 409, "payment_intent_unexpected_state")


def test_an_underpaid_order_succeeds_once_topped_up(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        order = _order(api, amount="5")
        assert _pay(api, order, "underpaid")["paymentIntent"]["amountReceived"] == "2.5"
        topped = _pay(api, order)["paymentIntent"]
        assert (topped["status"], topped["amountReceived"], topped["exceptions"]) == ("succeeded", "5", [])
        assert _balances(api) == {"USDC": ("5.00", "0.00")}
        refund = api.post(f"/payment-intents/{order['id']}/refunds").json()["refund"]
        assert refund["status"] == "completed" and refund["amount"] == "5"
        assert _balances(api) == {"USDC": ("0.00", "0.00")}


def test_refund_requests_that_are_refused(dev_platform: PlatformHarness) -> None:
    merchant_id, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        order = _order(api, amount="2")
        _error(api.post(f"/payment-intents/{order['id']}/refunds", json={}), 409, "payment_intent_unexpected_state")
        _error(api.post(f"/payment-intents/{uuid.uuid4()}/refunds", json={}), 404, "resource_missing", "id")
        _error(api.post("/payment-intents/not-a-uuid/refunds", json={}), 404, "resource_missing", "id")
        _error(api.get(f"/refunds/{uuid.uuid4()}"), 404, "resource_missing", "id")
        _pay(api, order)
        _error(api.post(f"/payment-intents/{order['id']}/refunds", json={"reason": "x" * 501}), 400, *_param("reason"))
        _error(api.post(f"/payment-intents/{order['id']}/refunds", json={"amount": "1"}), 400, *_param("amount"))
        _error(
            api.post(
                f"/payment-intents/{order['id']}/refunds", content=b"{", headers={"content-type": "application/json"}
            ),
            400,
            "invalid_json",
        )

        async def spend(platform: Any) -> None:  # an operator's correction leaves less than the order
            async with platform.engine.begin() as conn:
                await apply_entry(
                    conn,
                    merchant_id=merchant_id,
                    livemode=False,
                    chain_id=dev_platform.chain.chain_id,
                    currency="USDC",
                    kind="adjustment",
                    reference_id=str(uuid.uuid4()),
                    available_delta=-1_500_000,
                    at=platform.clock.now(),
                )

        dev_platform.server.call(spend)
        assert _balances(api) == {"USDC": ("0.50", "0.00")}
        _error(api.post(f"/payment-intents/{order['id']}/refunds", json={}), 422, "insufficient_balance")
        assert _balances(api) == {"USDC": ("0.50", "0.00")}
        assert api.get("/refunds", params={"paymentId": order["id"]}).json()["data"] == []
        assert api.get(f"/payment-intents/{order['id']}").json()["paymentIntent"]["status"] == "succeeded"


def _param(name: str) -> tuple[str, str]:
    return "parameter_invalid" if name != "amount" else "parameter_unknown", name


@pytest.mark.both_databases  # concurrent refunds: each database's locking
@pytest.mark.parametrize("shared_key", [False, True], ids=["distinct-keys", "one-key"])
def test_concurrent_refunds_transfer_once(dev_platform: PlatformHarness, shared_key: bool) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        order = _order(api, amount="7")
        payer = _pay(api, order)["payer"]

    async def fifty() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=50)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=dev_platform.url, headers=headers, timeout=120, limits=limits) as client:
            shared = str(uuid.uuid4())
            return await asyncio.gather(
                *(
                    client.post(
                        f"/payment-intents/{order['id']}/refunds",
                        json={"reason": "duplicate"},
                        headers={"Idempotency-Key": shared if shared_key else str(uuid.uuid4())},
                    )
                    for _ in range(50)
                )
            )

    replies = asyncio.run(fifty())
    created = [r for r in replies if r.status_code == 201]
    assert created and all(r.status_code in (201, 409) for r in replies), [r.text for r in replies]
    assert len({r.json()["refund"]["id"] for r in created}) == 1
    if not shared_key:
        assert len(created) == 1
        codes = {r.json()["error"]["code"] for r in replies if r.status_code == 409}
        assert codes == {"payment_intent_already_refunded"}

    async def ledger(platform: Any) -> tuple[int, int, int]:
        async with platform.engine.connect() as conn:
            refunds = await conn.scalar(select(func.count()).where(tables.refunds.c.payment_intent_id == order["id"]))
            reserved = await conn.scalar(
                select(func.count()).where(
                    tables.ledger_entries.c.kind == "refund_reserved",
                    tables.ledger_entries.c.reference_id.in_([r.json()["refund"]["id"] for r in created]),
                )
            )
            lowest = await conn.scalar(select(func.min(tables.balances.c.available_minor)))
        return int(refunds or 0), int(reserved or 0), int(lowest or 0)

    assert dev_platform.server.call(ledger) == (1, 1, 0)
    assert dev_platform.balance(payer) == 7_000_000  # one transfer back, not two
    with _api(dev_platform, key) as api:
        assert _balances(api) == {"USDC": ("0.00", "0.00")}


def test_the_sandbox_refuses_live_keys_and_settled_orders(dev_platform: PlatformHarness) -> None:
    merchant_id, key, _ = dev_platform.merchant()
    _, live_key = dev_platform.server.call(lambda p: create_api_key(p.engine, merchant_id, livemode=True))
    with _api(dev_platform, key) as api, _api(dev_platform, live_key) as live:
        order = _order(api, amount="1")
        path = f"/sandbox/payment-intents/{order['id']}/simulate-payment"
        _error(live.post(path, json={}), 400, "livemode_not_allowed")
        _error(api.post(path, json={"scenario": "twice"}), 400, "parameter_invalid", "scenario")
        _error(api.post(path, json={"network": "eip155:1"}), 400, "unsupported_chain", "network")
        _pay(api, order)
        _error(api.post(path, json={}), 409, "payment_intent_unexpected_state")


def _paid_order(harness: PlatformHarness, amount: str) -> tuple[str, str, dict[str, Any]]:
    merchant_id, key, _ = harness.merchant()
    with _api(harness, key) as api:
        payment = _pay(api, _order(api, amount=amount))
    return merchant_id, key, payment


def test_a_refund_sent_before_a_crash_is_found_not_sent_again(dev_platform: PlatformHarness) -> None:
    merchant_id, key, payment = _paid_order(dev_platform, "6")
    order_id = payment["paymentIntent"]["id"]

    async def crash_after_sending(platform: Any) -> str:
        """Reserve, sweep and submit the refund's transfer, then stop as a crashed server would:
        before the transaction hash is written down."""
        refund = await platform.refunds.reserve(merchant_id, False, order_id, None)
        chain = dev_platform.chain
        async with platform.engine.connect() as conn:
            row = (
                (await conn.execute(select(tables.payment_intents).where(tables.payment_intents.c.id == order_id)))
                .mappings()
                .one()
            )
        assert await sweep_order(platform.engine, chain, platform.deposit_keys, platform.refunds.treasury, row, now())
        data, _, _ = authorization_call(
            chain,
            refund["token"],
            platform.refunds.treasury_key,
            refund["destination"],
            refund["amount_minor"],
            b"x402mw refund:" + refund["id"].encode(),
        )
        await chain.wait_for(await chain.relayer.send(refund["token"], data))
        async with platform.engine.begin() as conn:  # the claim runs out
            await conn.execute(
                update(tables.refunds).where(tables.refunds.c.id == refund["id"]).values(locked_until=now())
            )
        return str(refund["id"])

    refund_id = dev_platform.server.call(crash_after_sending)
    with _api(dev_platform, key) as api:
        # The worker (every 2 s) may finish it at any moment. Balances read before a status that is
        # still processing must show the amount reserved (the two change in one transaction).
        balances = _balances(api)
        if api.get(f"/refunds/{refund_id}").json()["refund"]["status"] == "processing":
            assert balances == {"USDC": ("0.00", "6.00")}
        deadline = time.monotonic() + 30  # the worker may take it first: either way it completes
        while (refund := api.get(f"/refunds/{refund_id}").json()["refund"])["status"] == "processing":
            assert time.monotonic() < deadline, refund
            dev_platform.server.call(lambda p: p.refunds.resume_due())
        assert refund["status"] == "completed" and refund["txHash"]
        assert _balances(api) == {"USDC": ("0.00", "0.00")}
    assert dev_platform.balance(payment["payer"]) == 6_000_000  # once


def test_a_refund_still_unconfirmed_is_finished_by_the_worker(anvil_platform: PlatformHarness) -> None:
    merchant_id, key, payment = _paid_order(anvil_platform, "3")
    rpc = anvil_platform.chain.rpc
    order_id = payment["paymentIntent"]["id"]

    async def refund_while_paused(platform: Any) -> dict[str, Any]:
        refund = await platform.refunds.reserve(merchant_id, False, order_id, "late delivery")
        await sweep_pending(platform, order_id)
        await rpc.request("evm_setAutomine", [False])
        try:
            await platform.refunds.send(refund, wait=0.5)
        finally:
            await rpc.request("evm_setAutomine", [True])
        return dict(await platform.refunds.get(refund["id"]))

    async def sweep_pending(platform: Any, order_id: str) -> None:
        async with platform.engine.connect() as conn:
            row = (
                (await conn.execute(select(tables.payment_intents).where(tables.payment_intents.c.id == order_id)))
                .mappings()
                .one()
            )
        chain = anvil_platform.chain
        assert await sweep_order(platform.engine, chain, platform.deposit_keys, platform.refunds.treasury, row, now())

    pending = anvil_platform.server.call(refund_while_paused)
    assert pending["status"] == "processing" and pending["tx_hash"]
    anvil_platform.server.call(lambda p: rpc.request("evm_mine", []))
    with _api(anvil_platform, key) as api:

        def refund_now() -> dict[str, Any]:
            refund: dict[str, Any] = api.get(f"/refunds/{pending['id']}").json()["refund"]
            if refund["status"] == "processing":
                anvil_platform.server.call(lambda p: p.refunds.resume_due())
            return refund

        refund = eventually(
            refund_now, until=lambda refund: refund["status"] != "processing", what="the refund finished"
        )
        assert refund["status"] == "completed" and refund["txHash"] == pending["tx_hash"]
        assert api.get(f"/payment-intents/{order_id}").json()["paymentIntent"]["status"] == "refunded"
    assert anvil_platform.balance(payment["payer"]) == 3_000_000


def now() -> datetime:
    return datetime.now(UTC)


@pytest.mark.both_databases  # the treasury's reservation: each database's locking
def test_a_refund_the_treasury_cannot_cover_fails_and_releases_its_reservation(database: str, tmp_path: Any) -> None:
    # its own platform: this test empties the treasury, which the shared one's other tests rely on
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(postgres_database()) if database == "postgresql" else None
        harness = stack.enter_context(start_dev_platform(tmp_path, url))
        _, key, payment = _paid_order(harness, "4")
        order_id, payer = payment["paymentIntent"]["id"], payment["payer"]
        sink = "0x" + "5e" * 20

        async def sweep_then_drain_the_treasury(platform: Any) -> None:
            """The order's funds reach the treasury, then leave it (an operator's withdrawal)."""
            chain, treasury = harness.chain, platform.refunds.treasury
            async with platform.engine.connect() as conn:
                query = select(tables.payment_intents).where(tables.payment_intents.c.id == order_id)
                row = (await conn.execute(query)).mappings().one()
            assert await sweep_order(platform.engine, chain, platform.deposit_keys, treasury, row, now())
            held = await balance_of(chain.rpc, harness.usdc, treasury)
            data, _, _ = authorization_call(chain, harness.usdc, platform.refunds.treasury_key, sink, held, b"drain")
            assert (await chain.wait_for(await chain.relayer.send(harness.usdc, data))).status == 1

        harness.server.call(sweep_then_drain_the_treasury)
        with _api(harness, key) as api:
            reply = api.post(f"/payment-intents/{order_id}/refunds", json={"reason": "requested_by_customer"})
            assert reply.status_code == 201, reply.text
            refund = reply.json()["refund"]
            assert refund["status"] == "failed" and refund["txHash"] is None
            assert "revert" in refund["failureReason"] and "balance" in refund["failureReason"]
            assert _balances(api) == {"USDC": ("4.00", "0.00")}  # the reservation went back
            assert api.get(f"/payment-intents/{order_id}").json()["paymentIntent"]["status"] == "succeeded"
            kinds = [e["type"] for e in api.get("/events", params={"limit": 100}).json()["data"]]
            assert kinds[:2] == ["refund.failed", "refund.processing"]
            harness.fund(key, harness.platform.refunds.treasury, "4")  # the operator tops it up
            again = api.post(f"/payment-intents/{order_id}/refunds", json={})
            assert again.status_code == 201 and again.json()["refund"]["status"] == "completed", again.text
            assert _balances(api) == {"USDC": ("0.00", "0.00")}
        assert harness.balance(payer) == 4_000_000 and harness.balance(sink) == 4_000_000


def test_a_refund_and_the_balance_keep_the_amount_s_scale(dev_platform: PlatformHarness) -> None:
    """An order sent as ``"25.00"`` is refunded as ``"25.00"`` (answer, list and webhook data alike),
    not ``"25"``; a balance, which has no sent scale, is answered with two decimals at least."""
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        order = _order(api, amount="25.00")
        assert _pay(api, order)["paymentIntent"]["amount"] == "25.00"
        assert _balances(api) == {"USDC": ("25.00", "0.00")}
        refund = api.post(f"/payment-intents/{order['id']}/refunds", json={"reason": "requested_by_customer"})
        assert refund.status_code == 201, refund.text
        assert refund.json()["refund"]["amount"] == "25.00"
        assert _balances(api) == {"USDC": ("0.00", "0.00")}
        assert [r["amount"] for r in api.get("/refunds").json()["data"]] == ["25.00"]
        events = [
            e for e in api.get("/events", params={"limit": 100}).json()["data"] if e["type"].startswith("refund.")
        ]
        assert events and {e["data"]["refund"]["amount"] for e in events} == {"25.00"}
        _pay(api, _order(api, amount="0.125"))
        assert _balances(api) == {"USDC": ("0.125", "0.00")}  # more decimals only when it holds them
