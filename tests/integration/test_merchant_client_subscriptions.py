"""The merchant client's plans, subscriptions, invoices and test clocks against a real platform (dev
chain, SQLite), sync and async: typed answers, money as Decimal, pages, typed errors."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from tests.harness import PlatformHarness
from x402mw.client.merchant import (
    AsyncMerchantClient,
    ConflictError,
    InvalidRequestError,
    Invoice,
    MerchantClient,
    NotFoundError,
    OpenedSubscription,
    Subscription,
    SubscriptionPlan,
)

START = datetime(2026, 1, 31, 10, tzinfo=UTC)


@pytest.fixture
def client(dev_platform: PlatformHarness) -> Iterator[MerchantClient]:
    _, key, _ = dev_platform.merchant()
    with MerchantClient(key, dev_platform.url, timeout=60) as merchant_client:
        yield merchant_client


def test_plans_subscriptions_invoices_and_test_clocks(client: MerchantClient) -> None:
    slug = f"gold-{uuid.uuid4().hex[:8]}"
    plan = client.subscription_plans.create(
        name="Gold", amount=Decimal("19.90"), currency="USDC", interval="quarterly", slug=slug, grace_days=3
    )
    assert isinstance(plan, SubscriptionPlan)
    assert (plan.amount, plan.interval, plan.grace_days, plan.active) == (Decimal("19.9"), "quarterly", 3, True)
    assert plan.checkout_url is not None and f"/su_{slug}." in plan.checkout_url
    assert client.subscription_plans.retrieve(plan.id) == plan
    updated = client.subscription_plans.update(plan.id, name="Gold+", grace_days=None)
    assert (updated.name, updated.grace_days, updated.amount) == ("Gold+", None, Decimal("19.9"))
    others = [
        client.subscription_plans.create(name=f"P{n}", amount="1", currency="USDC", interval="weekly") for n in range(3)
    ]
    listed = [p.id for p in client.subscription_plans.list(limit=2).auto_paging_iter()]
    assert listed == [others[2].id, others[1].id, others[0].id, plan.id]
    client.subscription_plans.update(others[0].id, active=False)
    assert [p.id for p in client.subscription_plans.list(active=False).auto_paging_iter()] == [others[0].id]

    clock = client.test_clocks.create(frozen_time=START)
    assert clock.frozen_time == START and clock.livemode is False
    opened = client.subscriptions.create(
        plan_id=plan.id, merchant_customer_id="cus_client", customer_email="ada@example.com", test_clock=clock.id
    )
    assert isinstance(opened, OpenedSubscription) and isinstance(opened.subscription, Subscription)
    assert (opened.subscription.status, opened.subscription.test_clock) == ("incomplete", clock.id)
    assert opened.invoice is not None and opened.payment_intent is not None
    assert (opened.invoice.period, opened.invoice.amount) == (1, Decimal("19.9"))
    client.sandbox.simulate_payment(opened.payment_intent.id)
    sub = client.subscriptions.retrieve(opened.subscription.id)
    assert (sub.status, sub.current_period_end) == ("active", datetime(2026, 4, 30, 10, tzinfo=UTC))

    advanced = client.test_clocks.advance(clock.id, frozen_time=datetime(2026, 4, 23, 10, tzinfo=UTC))
    assert advanced.frozen_time == datetime(2026, 4, 23, 10, tzinfo=UTC)
    assert client.test_clocks.retrieve(clock.id) == advanced
    invoices = list(client.subscriptions.list_invoices(sub.id, limit=1).auto_paging_iter())
    assert [(i.period, i.status) for i in invoices] == [(2, "open"), (1, "paid")]
    assert all(isinstance(i, Invoice) for i in invoices)
    assert invoices[0].period_end == datetime(2026, 7, 31, 10, tzinfo=UTC)  # quarterly from the 31st
    listed_subs = client.subscriptions.list(customer_id="cus_client", status="active", plan_id=plan.id)
    assert [s.id for s in listed_subs.data] == [sub.id]

    marked = client.subscriptions.cancel(sub.id, at_period_end=True)
    assert (marked.status, marked.cancel_at_period_end) == ("active", True)
    canceled = client.subscriptions.cancel(sub.id)
    assert canceled.status == "canceled"

    with pytest.raises(ConflictError) as conflict:
        client.subscriptions.cancel(sub.id)
    assert conflict.value.code == "subscription_not_cancelable" and conflict.value.request_id
    with pytest.raises(ConflictError) as backwards:
        client.test_clocks.advance(clock.id, frozen_time=START)
    assert (backwards.value.code, backwards.value.param) == ("test_clock_backwards", "frozenTime")
    with pytest.raises(NotFoundError) as missing:
        client.subscriptions.create(plan_id=str(uuid.uuid4()), merchant_customer_id="c")
    assert missing.value.param == "planId"
    with pytest.raises(InvalidRequestError) as invalid:
        client.subscriptions.create(plan_id=plan.id, merchant_customer_id="")
    assert invalid.value.param == "merchantCustomerId"
    with pytest.raises(ValueError, match="timezone-aware"):
        client.test_clocks.create(frozen_time=datetime(2026, 1, 1))


async def _async_flow(url: str, key: str) -> None:
    async with AsyncMerchantClient(key, url, timeout=60) as client:
        plan = await client.subscription_plans.create(name="Async", amount="2", currency="USDC", interval="monthly")
        clock = await client.test_clocks.create(frozen_time=START)
        opened = await client.subscriptions.create(
            plan_id=plan.id, merchant_customer_id="cus_async", test_clock=clock.id
        )
        again = await client.subscriptions.create(plan_id=plan.id, merchant_customer_id="cus_async")
        assert again.subscription.id == opened.subscription.id
        assert opened.payment_intent is not None
        await client.sandbox.simulate_payment(opened.payment_intent.id)
        await client.test_clocks.advance(clock.id, frozen_time=datetime(2026, 2, 21, 10, tzinfo=UTC))
        periods = [
            i.period async for i in client.subscriptions.list_invoices(opened.subscription.id).auto_paging_iter()
        ]
        assert periods == [2, 1]
        page = await client.subscriptions.list(plan_id=plan.id)
        assert [s.status for s in page.data] == ["active"]
        assert (await client.subscription_plans.retrieve(plan.id)).amount == Decimal(2)
        canceled = await client.subscriptions.cancel(opened.subscription.id)
        assert canceled.status == "canceled"


@pytest.mark.anyio
async def test_the_async_client_does_the_same(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    await _async_flow(dev_platform.url, key)
