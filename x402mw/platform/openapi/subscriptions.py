"""The OpenAPI document's subscriptions: plans, subscriptions with their invoices, and test clocks.

Request bodies come from the handlers' models, answers from the response models of
`x402mw.platform.objects.subscriptions`; what is written here is the operations' metadata (see
`x402mw.platform.openapi.document`)."""

from __future__ import annotations

from pydantic import BaseModel

from x402mw.platform.api.clocks import ClockAdvance, ClockCreate
from x402mw.platform.api.subscription_plans import PlanCreate, PlanUpdate
from x402mw.platform.api.subscriptions import MAX_CUSTOMER_ID, STATUSES, SubscriptionCancel, SubscriptionCreate
from x402mw.platform.objects.subscriptions import (
    InvoiceList,
    SubscriptionEnvelope,
    SubscriptionList,
    SubscriptionOpened,
    SubscriptionPlanEnvelope,
    SubscriptionPlanList,
    TestClockEnvelope,
)
from x402mw.platform.openapi.operations import LIST_PARAMS, UUID, operation, query
from x402mw.platform.openapi.schemas import TEXT, Schema, enum

__all__ = ["BODY_MODELS", "FIELD_NOTES", "LINKS", "TAGS", "operations"]

PLANS, SUBSCRIPTIONS, CLOCKS = "Subscription plans", "Subscriptions", "Test clocks"
TAGS = [
    (PLANS, "Prices per week, month, quarter or year that subscriptions are opened on."),
    (
        SUBSCRIPTIONS,
        "Customers' subscriptions: each period has an invoice with a payment order the customer pays; "
        "webhooks (`subscription.*`) say when access starts, renews, lapses and ends.",
    ),
    (CLOCKS, "Test mode: clocks moved by hand, on which subscriptions live, to run months in seconds."),
]
BODY_MODELS: list[type[BaseModel]] = [
    PlanCreate,
    PlanUpdate,
    SubscriptionCreate,
    SubscriptionCancel,
    ClockCreate,
    ClockAdvance,
]
_AMOUNT = (
    'decimal amount per period, greater than 0, at most 6 decimals and 1,000,000,000; a string such as `"9.99"` '
    "is recommended, JSON numbers are read exactly"
)
_GRACE = "days a past-due subscription is kept before it expires, 0–365; null or absent: the platform's (7 by default)"
_TIME = "RFC 3339 timestamp with a timezone, in the years 2000–2199"
FIELD_NOTES: dict[str, dict[str, str]] = {
    "PlanCreate": {
        "name": "shown to customers on the subscribe page and in emails, 1–200 characters",
        "amount": _AMOUNT,
        "currency": "the coin customers pay in",
        "interval": "the length of a billing period",
        "slug": "names the plan in its checkout link (`su_<slug>.<merchant id>`) instead of its id: 1–32 "
        "lower-case letters, digits and inner hyphens, unique among the merchant's plans (`409 slug_taken`)",
        "graceDays": _GRACE,
    },
    "PlanUpdate": {
        "name": "1–200 characters",
        "amount": _AMOUNT + "; applies to invoices opened after the change",
        "active": "false: the plan opens no new subscriptions (`409 plan_inactive`); open ones keep renewing",
        "graceDays": _GRACE,
    },
    "SubscriptionCreate": {
        "planId": "an active plan of the merchant's",
        "merchantCustomerId": f"the merchant's own id of the customer, 1–{MAX_CUSTOMER_ID} characters; echoed "
        "unchanged in every webhook",
        "customerEmail": "where renewal invoices, reminders and past-due notices are sent: exactly one address "
        "(`local@domain.example`), no list, group or display name",
        "testClock": "test keys only: a test clock of the merchant's, whose time the subscription lives by",
    },
    "SubscriptionCancel": {
        "atPeriodEnd": "false (default): cancel now; true: an active subscription ends with its paid period"
    },
    "ClockCreate": {"frozenTime": "the clock's time: " + _TIME},
    "ClockAdvance": {"frozenTime": "the clock's new time, not before its current one: " + _TIME},
}
LINKS: list[tuple[str, str, str, str, list[str]]] = [
    ("createSubscriptionPlan", "201", "/plan/id", "plan_id", ["retrieveSubscriptionPlan", "updateSubscriptionPlan"]),
    (
        "createSubscription",
        "201",
        "/subscription/id",
        "subscription_id",
        ["retrieveSubscription", "listSubscriptionInvoices", "cancelSubscription"],
    ),
    ("createTestClock", "201", "/testClock/id", "test_clock_id", ["retrieveTestClock", "advanceTestClock"]),
]


def operations() -> list[tuple[str, str, Schema]]:
    return [*_plan_operations(), *_subscription_operations(), *_clock_operations()]


def _plan_operations() -> list[tuple[str, str, Schema]]:
    one = "/v1/subscription-plans/{plan_id}"
    return [
        operation(
            "POST",
            "/v1/subscription-plans",
            "createSubscriptionPlan",
            PLANS,
            "Create a plan",
            "Send customers to its `checkoutUrl` (the hosted subscribe page), or open subscriptions with "
            "`POST /v1/subscriptions`. 409 `slug_taken` when another of your plans has the slug; 400 "
            "`currency_unavailable` when no chain of the platform carries the coin.",
            SubscriptionPlanEnvelope,
            status=201,
            body="PlanCreate",
            errors=(409,),
        ),
        operation(
            "GET",
            "/v1/subscription-plans",
            "listSubscriptionPlans",
            PLANS,
            "List plans",
            "Newest first.",
            SubscriptionPlanList,
            query=[
                *LIST_PARAMS,
                query("active", "only active (`true`) or inactive (`false`) plans", enum("true", "false")),
            ],
            errors=(400, 404),
        ),
        operation(
            "GET",
            one,
            "retrieveSubscriptionPlan",
            PLANS,
            "Retrieve a plan",
            "",
            SubscriptionPlanEnvelope,
            errors=(404,),
        ),
        operation(
            "PATCH",
            one,
            "updateSubscriptionPlan",
            PLANS,
            "Update a plan",
            "`name`, `amount`, `active` and `graceDays`. A new amount applies to invoices opened afterwards; "
            "invoices already open keep theirs.",
            SubscriptionPlanEnvelope,
            body="PlanUpdate",
            errors=(404,),
        ),
    ]


def _subscription_operations() -> list[tuple[str, str, Schema]]:
    one = "/v1/subscriptions/{subscription_id}"
    return [
        _created_or_reused(
            operation(
                "POST",
                "/v1/subscriptions",
                "createSubscription",
                SUBSCRIPTIONS,
                "Open a subscription",
                "201 with a new subscription in `incomplete`, its first invoice and that invoice's payment "
                "order: send the customer to `paymentIntent.checkoutUrl`. When the customer has an open "
                "subscription to the plan already, 200 with it, its unpaid invoice and payment order (or "
                "its latest invoice). 404 for an unknown plan or test clock; 409 `plan_inactive` for a new "
                "subscription to an inactive plan; 409 `customer_unverified` when the open one was opened on "
                "the hosted subscribe page by a visitor who chose the customer id, for another email than "
                "`customerEmail` (cancel it if it is not your customer's); 400 `livemode_not_allowed` for "
                "`testClock` with a live key.",
                SubscriptionOpened,
                status=201,
                body="SubscriptionCreate",
                errors=(404, 409),
            )
        ),
        operation(
            "GET",
            "/v1/subscriptions",
            "listSubscriptions",
            SUBSCRIPTIONS,
            "List subscriptions",
            "Newest first, optionally of one customer, one plan, or in one status.",
            SubscriptionList,
            query=[
                *LIST_PARAMS,
                query(
                    "customerId",
                    "only this customer's (the `merchantCustomerId`)",
                    TEXT | {"minLength": 1, "maxLength": MAX_CUSTOMER_ID},
                ),
                query("planId", "only this plan's", UUID),
                query("status", "only those in this status", enum(*STATUSES)),
            ],
            errors=(400, 404),
        ),
        operation(
            "GET",
            one,
            "retrieveSubscription",
            SUBSCRIPTIONS,
            "Retrieve a subscription",
            "",
            SubscriptionEnvelope,
            errors=(404,),
        ),
        operation(
            "GET",
            one + "/invoices",
            "listSubscriptionInvoices",
            SUBSCRIPTIONS,
            "List a subscription's invoices",
            "One per billing period, newest first.",
            InvoiceList,
            query=LIST_PARAMS,
            errors=(400, 404),
        ),
        operation(
            "POST",
            one + "/cancel",
            "cancelSubscription",
            SUBSCRIPTIONS,
            "Cancel a subscription",
            "Now by default: `canceled`, its open invoice voided and that invoice's payment order cancelled, "
            "`subscription.canceled` sent. With `atPeriodEnd: true`, an active subscription gets "
            "`cancelAtPeriodEnd` and is cancelled when its paid period ends. 409 "
            "`subscription_not_cancelable` once canceled or expired; 409 `subscription_not_active` for "
            "`atPeriodEnd` on one that is not active.",
            SubscriptionEnvelope,
            body="SubscriptionCancel",
            errors=(404, 409),
        ),
    ]


def _created_or_reused(entry: tuple[str, str, Schema]) -> tuple[str, str, Schema]:
    method, path, operation = entry
    created = operation["responses"]["201"]
    operation["responses"]["200"] = {**created, "description": "The customer's open subscription, reused"}
    return method, path, operation


def _clock_operations() -> list[tuple[str, str, Schema]]:
    one = "/v1/test-clocks/{test_clock_id}"
    return [
        operation(
            "POST",
            "/v1/test-clocks",
            "createTestClock",
            CLOCKS,
            "Create a test clock",
            "Test keys only (400 `livemode_not_allowed`).",
            TestClockEnvelope,
            status=201,
            body="ClockCreate",
        ),
        operation(
            "GET",
            one,
            "retrieveTestClock",
            CLOCKS,
            "Retrieve a test clock",
            "",
            TestClockEnvelope,
            errors=(404,),
        ),
        operation(
            "POST",
            one + "/advance",
            "advanceTestClock",
            CLOCKS,
            "Advance a test clock",
            "Moves the clock forward and answers once every renewal invoice, reminder, period end, "
            "cancellation and expiry that falls due on its subscriptions up to the new time has run, "
            "in order. 409 `test_clock_backwards` for a time before the clock's; test keys only.",
            TestClockEnvelope,
            body="ClockAdvance",
            errors=(404, 409),
        ),
    ]
