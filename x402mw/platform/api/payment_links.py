"""``/payment-links``: reusable priced links, each buyer getting a payment order of their own (DESIGN 9).

- ``POST /payment-links`` ``{name, amount, currency, acceptedCurrencies?, paymentMethods?, successUrl?,
  cancelUrl?, metadata?, slug?}``: answers ``{paymentLink}`` with its ``checkoutUrl``
  (``{checkout_url_base}/pl_<id>``) and, with a slug, ``slugUrl`` (``/paylink/<slug>``);
- ``GET /payment-links`` (cursor pages), ``GET /payment-links/:id``;
- ``PATCH /payment-links/:id`` ``{name?, active?}``: an inactive link opens no new orders (its page
  says so; the public API answers 409 ``payment_link_inactive``); orders already opened stay payable.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, WithJsonSchema, field_validator
from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.api.payment_intents import (
    _CREATE_RULES,
    _METADATA_SCHEMA,
    Currency,
    OrderAmount,
    PaymentMethodsIn,
    _metadata,
    require_takeable,
    sent_text,
)
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.http.bodies import PatchBody, parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import NAME_PATTERN, UUID_PATTERN, HttpUrl, http_url, is_uuid
from x402mw.platform.http.pagination import list_answer
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import LIST_PARAMS, ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.payments import PaymentLinkEnvelope, PaymentLinkList
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.payment_intents import FIXED_TRANSFER_KEY, parse_amount
from x402mw.platform.services.payment_links import create_payment_link, payment_link_of

SLUG_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$"
"""A slug: 1-64 lower-case letters, digits and inner hyphens, and not a UUID (``/paylink/<uuid>``
names payment intents)."""


def _slug(value: str) -> str:
    if is_uuid(value):
        raise ValueError("must not be a UUID (those name payment intents in /paylink/ links)")
    return value


Slug = Annotated[
    str,
    Field(pattern=SLUG_PATTERN),
    AfterValidator(_slug),
    WithJsonSchema({"type": "string", "pattern": SLUG_PATTERN, "not": {"pattern": UUID_PATTERN}}),
]


def _link_metadata(value: object) -> dict[str, str]:
    found = _metadata(value)
    if FIXED_TRANSFER_KEY in found:
        raise ValueError(f"{FIXED_TRANSFER_KEY} cannot be set on a link: every buyer gets an order of their own")
    return found


_LINK_METADATA_SCHEMA = _METADATA_SCHEMA | {"not": {"required": [FIXED_TRANSFER_KEY]}}


class PaymentLinkCreate(BaseModel):
    # acceptedCurrencies must include currency, as for payment intents
    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": [_CREATE_RULES[0]]})

    name: str = Field(
        min_length=1,
        max_length=200,
        pattern=NAME_PATTERN,
        description="what the link sells, shown to the merchant (1–200 characters)",
    )
    amount: OrderAmount = Field(description="decimal amount, as for payment intents; answered as sent")
    currency: Currency = Field(description="the primary coin")
    acceptedCurrencies: list[Currency] | None = Field(
        default=None,
        min_length=1,
        max_length=3,
        description="coins offered at checkout; must include `currency`; default `[currency]`",
    )
    paymentMethods: PaymentMethodsIn | None = Field(default=None, description="what checkout offers each buyer's order")
    successUrl: HttpUrl | None = Field(default=None, description="where buyers return after paying")
    cancelUrl: HttpUrl | None = Field(default=None, description="where buyers return after cancelling")
    metadata: Annotated[dict[str, str], WithJsonSchema(_LINK_METADATA_SCHEMA)] | None = Field(
        default=None, description="copied to each buyer's payment intent (not `fixed_transfer_customer_id`)"
    )
    slug: Slug | None = Field(
        default=None,
        description="adds `{checkout_url_base}/paylink/<slug>.<merchant id>`: 1–64 lower-case letters, digits "
        "and inner hyphens, not a UUID, unique among the merchant's links (409 `slug_taken`)",
    )

    _v_amount = field_validator("amount", mode="before")(parse_amount)
    _v_urls = field_validator("successUrl", "cancelUrl")(http_url)
    _v_metadata = field_validator("metadata", mode="before")(_link_metadata)


class PaymentLinkUpdate(PatchBody):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=NAME_PATTERN, description="a new name")
    active: StrictBool | None = Field(
        default=None, description="false: the link opens no new orders (orders already opened stay payable)"
    )


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
