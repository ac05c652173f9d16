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
from starlette.routing import Route

from x402mw.platform.api.auth import authenticate
from x402mw.platform.db import tables
from x402mw.platform.http.bodies import parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import Email, Uuid
from x402mw.platform.http.pagination import list_page, query_id
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.subscriptions import (
    Invoice,
    InvoiceList,
    Subscription,
    SubscriptionEnvelope,
    SubscriptionList,
)
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.subscriptions.objects import find_owned, invoice_of, opened_of, subscription_of

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

__all__ = ["MAX_CUSTOMER_ID", "SubscriptionCancel", "SubscriptionCreate", "routes"]

MAX_CUSTOMER_ID = 500
STATUSES = ("incomplete", "active", "past_due", "canceled", "expired")


class SubscriptionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    planId: Uuid
    merchantCustomerId: str = Field(min_length=1, max_length=MAX_CUSTOMER_ID)
    customerEmail: Email | None = None
    testClock: Uuid | None = None


class SubscriptionCancel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    atPeriodEnd: StrictBool = False


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
    async with platform.engine.connect() as conn:
        data, more = await list_page(conn, table, filters, request, lambda row: _subscription(platform, row))
    return ModelResponse(SubscriptionList(data=data, has_more=more))


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
        invoices, more = await list_page(conn, table, filters, request, render)
    return ModelResponse(InvoiceList(data=invoices, has_more=more))


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


routes = [
    Route("/subscriptions", create, methods=["POST"]),
    Route("/subscriptions", list_subscriptions, methods=["GET"]),
    Route("/subscriptions/{subscription_id}", retrieve, methods=["GET"]),
    Route("/subscriptions/{subscription_id}/invoices", list_invoices, methods=["GET"]),
    Route("/subscriptions/{subscription_id}/cancel", cancel, methods=["POST"]),
]
