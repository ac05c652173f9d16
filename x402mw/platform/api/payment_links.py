"""``/payment-links``: reusable priced links, each buyer getting a payment order of their own (DESIGN 9).

- ``POST /payment-links`` ``{name, amount, currency, acceptedCurrencies?, paymentMethods?, successUrl?,
  cancelUrl?, metadata?, slug?}``: answers ``{paymentLink}`` with its ``checkoutUrl``
  (``{checkout_url_base}/pl_<id>``) and, with a slug, ``slugUrl`` (``/paylink/<slug>``);
- ``GET /payment-links`` (cursor pages), ``GET /payment-links/:id``;
- ``PATCH /payment-links/:id`` ``{name?, active?}``: an inactive link opens no new orders (its page
  says so; the public API answers 409 ``payment_link_inactive``); orders already opened stay payable.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.api.payment_intents import require_takeable
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.http.bodies import parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.pagination import list_answer
from x402mw.platform.http.request_models.payment_intents import (
    PaymentMethodsIn,
    sent_text,
)
from x402mw.platform.http.request_models.payment_links import (
    PaymentLinkCreate,
    PaymentLinkUpdate,
)
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import LIST_PARAMS, ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.payments import PaymentLinkEnvelope, PaymentLinkList
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.payment_links import create_payment_link, payment_link_of


def _base(request: Request) -> str:
    return platform_of(request).payment_intents.checkout_url_base


def _answer(request: Request, row: Any, status_code: int = 200) -> ModelResponse:
    return ModelResponse(PaymentLinkEnvelope(payment_link=payment_link_of(row, _base(request))), status_code)


async def create(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    data = await read_json(request)
    body = parse_body(PaymentLinkCreate, data)
    platform = platform_of(request)
    accepted: list[str] = list(dict.fromkeys(body.acceptedCurrencies or [body.currency]))
    if body.currency not in accepted:
        raise HttpError(
            400, "parameter_invalid", f"acceptedCurrencies must include {body.currency}", param="acceptedCurrencies"
        )
    require_takeable(platform, caller.livemode, body.currency, accepted)
    now = platform.clock.now()
    row: dict[str, Any] = {
        "id": new_id(),
        "merchant_id": caller.merchant_id,
        "livemode": caller.livemode,
        "name": body.name,
        "slug": body.slug,
        "amount_minor": body.amount,
        "amount_text": sent_text(data["amount"]),
        "currency": body.currency,
        "accepted_currencies": accepted,
        "payment_methods": (body.paymentMethods or PaymentMethodsIn()).model_dump(),
        "success_url": body.successUrl,
        "cancel_url": body.cancelUrl,
        "link_metadata": body.metadata or {},
        "active": True,
        "created_at": now,
        "updated_at": now,
    }
    try:
        await create_payment_link(platform.engine, row)
    except ServiceError as exc:
        raise HttpError(exc.status, exc.code, exc.message, param=exc.param) from None
    return _answer(request, row, 201)


async def _load(request: Request, caller: Any, conn: Any) -> Any:
    link_id = path_uuid(request, "link_id", "payment link")
    table = tables.payment_links
    row = (await conn.execute(table.select().where(table.c.id == link_id, *caller.owns(table)))).mappings().first()
    if row is None:
        raise HttpError.missing("payment link", link_id)
    return row


async def retrieve(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    async with platform_of(request).engine.connect() as conn:
        row = await _load(request, caller, conn)
    return _answer(request, row)


async def update(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(PaymentLinkUpdate, await read_json(request))
    platform = platform_of(request)
    values: dict[str, Any] = {**body.changes(), "updated_at": platform.clock.now()}
    table = tables.payment_links
    async with platform.engine.begin() as conn:
        row = await _load(request, caller, conn)
        await conn.execute(table.update().where(table.c.id == row["id"]).values(**values))
        row = await _load(request, caller, conn)
    return _answer(request, row)


async def list_links(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    table = tables.payment_links
    base = _base(request)
    return await list_answer(
        platform_of(request).engine,
        table,
        caller.owns(table),
        request,
        lambda row: payment_link_of(row, base),
        PaymentLinkList,
    )


_TAG = "Payment links"
routes = [
    ApiRoute(
        "POST",
        "/payment-links",
        create,
        Operation(
            id="createPaymentLink",
            tag=_TAG,
            summary="Create a payment link",
            description="Hand `checkoutUrl` (or `slugUrl`) to buyers. 409 `slug_taken` when another of your links "
            "has the slug; 400 `currency_unavailable` when no chain of the platform carries a coin.",
            answer=PaymentLinkEnvelope,
            status=201,
            body=PaymentLinkCreate,
            errors=(409,),
        ),
    ),
    ApiRoute(
        "GET",
        "/payment-links",
        list_links,
        Operation(
            id="listPaymentLinks",
            tag=_TAG,
            summary="List payment links",
            description="Newest first.",
            answer=PaymentLinkList,
            parameters=LIST_PARAMS,
            errors=(400, 404),
        ),
    ),
    ApiRoute(
        "GET",
        "/payment-links/{link_id}",
        retrieve,
        Operation(
            id="retrievePaymentLink",
            tag=_TAG,
            summary="Retrieve a payment link",
            answer=PaymentLinkEnvelope,
            errors=(404,),
        ),
    ),
    ApiRoute(
        "PATCH",
        "/payment-links/{link_id}",
        update,
        Operation(
            id="updatePaymentLink",
            tag=_TAG,
            summary="Update a payment link",
            description="Rename it, or deactivate it (`active: false`): its page then says it is no longer active and "
            "opening it answers 409 `payment_link_inactive`.",
            answer=PaymentLinkEnvelope,
            body=PaymentLinkUpdate,
            errors=(404,),
        ),
    ),
]
