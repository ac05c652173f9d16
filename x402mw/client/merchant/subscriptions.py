"""``/subscription-plans``, ``/subscriptions`` and ``/test-clocks``: prices per interval, customers'
subscriptions with their invoices, and (test mode) clocks to run their months in seconds.

>>> plan = client.subscription_plans.create(name="Pro", amount="9.99", currency="USDC", interval="monthly")
>>> opened = client.subscriptions.create(plan_id=plan.id, merchant_customer_id="cus_42", customer_email="a@b.example")
>>> opened.payment_intent.checkout_url        # send the customer there; grant access on subscription.created

Entitlements follow the ``subscription.*`` webhooks, never the checkout's redirect.

To send a signed-in customer to a plan's hosted subscribe page under your own id for them, sign the
link (without a signature, an id you append is only a new visitor's choice: the page never shows an
existing subscription to it):

>>> url = signed_subscribe_url(plan.checkout_url, "cus_42", "sk_test_...")
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from x402mw.client.merchant.calls import Call, Listing, path
from x402mw.client.merchant.payment_intents import PaymentIntent
from x402mw.client.merchant.resource import (
    NOT_GIVEN,
    APIObject,
    Collection,
    Mode,
    NotGiven,
    Resource,
    list_params,
    listing_of,
    money,
    operation,
    paginated,
    present,
)
from x402mw.protocol.customer_signatures import customer_signature, signing_key

Interval = Literal["weekly", "monthly", "quarterly", "yearly"]


def signed_subscribe_url(
    checkout_url: str,
    customer: str,
    api_key: str,
    *,
    expires_in: timedelta = timedelta(hours=1),
    now: float | None = None,
) -> str:
    """``checkout_url`` (a plan's hosted subscribe page) with ``?customer=`` signed by ``api_key`` (a
    key of the plan's mode) until ``expires_in`` from ``now`` (unix seconds; default: the current
    time). The page then takes the visitor as your customer ``customer``: one with a subscription to
    the plan already is led to it. Make a link for each visit (it is a key to that customer's
    subscription until it expires); a revoked key's links stop working."""
    if not customer:
        raise ValueError("customer is the merchant's id of the customer: not empty")
    expires = int((time.time() if now is None else now) + expires_in.total_seconds())
    parts = urlsplit(checkout_url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("customer", "expires", "signature")]
    query += [
        ("customer", customer),
        ("expires", str(expires)),
        ("signature", customer_signature(signing_key(api_key), customer, expires)),
    ]
    return urlunsplit(parts._replace(query=urlencode(query)))


class SubscriptionPlan(APIObject):
    """A price per ``interval``; send customers to ``checkout_url`` (the hosted subscribe page)."""

    id: str
    object: str = "subscription_plan"
    name: str
    slug: str | None = None
    amount: Decimal
    currency: str
    interval: str
    active: bool = True
    grace_days: int | None = None
    return_url: str | None = None
    checkout_url: str | None = None
    livemode: bool
    created_at: datetime
    updated_at: datetime


class Subscription(APIObject):
    """A customer's subscription. ``status``: ``incomplete`` (first invoice unpaid), ``active``,
    ``past_due`` (a renewal unpaid, within grace), ``canceled`` or ``expired``.
    ``current_period_end`` is the end of the paid period."""

    id: str
    object: str = "subscription"
    plan_id: str
    status: str
    merchant_customer_id: str
    customer_email: str | None = None
    cancel_at_period_end: bool = False
    current_period_start: datetime | None = None
    current_period_end: datetime | None = None
    periods_paid: int = 0
    open_invoice_id: str | None = None
    past_due_at: datetime | None = None
    canceled_at: datetime | None = None
    ended_at: datetime | None = None
    test_clock: str | None = None
    customer_page_url: str | None = None
    livemode: bool
    created_at: datetime
    updated_at: datetime


class Invoice(APIObject):
    """The bill of billing period ``period`` (1 is the first), paid through the payment order
    ``payment_id``; ``status`` is ``open``, ``paid`` or ``void``."""

    id: str
    object: str = "invoice"
    subscription_id: str
    period: int
    status: str
    amount: Decimal
    currency: str
    period_start: datetime | None = None
    period_end: datetime | None = None
    payment_id: str
    checkout_url: str | None = None
    paid_at: datetime | None = None
    voided_at: datetime | None = None
    livemode: bool
    created_at: datetime
    updated_at: datetime


class OpenedSubscription(APIObject):
    """What opening a subscription answers (and what ``subscription.*`` events carry)."""

    subscription: Subscription
    invoice: Invoice | None = None
    payment_intent: PaymentIntent | None = None


class TestClock(APIObject):
    """A test-mode clock; subscriptions opened on it live at ``frozen_time``."""

    __test__ = False  # not a pytest test class, whatever its name

    id: str
    object: str = "test_clock"
    frozen_time: datetime
    livemode: bool = False
    created_at: datetime
    updated_at: datetime


_plans = Collection("/subscription-plans", SubscriptionPlan, "plan")
_subscriptions = Collection("/subscriptions", Subscription, "subscription")
_clocks = Collection("/test-clocks", TestClock, "testClock")


class SubscriptionPlans(Resource[Mode]):
    """``client.subscription_plans``: create, retrieve, update and list plans."""

    @operation
    def create(
        self,
        *,
        name: str,
        amount: Decimal | str | int,
        currency: str,
        interval: Interval,
        slug: str | None = None,
        grace_days: int | None = None,
        return_url: str | None = None,
        idempotency_key: str | None = None,
    ) -> Call[SubscriptionPlan]:
        """A plan charging ``amount`` of ``currency`` per ``interval``. ``slug`` names it in its
        checkout link (409 ``slug_taken`` when another of your plans has it); ``grace_days`` overrides the
        platform's grace period; ``return_url`` is where customers return to your shop (after paying an
        invoice, and from their customer page)."""
        body = present(
            name=name,
            amount=money(amount, "amount"),
            currency=currency,
            interval=interval,
            slug=slug,
            grace_days=grace_days,
            return_url=return_url,
        )
        return _plans.create(body, idempotency_key)

    @operation
    def retrieve(self, plan_id: str) -> Call[SubscriptionPlan]:
        return _plans.retrieve(plan_id)

    @operation
    def update(
        self,
        plan_id: str,
        *,
        name: str | None = None,
        amount: Decimal | str | int | None = None,
        active: bool | None = None,
        grace_days: int | NotGiven | None = NOT_GIVEN,
        return_url: str | NotGiven | None = NOT_GIVEN,
    ) -> Call[SubscriptionPlan]:
        """Change the given fields only. A new ``amount`` applies to invoices opened afterwards;
        ``active=False`` stops new subscriptions (open ones renew); ``grace_days=None`` goes back to
        the platform's grace period; ``return_url=None`` removes the way back to your shop."""
        body = present(name=name, amount=None if amount is None else money(amount, "amount"), active=active)
        if not isinstance(grace_days, NotGiven):
            body["graceDays"] = grace_days
        if not isinstance(return_url, NotGiven):
            body["returnUrl"] = return_url
        return _plans.update(plan_id, body)

    @paginated
    def list(
        self,
        *,
        active: bool | None = None,
        limit: int | None = None,
        starting_after: str | None = None,
        ending_before: str | None = None,
    ) -> Call[Listing[SubscriptionPlan]]:
        """Plans, newest first; ``active`` keeps the active (or inactive) ones."""
        wire_active = None if active is None else ("true" if active else "false")
        return _plans.list(active=wire_active, limit=limit, starting_after=starting_after, ending_before=ending_before)


class Subscriptions(Resource[Mode]):
    """``client.subscriptions``: open, retrieve, list and cancel subscriptions, and list their invoices."""

    @operation
    def create(
        self,
        *,
        plan_id: str,
        merchant_customer_id: str,
        customer_email: str | None = None,
        test_clock: str | None = None,
        idempotency_key: str | None = None,
    ) -> Call[OpenedSubscription]:
        """Open a subscription for your customer ``merchant_customer_id`` (or answer the one open
        already for this plan and customer), with its current invoice and payment order: send the
        customer to ``payment_intent.checkout_url``. ``customer_email`` gets renewal invoices and
        reminders; ``test_clock`` (test keys) puts the subscription on a test clock."""
        body = present(
            plan_id=plan_id,
            merchant_customer_id=merchant_customer_id,
            customer_email=customer_email,
            test_clock=test_clock,
        )
        return Call(
            "POST", "/subscriptions", OpenedSubscription.model_validate, body=body, idempotency_key=idempotency_key
        )

    @operation
    def retrieve(self, subscription_id: str) -> Call[Subscription]:
        return _subscriptions.retrieve(subscription_id)

    @operation
    def cancel(
        self, subscription_id: str, *, at_period_end: bool = False, idempotency_key: str | None = None
    ) -> Call[Subscription]:
        """Cancel now (its open invoice voided), or with ``at_period_end`` when the paid period ends.
        409 ``subscription_not_cancelable`` once it ended."""
        body = {"atPeriodEnd": True} if at_period_end else {}
        return _subscriptions.action(subscription_id, "cancel", body=body, idempotency_key=idempotency_key)

    @paginated
    def list(
        self,
        *,
        customer_id: str | None = None,
        plan_id: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        starting_after: str | None = None,
        ending_before: str | None = None,
    ) -> Call[Listing[Subscription]]:
        """Subscriptions, newest first; of one customer (your id), one plan, or in one status."""
        return _subscriptions.list(
            customer_id=customer_id,
            plan_id=plan_id,
            status=status,
            limit=limit,
            starting_after=starting_after,
            ending_before=ending_before,
        )

    @paginated
    def list_invoices(
        self,
        subscription_id: str,
        *,
        limit: int | None = None,
        starting_after: str | None = None,
        ending_before: str | None = None,
    ) -> Call[Listing[Invoice]]:
        """The subscription's invoices, one per billing period, newest first."""
        params = list_params(limit=limit, starting_after=starting_after, ending_before=ending_before)
        return Call("GET", path("/subscriptions/{}/invoices", subscription_id), listing_of(Invoice), params=params)


class TestClocks(Resource[Mode]):
    """``client.test_clocks`` (test keys only): clocks that subscriptions opened on them live by."""

    __test__ = False  # not a pytest test class, whatever its name

    @operation
    def create(self, *, frozen_time: datetime, idempotency_key: str | None = None) -> Call[TestClock]:
        """A clock standing at ``frozen_time`` (timezone-aware)."""
        body = {"frozenTime": _rfc3339(frozen_time)}
        return _clocks.create(body, idempotency_key)

    @operation
    def retrieve(self, test_clock_id: str) -> Call[TestClock]:
        return _clocks.retrieve(test_clock_id)

    @operation
    def advance(
        self, test_clock_id: str, *, frozen_time: datetime, idempotency_key: str | None = None
    ) -> Call[TestClock]:
        """Move the clock forward to ``frozen_time``; returns once every renewal, reminder, period end
        and expiry due on it has run (409 ``test_clock_backwards`` for an earlier time)."""
        body = {"frozenTime": _rfc3339(frozen_time)}
        return _clocks.action(test_clock_id, "advance", body=body, idempotency_key=idempotency_key)


def _rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("frozen_time must be timezone-aware, e.g. datetime(2026, 1, 31, tzinfo=UTC)")
    return moment.isoformat()
