"""The worker's subscription duties on the platform's one clock (a `ManualClock` moved by the test):
renewals, reminders, period ends and grace of the platform's subscriptions, never those on test
clocks; emails sent at least once; several workers running each action once. The background worker
is off: each duty runs where the test calls it, as the worker's loop would."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import func, select

from tests.subscription_fixtures import Shop, SubscriptionPlatform, iso_day, subscription_platform
from tests.waiting import eventually
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.clock import ManualClock
from x402mw.platform.db import tables
from x402mw.platform.emails.outbox import LEASE

pytestmark = pytest.mark.both_databases  # several workers run each action once: each database's claims

START = "2026-01-31T10:00:00Z"


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    return ManualClock(time.time())


@pytest.fixture(scope="module")
def subs(database: str, clock: ManualClock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SubscriptionPlatform]:
    workdir = tmp_path_factory.mktemp(f"subscription-worker-{database}")
    with subscription_platform(workdir, database, run_worker=False, clock=clock) as platform:
        yield platform


def _duty(shop: Shop, name: str) -> Any:
    """Run one of the worker's duties now."""
    duties = {
        "subscriptions": lambda p: p.renewals.run_due(),
        "emails": lambda p: p.emails.send_due(),
        "webhooks": lambda p: p.webhooks.deliver_due(),
    }
    return shop.harness.server.call(duties[name])


def _event(shop: Shop, kind: str, sub_id: str) -> Any:
    _duty(shop, "webhooks")
    return shop.event(kind, sub_id)


def test_the_worker_runs_the_platform_s_subscriptions_on_the_platform_clock(
    subs: SubscriptionPlatform, clock: ManualClock
) -> None:
    shop = subs.shop()
    to = f"weekly-{time.monotonic_ns()}@example.com"
    opened = shop.open(shop.plan(interval="weekly", amount="1.5"), "cus_real", customerEmail=to)
    sub_id = opened["subscription"]["id"]
    test_clock = shop.clock("2020-01-01T00:00:00Z")  # its subscriptions are long due in real time
    on_clock = shop.open(shop.plan(interval="weekly"), "cus_clock", testClock=test_clock)
    shop.pay(on_clock["paymentIntent"]["id"])
    shop.pay(opened["paymentIntent"]["id"])
    created = _event(shop, "created", sub_id).data["subscription"]
    start, end = iso_day(created["currentPeriodStart"]), iso_day(created["currentPeriodEnd"])
    assert end - start == timedelta(days=7) and created["testClock"] is None

    assert _duty(shop, "subscriptions") == 0  # nothing is due yet; the test clock's subscription waits for its clock
    clock.advance(days=5)  # two days before the period ends: the renewal opens
    assert _duty(shop, "subscriptions") == 1
    renewal = shop.invoices(sub_id)[0]
    assert (renewal["period"], renewal["status"], iso_day(renewal["periodEnd"]) - end) == (2, "open", timedelta(days=7))
    assert len(shop.invoices(on_clock["subscription"]["id"])) == 1
    assert _duty(shop, "emails") == 1
    assert subs.mailbox is not None and len(subs.mailbox.find(to, "renewal: 1.5 USDC to pay")) == 1

    clock.advance(days=2, seconds=1)  # past the reminder and the period's end
    assert _duty(shop, "subscriptions") == 2
    assert _event(shop, "past_due", sub_id).data["subscription"]["pastDueAt"] == created["currentPeriodEnd"]
    assert _duty(shop, "emails") == 2  # the reminder and the past-due notice
    clock.advance(days=7)
    assert _duty(shop, "subscriptions") == 1
    expired = _event(shop, "expired", sub_id).data
    assert (expired["subscription"]["status"], expired["paymentIntent"]["status"]) == ("expired", "canceled")
    assert shop.subscription(on_clock["subscription"]["id"])["status"] == "active"


def _pending_email(shop: Shop, sub_id: str) -> dict[str, Any]:
    async def read(platform: Any) -> dict[str, Any]:
        emails = tables.subscription_emails
        async with platform.engine.connect() as conn:
            row = (await conn.execute(select(emails).where(emails.c.subscription_id == sub_id))).mappings().one()
        return dict(row)

    return shop.harness.server.call(read)


def test_emails_are_sent_at_least_once(subs: SubscriptionPlatform, clock: ManualClock) -> None:
    mailbox = subs.mailbox
    assert mailbox is not None
    shop = subs.shop()
    to = f"once-{time.monotonic_ns()}@example.com"
    test_clock = shop.clock(START)
    opened = shop.open(shop.plan(), "cus_mail", testClock=test_clock, customerEmail=to)
    sub_id = opened["subscription"]["id"]
    shop.pay(opened["paymentIntent"]["id"])
    shop.advance(test_clock, "2026-02-21T10:00:00Z")  # queues the renewal email
    mailbox.stop()
    try:
        assert _duty(shop, "emails") == 0
    finally:
        mailbox.start()
    failed = _pending_email(shop, sub_id)
    assert (failed["status"], failed["attempts"]) == ("pending", 1) and "Error" in failed["last_error"]
    assert _duty(shop, "emails") == 0  # not due again before its retry time
    clock.advance(minutes=2)
    assert _duty(shop, "emails") == 1
    assert len(mailbox.find(to, "renewal")) == 1
    assert _pending_email(shop, sub_id)["status"] == "sent"

    # a worker that stops while the server holds the message: after the lease, the email goes again
    shop.advance(test_clock, "2026-02-27T10:00:00Z")  # queues the reminder
    mailbox.gate.clear()
    try:
        with pytest.raises(TimeoutError):
            shop.harness.server.call(lambda p: asyncio.wait_for(p.emails.send_due(), 1.0))
    finally:
        mailbox.gate.set()
    clock.advance(seconds=LEASE.total_seconds() + 1)
    assert _duty(shop, "emails") == 1
    reminders = eventually(
        lambda: mailbox.find(to, "ends tomorrow"), until=lambda found: len(found) == 2, what="the reminder sent twice"
    )
    assert reminders[0]["Message-ID"] == reminders[1]["Message-ID"]  # the same email, which receivers deduplicate


def test_concurrent_workers_run_each_action_once(subs: SubscriptionPlatform) -> None:
    shop = subs.shop()
    test_clock = shop.clock(START)
    plan = shop.plan()
    ids = []
    for n in range(10):
        opened = shop.open(plan, f"cus_{n}", testClock=test_clock, customerEmail=f"c{n}@example.com")
        shop.pay(opened["paymentIntent"]["id"])
        ids.append(opened["subscription"]["id"])
    renew_at = iso_day("2026-02-21T10:00:00Z")

    async def two_workers(platform: Any) -> list[int]:
        run = platform.renewals.run_due
        return list(
            await asyncio.gather(
                run(test_clock_id=test_clock, now=renew_at, batch=3),
                run(test_clock_id=test_clock, now=renew_at, batch=3),
            )
        )

    ran = shop.harness.server.call(two_workers)
    assert sum(ran) == 10

    async def counts(platform: Any) -> tuple[int, int, int]:
        invoices, emails, events = tables.subscription_invoices, tables.subscription_emails, tables.events
        async with platform.engine.connect() as conn:
            renewals = await conn.scalar(
                select(func.count()).where(invoices.c.subscription_id.in_(ids), invoices.c.period == 2)
            )
            queued = await conn.scalar(select(func.count()).where(emails.c.subscription_id.in_(ids)))
            created = await conn.scalar(
                select(func.count()).where(
                    events.c.merchant_id == shop.merchant_id, events.c.type == "payment_intent.created"
                )
            )
        return int(renewals or 0), int(queued or 0), int(created or 0)

    assert shop.harness.server.call(counts) == (10, 10, 20)  # 10 first orders, 10 renewal orders


def _balances(shop: Shop) -> dict[str, tuple[str, str]]:
    data = shop.ok(shop.api.get("/balances"))["data"]
    return {b["currency"]: (b["available"], b["reserved"]) for b in data}


def _watch(shop: Shop, step: str) -> None:
    """One step of the deposit watcher: ``scan`` (the payment is seen: processing) or ``confirm``
    (it has its confirmations: succeeded), the latter by two workers at once."""

    async def run(platform: Any) -> None:
        if step == "scan":
            await platform.watcher.scan(shop.harness.chain)
        else:
            await asyncio.gather(platform.watcher.confirm(), platform.watcher.confirm())

    shop.harness.server.call(run)


def _refund_events(shop: Shop, order_id: str) -> list[tuple[str, str, str | None]]:
    _duty(shop, "webhooks")
    found = [e for e in shop.events() if e.type.startswith(("refund.", "payment_intent."))]
    about = [
        e
        for e in found
        if (e.data.get("refund") or {}).get("paymentId") == order_id
        or (e.data.get("paymentIntent") or {}).get("id") == order_id
    ]
    return [
        (
            e.type,
            (e.data.get("refund") or e.data["paymentIntent"])["status"],
            (e.data.get("refund") or {}).get("reason"),
        )
        for e in sorted(about, key=lambda e: (e.created_at, e.id))
    ]


@pytest.mark.parametrize("cancel", ["while_processing", "before_payment"])
def test_a_renewal_payment_landing_after_a_cancel_is_refunded_to_its_payer_once(
    subs: SubscriptionPlatform, cancel: str
) -> None:
    """The race of issue 21: the customer's renewal payment is on its way (seen on-chain, not yet
    confirmed) when the merchant cancels, or arrives after the cancel. The payment is taken, then
    refunded whole to the wallet that paid, and the webhooks say so; the merchant keeps nothing."""
    shop = subs.shop()
    test_clock = shop.clock(START)
    opened = shop.open(shop.plan(amount="2.50"), "cus_race", testClock=test_clock)
    sub_id = opened["subscription"]["id"]
    shop.pay(opened["paymentIntent"]["id"])
    shop.advance(test_clock, "2026-02-22T00:00:00Z")  # the renewal invoice opens
    renewal = shop.invoices(sub_id)[0]
    order_id = renewal["paymentId"]
    address = shop.deposit_address(order_id)
    before = _balances(shop)
    assert before == {"USDC": ("2.50", "0.00")}
    buyer = new_private_key()
    if cancel == "before_payment":
        shop.ok(shop.api.post(f"/subscriptions/{sub_id}/cancel"))
        assert shop.order(order_id)["status"] == "canceled"
    shop.transfer(address, Decimal("2.5"), buyer)
    assert shop.harness.balance(address_of(buyer)) == 0
    _watch(shop, "scan")
    assert shop.order(order_id)["status"] == "processing"
    if cancel == "while_processing":
        shop.ok(shop.api.post(f"/subscriptions/{sub_id}/cancel"))
        assert shop.order(order_id)["status"] == "processing"  # a payment on its way is left to finish
    _watch(shop, "confirm")
    assert _balances(shop) == {"USDC": ("2.50", "2.50")}  # credited, and the refund reserved from it
    assert shop.harness.server.call(lambda p: p.refunds.resume_due()) == 1
    assert shop.harness.server.call(lambda p: p.refunds.resume_due()) == 0

    assert shop.harness.balance(address_of(buyer)) == 2_500_000  # the payer has the money back
    assert _balances(shop) == before
    order = shop.order(order_id)
    assert order["status"] == "refunded"
    assert order["exceptions"] == ([] if cancel == "while_processing" else ["paid_late"])
    assert (shop.invoices(sub_id)[0]["status"], shop.subscription(sub_id)["status"]) == ("void", "canceled")
    [refund] = shop.ok(shop.api.get("/refunds", params={"paymentId": order_id}))["data"]
    assert (refund["status"], refund["amount"], refund["destination"], refund["reason"]) == (
        "completed",
        "2.50",  # the plan's amount as it was sent
        address_of(buyer),
        "subscription_canceled",
    )
    late = [("payment_intent.canceled", "canceled", None)] if cancel == "before_payment" else []
    assert sorted(_refund_events(shop, order_id)) == sorted(  # on the platform's clock, which stood still
        [
            ("payment_intent.created", "requires_payment", None),
            *late,
            ("payment_intent.processing", "processing", None),
            ("payment_intent.succeeded", "succeeded", None),
            ("refund.processing", "processing", "subscription_canceled"),
            ("refund.completed", "completed", "subscription_canceled"),
            ("payment_intent.refunded", "refunded", None),
        ]
    )
    assert sorted(shop.kinds(sub_id)) == ["subscription.canceled", "subscription.created"]  # never renewed

    _watch(shop, "confirm")  # the worker's later rounds change nothing
    assert shop.harness.server.call(lambda p: p.refunds.resume_due()) == 0
    assert len(shop.ok(shop.api.get("/refunds", params={"paymentId": order_id}))["data"]) == 1
