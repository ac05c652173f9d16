"""``/subscriptions``: a merchant's customers' subscriptions, their invoices, and cancelling (spec 2.4, 4.3).

``POST /subscriptions`` answers ``{subscription, invoice, paymentIntent}``: 201 with a new
subscription (``incomplete``, its first invoice and payment order open), or 200 with the one already
open for the same plan and customer (and its unpaid invoice's payment order, while there is one);
409 ``customer_unverified`` when that one was opened on the hosted subscribe page by a visitor who
chose the customer id, for another email than ``customerEmail``. A subscription answered here carries
``customerPageUrl``, the customer's signed page link.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool
from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.db import tables
from x402mw.platform.http.bodies import parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import Email, Uuid
from x402mw.platform.http.pagination import list_answer, query_id
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import LIST_PARAMS, TEXT, UUID, Answer, ApiRoute, Operation, enum, query
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.subscriptions import (
    Invoice,
    InvoiceList,
    Subscription,
    SubscriptionEnvelope,
    SubscriptionList,
    SubscriptionOpened,
)
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.subscriptions.objects import find_owned, invoice_of, opened_of, subscription_of

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

MAX_CUSTOMER_ID = 500
STATUSES = ("incomplete", "active", "past_due", "canceled", "expired")


class SubscriptionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    planId: Uuid = Field(description="an active plan of the merchant's")
    merchantCustomerId: str = Field(
        min_length=1,
        max_length=MAX_CUSTOMER_ID,
        description="the merchant's own id of the customer, 1–500 characters; echoed unchanged in every webhook",
    )
    customerEmail: Email | None = Field(
        default=None,
        description="where renewal invoices, reminders and past-due notices are sent: exactly one address "
        "(`local@domain.example`), no list, group or display name",
    )
    testClock: Uuid | None = Field(
        default=None, description="test keys only: a test clock of the merchant's, whose time the subscription lives by"
    )


class SubscriptionCancel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    atPeriodEnd: StrictBool = Field(
        default=False, description="false (default): cancel now; true: an active subscription ends with its paid period"
    )


def _refused(exc: ServiceError) -> HttpError:
    return HttpError(exc.status, exc.code, exc.message, param=exc.param)


async def create(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(SubscriptionCreate, await read_json(request))
    if body.testClock is not None and caller.livemode:
        raise HttpError(400, "livemode_not_allowed", "Test clocks are for test keys only", param="testClock")
    platform = platform_of(request)
    service = platform.subscriptions
    try:
        opened = await service.open(
            caller.merchant_id,
            caller.livemode,
            body.planId,
            body.merchantCustomerId,
            body.customerEmail,
            body.testClock,
        )
    except ServiceError as exc:
        raise _refused(exc) from None
    page = service.links.page_url(str(opened.subscription["id"]))
    answer = opened_of(opened.subscription, opened.invoice, opened.order, service.base, page)
    return ModelResponse(answer, status_code=201 if opened.created else 200)


def _subscription(platform: Platform, row: Mapping[Any, Any]) -> Subscription:
    return subscription_of(row, platform.subscriptions.links.page_url(str(row["id"])))


def _subscription_id(request: Request) -> str:
    return path_uuid(request, "subscription_id", "subscription")


async def retrieve(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    subscription_id = _subscription_id(request)
    platform = platform_of(request)
    async with platform.engine.connect() as conn:
        row = await find_owned(conn, "subscriptions", caller.merchant_id, caller.livemode, subscription_id)
    if row is None:
        raise HttpError.missing("subscription", subscription_id)
    return ModelResponse(SubscriptionEnvelope(subscription=_subscription(platform, row)))


async def list_subscriptions(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    platform = platform_of(request)
    table = tables.subscriptions
    filters = caller.owns(table)
    customer = request.query_params.get("customerId")
    if customer is not None:
        if not 1 <= len(customer) <= MAX_CUSTOMER_ID:
            message = f"customerId must be 1-{MAX_CUSTOMER_ID} characters"
            raise HttpError(400, "parameter_invalid", message, param="customerId")
        filters.append(table.c.merchant_customer_id == customer)
    plan_id = query_id(request, "planId")
    if plan_id is not None:
        filters.append(table.c.plan_id == plan_id)
    status = request.query_params.get("status")
    if status is not None:
        if status not in STATUSES:
            message = f"status must be one of {', '.join(STATUSES)}"
            raise HttpError(400, "parameter_invalid", message, param="status")
        filters.append(table.c.status == status)
    return await list_answer(
        platform.engine, table, filters, request, lambda row: _subscription(platform, row), SubscriptionList
    )


async def list_invoices(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    subscription_id = _subscription_id(request)
    platform = platform_of(request)
    table = tables.subscription_invoices
    base = platform.settings.checkout_url_base

    def render(row: Any) -> Invoice:
        return invoice_of(row, base)

    async with platform.engine.connect() as conn:
        if await find_owned(conn, "subscriptions", caller.merchant_id, caller.livemode, subscription_id) is None:
            raise HttpError.missing("subscription", subscription_id)
    filters = [*caller.owns(table), table.c.subscription_id == subscription_id]
    return await list_answer(platform.engine, table, filters, request, render, InvoiceList)


async def cancel(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    subscription_id = _subscription_id(request)
    body = parse_body(SubscriptionCancel, await read_json(request, allow_empty=True))
    platform = platform_of(request)
    try:
        row = await platform.subscriptions.cancel(
            caller.merchant_id, caller.livemode, subscription_id, at_period_end=body.atPeriodEnd
        )
    except ServiceError as exc:
        raise _refused(exc) from None
    if row is None:
        raise HttpError.missing("subscription", subscription_id)
    return ModelResponse(SubscriptionEnvelope(subscription=_subscription(platform, row)))


_TAG = "Subscriptions"
routes = [
    ApiRoute(
        "POST",
        "/subscriptions",
        create,
        Operation(
            id="createSubscription",
            tag=_TAG,
            summary="Open a subscription",
            description="201 with a new subscription in `incomplete`, its first invoice and that invoice's payment "
            "order: send the customer to `paymentIntent.checkoutUrl`. When the customer has an open "
            "subscription to the plan already, 200 with it, its unpaid invoice and payment order (or "
            "its latest invoice). 404 for an unknown plan or test clock; 409 `plan_inactive` for a new "
            "subscription to an inactive plan; 409 `customer_unverified` when the open one was opened on "
            "the hosted subscribe page by a visitor who chose the customer id, for another email than "
            "`customerEmail` (cancel it if it is not your customer's); 400 `livemode_not_allowed` for "
            "`testClock` with a live key.",
            answer=SubscriptionOpened,
            status=201,
            body=SubscriptionCreate,
            errors=(404, 409),
            answers=[
                Answer(status=200, description="The customer's open subscription, reused", model=SubscriptionOpened)
            ],
        ),
    ),
    ApiRoute(
        "GET",
        "/subscriptions",
        list_subscriptions,
        Operation(
            id="listSubscriptions",
            tag=_TAG,
            summary="List subscriptions",
            description="Newest first, optionally of one customer, one plan, or in one status.",
            answer=SubscriptionList,
            parameters=[
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
    ),
    ApiRoute(
        "GET",
        "/subscriptions/{subscription_id}",
        retrieve,
        Operation(
            id="retrieveSubscription",
            tag=_TAG,
            summary="Retrieve a subscription",
            answer=SubscriptionEnvelope,
            errors=(404,),
        ),
    ),
    ApiRoute(
        "GET",
        "/subscriptions/{subscription_id}/invoices",
        list_invoices,
        Operation(
            id="listSubscriptionInvoices",
            tag=_TAG,
            summary="List a subscription's invoices",
            description="One per billing period, newest first.",
            answer=InvoiceList,
            parameters=LIST_PARAMS,
            errors=(400, 404),
        ),
    ),
    ApiRoute(
        "POST",
        "/subscriptions/{subscription_id}/cancel",
        cancel,
        Operation(
            id="cancelSubscription",
            tag=_TAG,
            summary="Cancel a subscription",
            description="Now by default: `canceled`, its open invoice voided and that invoice's payment order "
            "cancelled, `subscription.canceled` sent. With `atPeriodEnd: true`, an active subscription gets "
            "`cancelAtPeriodEnd` and is cancelled when its paid period ends. 409 "
            "`subscription_not_cancelable` once canceled or expired; 409 `subscription_not_active` for "
            "`atPeriodEnd` on one that is not active.",
            answer=SubscriptionEnvelope,
            body=SubscriptionCancel,
            errors=(404, 409),
        ),
    ),
]
