"""Subscriptions against a real platform (dev chain, SQLite, the worker running; the races on PostgreSQL too): every
row of the transition table of spec 3.3, each driven by a test clock and by real payments (transfers
on the dev chain to the invoice's deposit address), each checking the webhook it sends with
`construct_event`. The reorg row runs on anvil in test_subscription_reorg.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.subscription_fixtures import Shop, SubscriptionPlatform, subscription_platform
from tests.waiting import eventually
from x402mw.platform.services.merchants import create_api_key

START = "2026-01-31T10:00:00Z"  # the 31st: later periods end on the last day of shorter months
CUSTOMER = 'cus 42 ✓ "quoted" \\ /x'  # echoed byte for byte


@pytest.fixture(scope="module")
def subs(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SubscriptionPlatform]:
    with subscription_platform(tmp_path_factory.mktemp(f"subscriptions-{database}"), database) as platform:
        yield platform


@pytest.fixture
def shop(subs: SubscriptionPlatform) -> Shop:
    return subs.shop()


def _active(shop: Shop, customer: str = CUSTOMER, **plan: Any) -> tuple[str, dict[str, Any]]:
    """A test clock at START and a subscription on it whose first invoice is paid."""
    clock = shop.clock(START)
    opened = shop.open(shop.plan(**plan), customer, testClock=clock, customerEmail="ada@example.com")
    shop.pay(opened["paymentIntent"]["id"])
    created = shop.event("created", opened["subscription"]["id"])
    return clock, created.data


def _error(reply: httpx.Response, status: int, code: str, param: str | None = None) -> None:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["code"] == code, error
    assert error["requestId"] == reply.headers["request-id"]
    if param is not None:
        assert error["param"] == param, error


@pytest.mark.both_databases  # concurrent first opens: each database's locking
def test_opening_makes_an_incomplete_subscription_and_opening_again_reuses_it(shop: Shop) -> None:
    plan = shop.plan(amount="12.5")
    opened = shop.open(plan, CUSTOMER, customerEmail="ada@example.com", testClock=shop.clock(START))
    sub, invoice, order = opened["subscription"], opened["invoice"], opened["paymentIntent"]
    assert (sub["status"], sub["merchantCustomerId"], sub["periodsPaid"]) == ("incomplete", CUSTOMER, 0)
    assert sub["currentPeriodEnd"] is None and sub["openInvoiceId"] == invoice["id"]
    assert (invoice["period"], invoice["status"], invoice["amount"], invoice["paymentId"]) == (
        1,
        "open",
        "12.5",
        order["id"],
    )
    assert (order["status"], order["amount"], order["currency"]) == ("requires_payment", "12.5", "USDC")
    assert order["metadata"]["subscriptionId"] == sub["id"] and invoice["checkoutUrl"] == order["checkoutUrl"]
    again = shop.open(plan, CUSTOMER, status=200)
    assert again["subscription"]["id"] == sub["id"] and again["paymentIntent"]["id"] == order["id"]
    # concurrent first opens for one (plan, customer) give one subscription
    with ThreadPoolExecutor(8) as pool:
        replies = list(
            pool.map(
                lambda _: shop.api.post(
                    "/subscriptions", json={"planId": plan["id"], "merchantCustomerId": "cus_race"}
                ),
                range(8),
            )
        )
    assert sorted(r.status_code for r in replies) == [200] * 7 + [201], [r.text for r in replies]
    assert len({r.json()["subscription"]["id"] for r in replies}) == 1
    listed = shop.ok(shop.api.get("/subscriptions", params={"customerId": "cus_race"}))["data"]
    assert len(listed) == 1
    assert shop.kinds(sub["id"]) == []  # nothing is sent before a payment
    # an Idempotency-Key replays the first answer (201) rather than answering the reuse (200)
    keyed = {"planId": plan["id"], "merchantCustomerId": "cus_keyed"}
    first = shop.api.post("/subscriptions", json=keyed, headers={"Idempotency-Key": "open-cus_keyed"})
    replayed = shop.api.post("/subscriptions", json=keyed, headers={"Idempotency-Key": "open-cus_keyed"})
    assert (first.status_code, replayed.status_code) == (201, 201)
    assert replayed.headers["idempotent-replayed"] == "true" and replayed.json() == first.json()


def test_the_first_confirmed_payment_activates_it(shop: Shop) -> None:
    clock = shop.clock(START)
    opened = shop.open(shop.plan(), CUSTOMER, testClock=clock)
    sub_id = opened["subscription"]["id"]
    paid = shop.pay(opened["paymentIntent"]["id"])
    assert paid["paymentIntent"]["status"] == "succeeded"
    event = shop.event("created", sub_id)
    sub = event.data["subscription"]
    assert sub["merchantCustomerId"] == CUSTOMER
    assert (sub["status"], sub["periodsPaid"], sub["testClock"]) == ("active", 1, clock)
    # the anchor is the payment's time on the subscription's clock
    assert (sub["currentPeriodStart"], sub["currentPeriodEnd"]) == (
        "2026-01-31T10:00:00.000Z",
        "2026-02-28T10:00:00.000Z",
    )
    assert (event.data["invoice"]["status"], event.data["invoice"]["periodEnd"]) == ("paid", "2026-02-28T10:00:00.000Z")
    assert event.data["paymentIntent"]["status"] == "succeeded"
    assert event.data["paymentIntent"]["txHash"] == paid["txHash"]
    answered = shop.subscription(sub_id)
    assert sub["customerPageUrl"] is None  # the customer's page link is in the API's answers, never in events
    assert answered == sub | {"customerPageUrl": answered["customerPageUrl"]}
    assert httpx.get(answered["customerPageUrl"], timeout=60).status_code == 200


def test_a_renewal_paid_in_time_extends_the_period_from_its_end(shop: Shop) -> None:
    clock, data = _active(shop)
    sub_id = data["subscription"]["id"]
    shop.advance(clock, "2026-02-21T09:59:59Z")
    assert [i["period"] for i in shop.invoices(sub_id)] == [1]  # a second before the 7-day lead
    shop.advance(clock, "2026-02-21T10:00:00Z")
    renewal = shop.invoices(sub_id)[0]
    assert (renewal["period"], renewal["status"], renewal["periodStart"], renewal["periodEnd"]) == (
        2,
        "open",
        "2026-02-28T10:00:00.000Z",
        "2026-03-31T10:00:00.000Z",
    )
    assert shop.subscription(sub_id)["openInvoiceId"] == renewal["id"]
    shop.advance(clock, "2026-02-24T00:00:00Z")
    shop.pay(renewal["paymentId"])
    renewed = shop.event("renewed", sub_id)
    sub = renewed.data["subscription"]
    assert (sub["status"], sub["periodsPaid"], sub["openInvoiceId"]) == ("active", 2, None)
    assert (sub["currentPeriodStart"], sub["currentPeriodEnd"]) == (
        "2026-02-28T10:00:00.000Z",
        "2026-03-31T10:00:00.000Z",
    )
    assert (renewed.data["invoice"]["id"], renewed.data["invoice"]["status"]) == (renewal["id"], "paid")
    assert renewed.data["paymentIntent"]["status"] == "succeeded"
    assert sub["merchantCustomerId"] == CUSTOMER
    shop.advance(clock, "2026-03-24T10:00:00Z")  # the third period's invoice opened, only one at a time
    invoices = shop.invoices(sub_id)
    assert [(i["period"], i["status"]) for i in invoices] == [(3, "open"), (2, "paid"), (1, "paid")]
    assert invoices[0]["periodEnd"] == "2026-04-30T10:00:00.000Z"


def test_a_period_ending_unpaid_goes_past_due_and_a_payment_within_grace_renews_it(shop: Shop) -> None:
    clock, data = _active(shop)
    sub_id = data["subscription"]["id"]
    shop.advance(clock, "2026-02-28T10:00:00Z")
    past_due = shop.event("past_due", sub_id)
    sub, invoice, order = past_due.data["subscription"], past_due.data["invoice"], past_due.data["paymentIntent"]
    assert (sub["status"], sub["pastDueAt"], sub["merchantCustomerId"]) == (
        "past_due",
        "2026-02-28T10:00:00.000Z",
        CUSTOMER,
    )
    assert (invoice["period"], invoice["status"]) == (2, "open")
    assert (order["id"], order["status"]) == (invoice["paymentId"], "requires_payment")
    shop.advance(clock, "2026-03-06T10:00:00Z")  # six days late, within the 7-day grace
    assert shop.subscription(sub_id)["status"] == "past_due"
    shop.pay(invoice["paymentId"])
    renewed = shop.event("renewed", sub_id)
    sub = renewed.data["subscription"]
    assert (sub["status"], sub["pastDueAt"], sub["periodsPaid"]) == ("active", None, 2)
    # extended from the end of the paid period: paying late gives no free days
    assert (sub["currentPeriodStart"], sub["currentPeriodEnd"]) == (
        "2026-02-28T10:00:00.000Z",
        "2026-03-31T10:00:00.000Z",
    )
    assert shop.kinds(sub_id) == ["subscription.created", "subscription.past_due", "subscription.renewed"]


def test_grace_passing_without_a_payment_expires_it(shop: Shop) -> None:
    clock, data = _active(shop, graceDays=3)
    sub_id = data["subscription"]["id"]
    shop.advance(clock, "2026-03-03T09:59:59Z")
    assert shop.event("past_due", sub_id).data["subscription"]["status"] == "past_due"
    assert shop.subscription(sub_id)["status"] == "past_due"
    shop.advance(clock, "2026-03-10T00:00:00Z")
    expired = shop.event("expired", sub_id)
    sub, invoice, order = expired.data["subscription"], expired.data["invoice"], expired.data["paymentIntent"]
    assert (sub["status"], sub["endedAt"], sub["merchantCustomerId"]) == (
        "expired",
        "2026-03-03T10:00:00.000Z",
        CUSTOMER,
    )
    assert (invoice["status"], order["status"]) == ("void", "canceled")
    assert shop.order(order["id"])["status"] == "canceled"
    # the customer may subscribe again: a new subscription
    reopened = shop.open({"id": sub["planId"]}, CUSTOMER, status=201)
    assert reopened["subscription"]["id"] != sub_id
    _error(shop.api.post(f"/subscriptions/{sub_id}/cancel"), 409, "subscription_not_cancelable")


def test_cancelling_now_ends_it_and_voids_the_open_invoice(shop: Shop) -> None:
    clock, data = _active(shop)
    sub_id = data["subscription"]["id"]
    shop.advance(clock, "2026-02-22T00:00:00Z")  # a renewal invoice is open
    renewal = shop.invoices(sub_id)[0]
    canceled = shop.ok(shop.api.post(f"/subscriptions/{sub_id}/cancel"))["subscription"]
    assert (canceled["status"], canceled["canceledAt"], canceled["openInvoiceId"]) == (
        "canceled",
        "2026-02-22T00:00:00.000Z",
        None,
    )
    event = shop.event("canceled", sub_id)
    assert event.data["subscription"]["status"] == "canceled"
    assert event.data["subscription"]["merchantCustomerId"] == CUSTOMER
    assert (event.data["invoice"]["id"], event.data["invoice"]["status"]) == (renewal["id"], "void")
    assert event.data["paymentIntent"]["status"] == "canceled"
    assert shop.order(renewal["paymentId"])["status"] == "canceled"
    _error(
        shop.api.post(f"/subscriptions/{sub_id}/cancel", json={"atPeriodEnd": True}), 409, "subscription_not_cancelable"
    )
    assert shop.subscription(sub_id) == canceled
    # an incomplete subscription can be cancelled too; its first order goes with it
    opened = shop.open(shop.plan(), "cus_incomplete")
    shop.ok(shop.api.post(f"/subscriptions/{opened['subscription']['id']}/cancel", json={}))
    assert shop.order(opened["paymentIntent"]["id"])["status"] == "canceled"
    assert shop.event("canceled", opened["subscription"]["id"]).data["invoice"]["status"] == "void"


def test_cancelling_at_period_end_keeps_it_until_then(shop: Shop) -> None:
    clock, data = _active(shop)
    sub_id = data["subscription"]["id"]
    marked = shop.ok(shop.api.post(f"/subscriptions/{sub_id}/cancel", json={"atPeriodEnd": True}))["subscription"]
    assert (marked["status"], marked["cancelAtPeriodEnd"]) == ("active", True)
    again = shop.ok(shop.api.post(f"/subscriptions/{sub_id}/cancel", json={"atPeriodEnd": True}))["subscription"]
    assert again == marked
    shop.advance(clock, "2026-02-27T10:00:00Z")
    assert [i["period"] for i in shop.invoices(sub_id)] == [1]  # no renewal is billed
    assert shop.subscription(sub_id)["status"] == "active"
    shop.advance(clock, "2026-02-28T10:00:00Z")
    event = shop.event("canceled", sub_id)
    sub = event.data["subscription"]
    assert (sub["status"], sub["endedAt"], sub["cancelAtPeriodEnd"]) == ("canceled", "2026-02-28T10:00:00.000Z", True)
    assert (event.data["invoice"], event.data["paymentIntent"]) == (None, None)
    assert shop.kinds(sub_id) == ["subscription.created", "subscription.canceled"]


@pytest.mark.both_databases  # two payments at once: each database's locking
def test_payments_of_one_invoice_count_once(shop: Shop) -> None:
    clock = shop.clock(START)
    opened = shop.open(shop.plan(amount="2"), "cus_twice", testClock=clock)
    sub_id, order_id = opened["subscription"]["id"], opened["paymentIntent"]["id"]
    address = shop.deposit_address(order_id)
    with ThreadPoolExecutor(2) as pool:  # two payments of the whole invoice at once
        list(pool.map(lambda _: shop.transfer(address, Decimal(2)), range(2)))
    shop.event("created", sub_id)
    order = eventually(lambda: shop.order(order_id), until=lambda o: o["amountReceived"] == "4", what="both transfers")
    assert order["exceptions"] == ["overpaid"]
    shop.advance(clock, "2026-02-21T10:00:00Z")
    renewal = shop.invoices(sub_id)[0]
    address = shop.deposit_address(renewal["paymentId"])
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda _: shop.transfer(address, Decimal(2)), range(2)))
    shop.event("renewed", sub_id)
    renewal_id = renewal["paymentId"]
    eventually(
        lambda: shop.order(renewal_id), until=lambda o: o["amountReceived"] == "4", what="both renewal transfers"
    )
    sub = shop.subscription(sub_id)
    assert (sub["periodsPaid"], sub["currentPeriodEnd"]) == (2, "2026-03-31T10:00:00.000Z")
    assert shop.kinds(sub_id) == ["subscription.created", "subscription.renewed"]


def test_the_worker_leaves_test_clock_subscriptions_to_their_clock(shop: Shop) -> None:
    clock = shop.clock("2020-01-01T00:00:00Z")  # everything on it is long due in real time
    opened = shop.open(shop.plan(interval="weekly"), "cus_weekly", testClock=clock)
    sub_id = opened["subscription"]["id"]
    shop.pay(opened["paymentIntent"]["id"])
    # the worker delivers webhooks after running the subscriptions due: once this one has arrived, a
    # pass has run since the payment, and one more after the next
    shop.event("created", sub_id)
    other = shop.open(shop.plan(), "cus_other")
    shop.ok(shop.api.post(f"/subscriptions/{other['subscription']['id']}/cancel"))
    shop.event("canceled", other["subscription"]["id"])
    sub = shop.subscription(sub_id)
    assert (sub["status"], sub["openInvoiceId"], sub["currentPeriodEnd"]) == (
        "active",
        None,
        "2020-01-08T00:00:00.000Z",
    )
    assert len(shop.invoices(sub_id)) == 1
    shop.advance(clock, "2020-01-06T00:00:00Z")  # weekly plans open their renewal 2 days ahead
    renewal = shop.invoices(sub_id)[0]
    assert (renewal["period"], renewal["periodEnd"]) == (2, "2020-01-15T00:00:00.000Z")


def test_a_new_amount_applies_to_invoices_opened_afterwards_and_an_inactive_plan_renews(shop: Shop) -> None:
    clock = shop.clock(START)
    plan = shop.plan(amount="5")
    opened = shop.open(plan, "cus_price", testClock=clock)
    updated = shop.ok(shop.api.patch(f"/subscription-plans/{plan['id']}", json={"amount": "7.25", "active": False}))
    assert (updated["plan"]["amount"], updated["plan"]["active"]) == ("7.25", False)
    assert shop.order(opened["paymentIntent"]["id"])["amount"] == "5"  # the open invoice keeps its amount
    _error(
        shop.api.post("/subscriptions", json={"planId": plan["id"], "merchantCustomerId": "cus_new"}),
        409,
        "plan_inactive",
        "planId",
    )
    assert shop.open(plan, "cus_price", status=200)["subscription"]["id"] == opened["subscription"]["id"]
    shop.pay(opened["paymentIntent"]["id"])
    shop.event("created", opened["subscription"]["id"])
    shop.advance(clock, "2026-02-21T10:00:00Z")
    renewal = shop.invoices(opened["subscription"]["id"])[0]
    assert (renewal["period"], renewal["amount"]) == (2, "7.25")
    assert shop.order(renewal["paymentId"])["amount"] == "7.25"


def test_amounts_keep_the_scale_they_were_sent_with(shop: Shop) -> None:
    """A plan sent as ``"9.90"`` answers ``"9.90"``, and so do its invoices, their orders, the
    webhooks and the refund of a paid invoice; a new amount keeps its own scale from then on."""
    clock = shop.clock(START)
    plan = shop.plan(amount="9.90")
    assert plan["amount"] == "9.90"
    assert shop.ok(shop.api.get(f"/subscription-plans/{plan['id']}"))["plan"]["amount"] == "9.90"
    opened = shop.open(plan, "cus_scale", testClock=clock)
    sub_id = opened["subscription"]["id"]
    assert (opened["invoice"]["amount"], opened["paymentIntent"]["amount"]) == ("9.90", "9.90")
    shop.pay(opened["paymentIntent"]["id"])
    created = shop.event("created", sub_id)
    assert (created.data["invoice"]["amount"], created.data["paymentIntent"]["amount"]) == ("9.90", "9.90")
    refund = shop.ok(shop.api.post(f"/payment-intents/{opened['paymentIntent']['id']}/refunds", json={}), 201)
    assert refund["refund"]["amount"] == "9.90"
    updated = shop.ok(shop.api.patch(f"/subscription-plans/{plan['id']}", json={"amount": "12.500"}))
    assert updated["plan"]["amount"] == "12.500"
    shop.advance(clock, "2026-02-21T10:00:00Z")
    renewal, first = shop.invoices(sub_id)
    assert (renewal["amount"], first["amount"]) == ("12.500", "9.90")
    assert shop.order(renewal["paymentId"])["amount"] == "12.500"


def test_plan_slugs_are_per_merchant_and_an_old_bare_address_keeps_its_plan(subs: SubscriptionPlatform) -> None:
    """Two merchants may each name a plan ``pro-…``: neither learns the other uses it. Each plan's
    ``checkoutUrl`` carries its merchant and opens its own subscribe page; the bare ``su_<slug>`` of
    the time slugs were one namespace still opens the plan that held it (the oldest)."""
    first, second = subs.shop("First shop"), subs.shop("Second shop")
    slug = f"pro-{uuid.uuid4().hex[:8]}"
    mine = first.plan(slug=slug, name="First plan")
    theirs = second.plan(slug=slug, name="Second plan")
    assert theirs["slug"] == mine["slug"] == slug
    assert mine["checkoutUrl"].endswith(f"/su_{slug}.{first.merchant_id}")
    assert theirs["checkoutUrl"].endswith(f"/su_{slug}.{second.merchant_id}")
    again = first.api.post(
        "/subscription-plans",
        json={"name": "Again", "amount": "1", "currency": "USDC", "interval": "weekly", "slug": slug},
    )
    _error(again, 409, "slug_taken", "slug")
    assert again.json()["error"]["message"].startswith("You already have a plan with the slug")
    base = mine["checkoutUrl"].rsplit("/", 1)[0]
    with httpx.Client(timeout=60) as browser:
        for url, name in [(mine["checkoutUrl"], "First plan"), (theirs["checkoutUrl"], "Second plan")]:
            page = browser.get(url)
            assert page.status_code == 200 and name in page.text, url
        legacy = browser.get(f"{base}/su_{slug}")
        assert legacy.status_code == 200 and "First plan" in legacy.text and "Second plan" not in legacy.text
        assert browser.get(f"{base}/su_{slug}.{uuid.uuid4()}").status_code == 404


def test_lists_filter_and_page(shop: Shop) -> None:
    plans = [shop.plan(name=f"Plan {n}") for n in range(3)]
    first = shop.open(plans[0], "cus_a")["subscription"]
    second = shop.open(plans[1], "cus_a")["subscription"]
    third = shop.open(plans[1], "cus_b")["subscription"]
    shop.ok(shop.api.post(f"/subscriptions/{third['id']}/cancel"))

    def ids(**params: str) -> list[str]:
        return [s["id"] for s in shop.ok(shop.api.get("/subscriptions", params=params))["data"]]

    assert ids(customerId="cus_a") == [second["id"], first["id"]]
    assert ids(planId=plans[1]["id"]) == [third["id"], second["id"]]
    assert ids(status="canceled") == [third["id"]]
    assert ids(status="incomplete", customerId="cus_a", planId=plans[0]["id"]) == [first["id"]]
    page = shop.ok(shop.api.get("/subscriptions", params={"limit": "1", "starting_after": third["id"]}))
    assert ([s["id"] for s in page["data"]], page["hasMore"]) == ([second["id"]], True)
    listed = shop.ok(shop.api.get("/subscription-plans", params={"limit": "2"}))
    assert ([p["id"] for p in listed["data"]], listed["hasMore"]) == ([plans[2]["id"], plans[1]["id"]], True)
    assert shop.ok(shop.api.get(f"/subscription-plans/{plans[0]['id']}"))["plan"] == plans[0]
    _error(shop.api.get("/subscriptions", params={"status": "paused"}), 400, "parameter_invalid", "status")
    _error(shop.api.get("/subscriptions", params={"planId": "nope"}), 400, "parameter_invalid", "planId")


def test_bad_input_is_refused_with_a_code_and_changes_nothing(subs: SubscriptionPlatform, shop: Shop) -> None:
    post = shop.api.post
    good = {"name": "Pro", "amount": "9.99", "currency": "USDC", "interval": "monthly"}
    for field, value, code in [
        ("interval", "daily", "parameter_invalid"),
        ("amount", "0", "parameter_invalid"),
        ("amount", "1.0000001", "parameter_invalid"),
        ("amount", "-1", "parameter_invalid"),
        ("currency", "DAI", "parameter_invalid"),
        ("slug", "Not A Slug", "parameter_invalid"),
        ("graceDays", -1, "parameter_invalid"),
    ]:
        _error(post("/subscription-plans", json=good | {field: value}), 400, code, field)
    _error(
        post("/subscription-plans", json={k: v for k, v in good.items() if k != "name"}),
        400,
        "parameter_missing",
        "name",
    )
    assert shop.ok(shop.api.get("/subscription-plans"))["data"] == []
    slug = f"pro-{uuid.uuid4().hex[:8]}"
    plan = shop.plan(slug=slug)
    assert plan["checkoutUrl"].endswith(f"/su_{slug}.{shop.merchant_id}")
    _error(post("/subscription-plans", json=good | {"slug": slug}), 409, "slug_taken", "slug")
    _error(
        shop.api.patch(f"/subscription-plans/{plan['id']}", json={"amount": None}), 400, "parameter_invalid", "amount"
    )
    cleared = shop.ok(shop.api.patch(f"/subscription-plans/{plan['id']}", json={"graceDays": None}))["plan"]
    assert cleared["graceDays"] is None

    other = subs.shop("Another shop")
    foreign = other.plan()
    clock = shop.clock(START)
    for body, status, code, param in [
        ({"planId": str(uuid.uuid4()), "merchantCustomerId": "c"}, 404, "resource_missing", "planId"),
        ({"planId": foreign["id"], "merchantCustomerId": "c"}, 404, "resource_missing", "planId"),
        ({"planId": plan["id"], "merchantCustomerId": ""}, 400, "parameter_invalid", "merchantCustomerId"),
        ({"planId": plan["id"]}, 400, "parameter_missing", "merchantCustomerId"),
        (
            {"planId": plan["id"], "merchantCustomerId": "c", "customerEmail": "nope"},
            400,
            "parameter_invalid",
            "customerEmail",
        ),
        (
            {"planId": plan["id"], "merchantCustomerId": "c", "testClock": str(uuid.uuid4())},
            404,
            "resource_missing",
            "testClock",
        ),
        (
            {"planId": plan["id"], "merchantCustomerId": "c", "testClock": other.clock(START)},
            404,
            "resource_missing",
            "testClock",
        ),
        ({"planId": "not-an-id", "merchantCustomerId": "c"}, 400, "parameter_invalid", "planId"),
        ({"planId": plan["id"], "merchantCustomerId": "c", "trialDays": 3}, 400, "parameter_unknown", "trialDays"),
    ]:
        _error(post("/subscriptions", json=body), status, code, param)
    assert shop.ok(shop.api.get("/subscriptions"))["data"] == []
    _error(shop.api.get(f"/subscription-plans/{foreign['id']}"), 404, "resource_missing")
    sub = other.open(foreign, "theirs")["subscription"]
    for path in (f"/subscriptions/{sub['id']}", f"/subscriptions/{sub['id']}/invoices"):
        _error(shop.api.get(path), 404, "resource_missing")
    _error(post(f"/subscriptions/{sub['id']}/cancel"), 404, "resource_missing")
    assert other.subscription(sub["id"])["status"] == "incomplete"

    # test clocks: forward only, real dates, test keys only
    _error(
        post(f"/test-clocks/{clock}/advance", json={"frozenTime": "2026-01-30T10:00:00Z"}),
        409,
        "test_clock_backwards",
        "frozenTime",
    )
    _error(
        post(f"/test-clocks/{clock}/advance", json={"frozenTime": "2026-02-30T10:00:00Z"}),
        400,
        "parameter_invalid",
        "frozenTime",
    )
    _error(post("/test-clocks", json={"frozenTime": "2026-01-31T10:00:00"}), 400, "parameter_invalid", "frozenTime")
    _error(post("/test-clocks", json={"frozenTime": "1999-12-31T10:00:00Z"}), 400, "parameter_invalid", "frozenTime")
    assert shop.ok(shop.api.get(f"/test-clocks/{clock}"))["testClock"]["frozenTime"] == "2026-01-31T10:00:00.000Z"
    _error(shop.api.get(f"/test-clocks/{other.clock(START)}"), 404, "resource_missing")
    _, live_key = shop.harness.server.call(lambda p: create_api_key(p.engine, shop.merchant_id, livemode=True))
    with httpx.Client(base_url=shop.harness.url, headers={"Authorization": f"Bearer {live_key}"}, timeout=60) as live:
        _error(live.post("/test-clocks", json={"frozenTime": START}), 400, "livemode_not_allowed")
        _error(live.post(f"/test-clocks/{clock}/advance", json={"frozenTime": START}), 400, "livemode_not_allowed")
        # this platform has no live chain: a live plan could never be paid
        _error(live.post("/subscription-plans", json=good), 400, "currency_unavailable", "currency")
        body = {"planId": plan["id"], "merchantCustomerId": "c", "testClock": clock}
        _error(live.post("/subscriptions", json=body), 400, "livemode_not_allowed", "testClock")
        _error(live.get(f"/subscription-plans/{plan['id']}"), 404, "resource_missing")  # modes do not mix
        assert live.get("/subscriptions").json()["data"] == []


def test_a_plans_return_url_is_where_its_invoices_checkout_returns(shop: Shop) -> None:
    """Each invoice's order (the first and a renewal) carries the plan's ``returnUrl`` as its
    ``successUrl``; a PATCH changes it for invoices opened afterwards, and ``null`` removes it."""
    clock = shop.clock(START)
    plan = shop.plan(returnUrl="https://shop.example/account")
    assert plan["returnUrl"] == "https://shop.example/account"
    opened = shop.open(plan, "cus_return", testClock=clock)
    assert opened["paymentIntent"]["successUrl"] == "https://shop.example/account"
    shop.pay(opened["paymentIntent"]["id"])
    shop.event("created", opened["subscription"]["id"])
    changed = shop.ok(
        shop.api.patch(f"/subscription-plans/{plan['id']}", json={"returnUrl": "https://shop.example/me"})
    )
    assert changed["plan"]["returnUrl"] == "https://shop.example/me"
    shop.advance(clock, "2026-02-21T10:00:00Z")  # the renewal invoice opens
    renewal = shop.invoices(opened["subscription"]["id"])[0]
    order = shop.ok(shop.api.get(f"/payment-intents/{renewal['paymentId']}"))["paymentIntent"]
    assert order["successUrl"] == "https://shop.example/me"
    cleared = shop.ok(shop.api.patch(f"/subscription-plans/{plan['id']}", json={"returnUrl": None}))
    assert cleared["plan"]["returnUrl"] is None
    refused = shop.api.post(
        "/subscription-plans",
        json={"name": "Pro", "amount": "1", "currency": "USDC", "interval": "monthly", "returnUrl": "javascript:x"},
    )
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "returnUrl", refused.text
