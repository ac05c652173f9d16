"""The subscription objects of the API: plans, subscriptions, invoices and test clocks."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from x402mw.platform.objects.base import Currency, Envelope, ListPage, Money, ResponseModel, Timestamp, Url
from x402mw.platform.objects.payments import PaymentIntent

Interval = Literal["weekly", "monthly", "quarterly", "yearly"]


class SubscriptionPlan(ResponseModel):
    """A subscription plan: a price per interval."""

    id: str
    object: Literal["subscription_plan"] = "subscription_plan"
    name: str
    slug: str | None = Field(description="names the plan in its checkout link instead of its id")
    amount: Money
    currency: Currency
    interval: Interval
    active: bool = Field(description="an inactive plan opens no new subscriptions; open ones renew")
    grace_days: int | None = Field(description="days a past-due subscription is kept; null: the platform's")
    return_url: Url | None = Field(
        description="where customers return to the shop: after paying an invoice (its `successUrl`) and from "
        "the customer page"
    )
    checkout_url: str = Field(
        description="`{checkout_url_base}/su_<slug>.<merchant id>` (with a slug) or `su_<id>`: the subscribe page"
    )
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp


class SubscriptionPlanEnvelope(Envelope):
    """A plan, as its operations answer it."""

    plan: SubscriptionPlan


class SubscriptionPlanList(ListPage[SubscriptionPlan]):
    """A page of SubscriptionPlan objects, newest first."""


class Subscription(ResponseModel):
    """A customer's subscription to a plan."""

    id: str
    object: Literal["subscription"] = "subscription"
    plan_id: str
    status: Literal["incomplete", "active", "past_due", "canceled", "expired"]
    merchant_customer_id: str = Field(description="the merchant's customer id, exactly as it was sent")
    customer_email: str | None
    cancel_at_period_end: bool
    current_period_start: Timestamp | None
    current_period_end: Timestamp | None = Field(description="the end of the paid period")
    periods_paid: int
    open_invoice_id: str | None = Field(description="the invoice awaiting payment, if any")
    past_due_at: Timestamp | None
    canceled_at: Timestamp | None
    ended_at: Timestamp | None
    test_clock: str | None = Field(description="the test clock it lives on, if any")
    customer_page_url: str | None = Field(
        None,
        description="the customer's own page of it (status, invoices, pay, cancel): a signed link for the "
        "customer alone, to offer as 'manage my subscription'. In the API's answers; null in webhook events",
    )
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp


class SubscriptionEnvelope(Envelope):
    """A subscription, as its operations answer it."""

    subscription: Subscription


class SubscriptionList(ListPage[Subscription]):
    """A page of Subscription objects, newest first."""


class Invoice(ResponseModel):
    """The bill of one billing period, paid through its own payment order."""

    id: str
    object: Literal["invoice"] = "invoice"
    subscription_id: str
    period: int = Field(description="which period of the subscription it bills: 1 is the first")
    status: Literal["open", "paid", "void"]
    amount: Money
    currency: Currency
    period_start: Timestamp | None = Field(description="null for a first invoice until it is paid")
    period_end: Timestamp | None
    payment_id: str = Field(description="its payment order (payment intent)")
    checkout_url: str = Field(description="the payment order's hosted checkout page")
    paid_at: Timestamp | None
    voided_at: Timestamp | None
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp


class InvoiceList(ListPage[Invoice]):
    """A page of Invoice objects, newest first."""


class TestClock(ResponseModel):
    """A test-mode clock that subscriptions opened on it live by."""

    __test__ = False  # not a pytest test class, whatever its name

    id: str
    object: Literal["test_clock"] = "test_clock"
    frozen_time: Timestamp
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp


class TestClockEnvelope(Envelope):
    """A test clock, as its operations answer it."""

    __test__ = False

    test_clock: TestClock


class SubscriptionOpened(ResponseModel):
    """What opening a subscription answers, and what subscription events carry."""

    subscription: Subscription
    invoice: Invoice | None
    payment_intent: PaymentIntent | None


class SubscriberEmail(ResponseModel):
    """An email to a subscriber that could not be sent: the data of ``email.failed``."""

    id: str
    object: Literal["subscription_email"] = "subscription_email"
    kind: str = Field(description="subscribed, access, invoice_opened, reminder or past_due")
    to: str = Field(description="the address it was for, as the subscription has it")
    subscription_id: str
    invoice_id: str | None
    status: Literal["failed"]
    attempts: int = Field(description="sends tried; an email that cannot be built is not sent at all")
    failure_reason: str
    livemode: bool
    created_at: Timestamp


class SubscriberEmailEnvelope(Envelope):
    """A subscriber email, as the data of its events."""

    email: SubscriberEmail
