"""``/payment-intents``: payment orders, created by the merchant and paid by a buyer at checkout (spec 2.1)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.api.idempotency import key_slot
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.http.bodies import PAYMENT_PREFIX, parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.pagination import list_answer
from x402mw.platform.http.request_models.payment_intents import (
    CustomerIn,
    PaymentIntentCreate,
    PaymentMethodsIn,
    sent_text,
)
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import LIST_PARAMS, TEXT, ApiRoute, Operation, query
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.payments import PaymentIntent, PaymentIntentEnvelope, PaymentIntentList
from x402mw.platform.services.payment_intents import (
    DECIMALS,
    cancel_payment_intent,
    find_payment_intent,
    payment_intent_of,
)

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform


def require_takeable(platform: Platform, livemode: bool, currency: str, accepted: Iterable[str] = ()) -> None:
    """400 ``currency_unavailable`` when no configured chain of the caller's mode carries ``currency``
    (param ``currency``) or one of ``accepted`` (param ``acceptedCurrencies``): an order in it could
    never be paid. The message names the coins that can be taken."""
    takeable = platform.chains.currencies(livemode, decimals=DECIMALS)
    for coin, param in [(currency, "currency"), *((c, "acceptedCurrencies") for c in accepted)]:
        if coin not in takeable:
            mode = "live" if livemode else "test"
            can = ", ".join(takeable) if takeable else "none"
            message = f"{coin} cannot be taken: no {mode} chain of this platform carries it. Coins it takes: {can}"
            raise HttpError(400, "currency_unavailable", message, param=param)


def _customer(body: PaymentIntentCreate) -> tuple[str | None, str | None]:
    nested = body.customer or CustomerIn()
    found: list[str | None] = []
    for flat, inner, name in (
        (body.customerEmail, nested.email, "customerEmail"),
        (body.customerName, nested.name, "customerName"),
    ):
        if flat is not None and inner is not None and flat != inner:
            raise HttpError(
                400,
                "parameter_invalid",
                f"{name} disagrees with customer.{name.removeprefix('customer').lower()}; send one of them",
                param=name,
            )
        found.append(flat if flat is not None else inner)
    return found[0], found[1]


async def create(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    data = await read_json(request)
    body = parse_body(PaymentIntentCreate, data)
    platform = platform_of(request)
    now = platform.clock.now()
    accepted: list[str] = list(dict.fromkeys(body.acceptedCurrencies or [body.currency]))
    if body.currency not in accepted:
        raise HttpError(
            400, "parameter_invalid", f"acceptedCurrencies must include {body.currency}", param="acceptedCurrencies"
        )
    require_takeable(platform, caller.livemode, body.currency, accepted)
    if body.expiresAt is not None and body.expiresAt <= now:
        raise HttpError(400, "parameter_invalid", "expiresAt must be in the future", param="expiresAt")
    email, name = _customer(body)
    methods = body.paymentMethods or PaymentMethodsIn()
    row = {
        "id": new_id(),
        "merchant_id": caller.merchant_id,
        "livemode": caller.livemode,
        "order_id": body.orderId,
        "status": "requires_payment",
        "amount_minor": body.amount,
        "amount_text": sent_text(data["amount"]),
        "amount_received_minor": 0,
        "currency": body.currency,
        "accepted_currencies": accepted,
        "payment_methods": methods.model_dump(),
        "customer_email": email,
        "customer_name": name,
        "description": body.description,
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
    public = payment_intent_of(order, writer.checkout_url_base)
    response = _answer(public, status_code=201)
    # The Idempotency-Key, if any, is written with the order, in its transaction, done with this answer.
    answer = (201, response.raw_headers, bytes(response.body))
    await writer.create(order, public=public, key=key_slot(request.scope), answer=answer)
    return response


def _answer(order: PaymentIntent, status_code: int = 200) -> ModelResponse:
    return ModelResponse(PaymentIntentEnvelope(payment_intent=order), status_code)


def _payment_id(request: Request) -> str:
    return path_uuid(request, "payment_id", "payment intent", prefix=PAYMENT_PREFIX)


async def retrieve(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    payment_id = _payment_id(request)
    platform = platform_of(request)
    async with platform.engine.connect() as conn:
        row = await find_payment_intent(conn, caller.merchant_id, caller.livemode, payment_id)
    if row is None:
        raise HttpError.missing("payment intent", payment_id)
    return _answer(payment_intent_of(row, platform.payment_intents.checkout_url_base))


async def cancel(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    payment_id = _payment_id(request)
    platform = platform_of(request)
    answer = await cancel_payment_intent(
        platform.engine,
        caller.merchant_id,
        caller.livemode,
        payment_id,
        platform.clock.now(),
        platform.payment_intents.checkout_url_base,
    )
    if answer is None:
        raise HttpError.missing("payment intent", payment_id)
    return _answer(answer)


async def list_payment_intents(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    platform = platform_of(request)
    table = tables.payment_intents
    filters = caller.owns(table)
    order_id = request.query_params.get("orderId")
    if order_id is not None:
        if not 1 <= len(order_id) <= 200:
            raise HttpError(400, "parameter_invalid", "orderId must be 1-200 characters", param="orderId")
        filters.append(table.c.order_id == order_id)
    base = platform.payment_intents.checkout_url_base

    def render(row: Any) -> PaymentIntent:
        return payment_intent_of(row, base)

    return await list_answer(platform.engine, table, filters, request, render, PaymentIntentList)


_TAG = "Payment intents"
routes = [
    ApiRoute(
        "POST",
        "/payment-intents",
        create,
        Operation(
            id="createPaymentIntent",
            tag=_TAG,
            summary="Create a payment intent",
            description="Starts in `requires_payment`; send the buyer to `checkoutUrl`. 409 `order_id_conflict` when "
            "the merchant already has `orderId` in this mode; 409 `fixed_transfer_active_payment` when "
            "another open order holds `metadata.fixed_transfer_customer_id`. 400 `currency_unavailable` "
            "(`param` `currency` or `acceptedCurrencies`) when no chain of the platform carries a coin for "
            "the key's mode: the message names the coins that can be taken.",
            answer=PaymentIntentEnvelope,
            status=201,
            body=PaymentIntentCreate,
        ),
    ),
    ApiRoute(
        "GET",
        "/payment-intents",
        list_payment_intents,
        Operation(
            id="listPaymentIntents",
            tag=_TAG,
            summary="List payment intents",
            description="Newest first; with `orderId`, the merchant's order with that id (a list of at most one).",
            answer=PaymentIntentList,
            parameters=[
                *LIST_PARAMS,
                query("orderId", "only the order with this id", TEXT | {"minLength": 1, "maxLength": 200}),
            ],
            errors=(400, 404),
        ),
    ),
    ApiRoute(
        "GET",
        "/payment-intents/{payment_id}",
        retrieve,
        Operation(
            id="retrievePaymentIntent",
            tag=_TAG,
            summary="Retrieve a payment intent",
            answer=PaymentIntentEnvelope,
            errors=(404,),
        ),
    ),
    ApiRoute(
        "POST",
        "/payment-intents/{payment_id}/cancel",
        cancel,
        Operation(
            id="cancelPaymentIntent",
            tag=_TAG,
            summary="Cancel a payment intent",
            description="Only from `requires_payment` (otherwise 409 `payment_intent_unexpected_state`); writes "
            "`payment_intent.canceled` and releases a fixed transfer address.",
            answer=PaymentIntentEnvelope,
            errors=(404, 409),
        ),
    ),
]
