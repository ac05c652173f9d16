"""``/payment-intents``: payment orders, created by the merchant and paid by a buyer at checkout (spec 2.1)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.platform.api.auth import authenticate
from x402mw.platform.api.bodies import HttpUrl, http_url, parse_body, path_uuid, read_json
from x402mw.platform.api.errors import ApiError
from x402mw.platform.api.idempotency import key_slot
from x402mw.platform.api.pagination import list_page
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.services.payment_intents import (
    cancel_payment_intent,
    find_payment_intent,
    parse_amount,
    payment_intent_json,
)

__all__ = ["PaymentIntentCreate", "routes"]

Currency = Literal["USDC", "USDT", "EURC"]
MAX_METADATA_KEYS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 50, 40, 500


def _metadata(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("must be an object of string values")
    if len(value) > MAX_METADATA_KEYS:
        raise ValueError(f"may have at most {MAX_METADATA_KEYS} keys")
    for key, item in value.items():
        if not key or len(key) > MAX_METADATA_KEY:
            raise ValueError(f"keys must be 1-{MAX_METADATA_KEY} characters")
        if not isinstance(item, str):
            raise ValueError(f"the value of {key[:40]!r} must be a string")
        if len(item) > MAX_METADATA_VALUE:
            raise ValueError(f"the value of {key[:40]!r} is longer than {MAX_METADATA_VALUE} characters")
    return value


def _timestamp(value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("must be an ISO 8601 timestamp string")
    try:
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise ValueError("must carry a timezone, e.g. 2026-01-31T12:00:00Z")
        return parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of range") from None
    except ValueError as exc:
        if "timezone" in str(exc):
            raise
        raise ValueError("must be an ISO 8601 timestamp, e.g. 2026-01-31T12:00:00Z") from None


def _email(value: str | None) -> str | None:
    if value is not None:
        local, at, domain = value.rpartition("@")
        if not at or not local or "." not in domain or any(c.isspace() for c in value):
            raise ValueError("must be an email address")
    return value


class CustomerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: str | None = Field(default=None, max_length=320)
    name: str | None = Field(default=None, max_length=200)

    _v_email = field_validator("email")(_email)


class PaymentMethodsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    wallet: StrictBool = True
    transfer: StrictBool = True
    transferDefaultOpen: StrictBool = False

    @model_validator(mode="after")
    def _one_method(self) -> PaymentMethodsIn:
        if not (self.wallet or self.transfer):
            raise ValueError("at least one of wallet and transfer must be true")
        if self.transferDefaultOpen and not self.transfer:
            raise ValueError("transferDefaultOpen needs transfer")
        return self


class PaymentIntentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    orderId: str = Field(min_length=1, max_length=200)
    amount: int
    currency: Currency
    acceptedCurrencies: list[Currency] | None = Field(default=None, min_length=1, max_length=3)
    customer: CustomerIn | None = None
    customerEmail: str | None = Field(default=None, max_length=320)
    customerName: str | None = Field(default=None, max_length=200)
    successUrl: HttpUrl | None = None
    cancelUrl: HttpUrl | None = None
    metadata: dict[str, str] | None = None
    paymentMethods: PaymentMethodsIn | None = None
    expiresAt: datetime | None = None

    _v_amount = field_validator("amount", mode="before")(parse_amount)
    _v_urls = field_validator("successUrl", "cancelUrl")(http_url)
    _v_email = field_validator("customerEmail")(_email)
    _v_metadata = field_validator("metadata", mode="before")(_metadata)
    _v_expires = field_validator("expiresAt", mode="before")(_timestamp)


def _customer(body: PaymentIntentCreate) -> tuple[str | None, str | None]:
    nested = body.customer or CustomerIn()
    found: list[str | None] = []
    for flat, inner, name in (
        (body.customerEmail, nested.email, "customerEmail"),
        (body.customerName, nested.name, "customerName"),
    ):
        if flat is not None and inner is not None and flat != inner:
            raise ApiError(
                400,
                "parameter_invalid",
                f"{name} disagrees with customer.{name.removeprefix('customer').lower()}; send one of them",
                param=name,
            )
        found.append(flat if flat is not None else inner)
    return found[0], found[1]


async def create(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    body = parse_body(PaymentIntentCreate, await read_json(request))
    platform = request.app.state.platform
    now = platform.clock.now()
    accepted: list[str] = list(dict.fromkeys(body.acceptedCurrencies or [body.currency]))
    if body.currency not in accepted:
        raise ApiError(
            400, "parameter_invalid", f"acceptedCurrencies must include {body.currency}", param="acceptedCurrencies"
        )
    if body.expiresAt is not None and body.expiresAt <= now:
        raise ApiError(400, "parameter_invalid", "expiresAt must be in the future", param="expiresAt")
    email, name = _customer(body)
    methods = body.paymentMethods or PaymentMethodsIn()
    row = {
        "id": new_id(),
        "merchant_id": caller.merchant_id,
        "livemode": caller.livemode,
        "order_id": body.orderId,
        "status": "requires_payment",
        "amount_minor": body.amount,
        "amount_received_minor": 0,
        "currency": body.currency,
        "accepted_currencies": accepted,
        "payment_methods": methods.model_dump(),
        "customer_email": email,
        "customer_name": name,
        "success_url": body.successUrl,
        "cancel_url": body.cancelUrl,
        "order_metadata": body.metadata or {},
        "exceptions": [],
        "expires_at": body.expiresAt,
        "created_at": now,
        "updated_at": now,
    }
    writer = platform.payment_intents
    order = writer.new_order(row)
    response = JSONResponse({"paymentIntent": payment_intent_json(order, writer.checkout_url_base)}, status_code=201)
    # The Idempotency-Key, if any, is written with the order, in its transaction, done with this answer.
    await writer.create(order, key=key_slot(request.scope), answer=(201, response.raw_headers, bytes(response.body)))
    return response


def _payment_id(request: Request) -> str:
    return path_uuid(request, "payment_id", "payment intent")


async def retrieve(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    payment_id = _payment_id(request)
    platform = request.app.state.platform
    async with platform.engine.connect() as conn:
        row = await find_payment_intent(conn, caller.merchant_id, caller.livemode, payment_id)
    if row is None:
        raise ApiError.missing("payment intent", payment_id)
    return JSONResponse({"paymentIntent": payment_intent_json(row, platform.settings.checkout_url_base)})


async def cancel(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    payment_id = _payment_id(request)
    platform = request.app.state.platform
    answer = await cancel_payment_intent(
        platform.engine,
        caller.merchant_id,
        caller.livemode,
        payment_id,
        platform.clock.now(),
        platform.settings.checkout_url_base,
    )
    if answer is None:
        raise ApiError.missing("payment intent", payment_id)
    return JSONResponse({"paymentIntent": answer})


async def list_payment_intents(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    platform = request.app.state.platform
    table = tables.payment_intents
    filters = caller.owns(table)
    order_id = request.query_params.get("orderId")
    if order_id is not None:
        if not 1 <= len(order_id) <= 200:
            raise ApiError(400, "parameter_invalid", "orderId must be 1-200 characters", param="orderId")
        filters.append(table.c.order_id == order_id)
    base = platform.settings.checkout_url_base

    def render(row: Any) -> dict[str, Any]:
        return payment_intent_json(row, base)

    async with platform.engine.connect() as conn:
        page = await list_page(conn, table, filters, request, render)
    return JSONResponse(page)


routes = [
    Route("/payment-intents", create, methods=["POST"]),
    Route("/payment-intents", list_payment_intents, methods=["GET"]),
    Route("/payment-intents/{payment_id}", retrieve, methods=["GET"]),
    Route("/payment-intents/{payment_id}/cancel", cancel, methods=["POST"]),
]
