"""Orders that agents pay: ``{api_host}/x402/pay/pi_<uuid>`` (a payment order's ``x402Url``).

An x402 v2 resource whose price is what the order still has to receive. Without a payment it
answers 402 with ``PAYMENT-REQUIRED``: one ``exact`` offer per EIP-3009 coin and network the order
accepts, paying the order's deposit address (``extra.paymentId`` names the order). With a
``PAYMENT-SIGNATURE`` whose terms are the current ones, the platform relays the authorization
(`x402mw.platform.checkout.relay`: the same settlement, claim and receipt as agent payments), looks
for the transfer at once, and answers 200 with the order's public form and ``PAYMENT-RESPONSE``
carrying the transaction and the signed receipt (its ``challengeId`` is ``pi_<uuid>``).

Nothing is offered once nothing is due: an order that is paid, being paid by another
authorization, cancelled, expired or refunded answers 409 in the error envelope, with no
``PAYMENT-REQUIRED`` (an x402 client signs nothing for it). The same ``PAYMENT-SIGNATURE`` sent
again answers the first outcome (the receipt), whatever the order's state. Terms that are no longer
the current ones (another amount, token or address) get a new 402 naming the problem.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from x402mw.errors import InvalidPaymentError
from x402mw.platform.checkout.lookup import load_order, look_for_payment
from x402mw.platform.checkout.orders import (
    PAYMENT_ID,
    PaymentOption,
    amount_due,
    awaiting_payment,
    payment_options,
    public_order_of,
)
from x402mw.platform.checkout.relay import (
    Relayed,
    RelayRefused,
    order_requirements,
    relay_authorization,
    relay_busy,
    relay_digest,
)
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import TEXT, Answer, ApiRoute, Operation, header
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.checkout import (
    CheckoutPaymentIntent,
    X402Offer,
    X402PaymentPending,
    X402PaymentRequired,
    X402PaymentRequiredOrPending,
    X402PendingError,
    X402Resource,
)
from x402mw.platform.services.deposits import assign_deposit_address
from x402mw.platform.services.payment_intents import amount_text
from x402mw.protocol import reasons
from x402mw.protocol.codec import PAYMENT_REQUIRED, PAYMENT_RESPONSE, decode_payment_payload, encode_header
from x402mw.protocol.models import PaymentPayload, PaymentRequirements, SettlementResponse

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

__all__ = ["routes"]

_EXPOSE = ("Access-Control-Expose-Headers", "PAYMENT-REQUIRED, PAYMENT-RESPONSE")


def _offers(platform: Platform, order: Mapping[Any, Any]) -> list[PaymentOption]:
    """The options an agent can pay ``order`` with: EIP-3009 coins (signed authorizations)."""
    return [
        option
        for option in payment_options(platform.chains, order)
        if option.asset.eip3009 and option.chain.domain(option.asset.address) is not None
    ]


def _closed(order: Mapping[Any, Any], now: Any) -> HttpError:
    status = order["status"]
    if status == "requires_payment" and not awaiting_payment(order, now):
        status = "expired"
    return HttpError(
        409,
        "payment_intent_unexpected_state",
        f"This payment is {status}; nothing is due, so nothing is offered to pay",
    )


async def _challenge(
    request: Request, platform: Platform, order: Mapping[Any, Any], error: str | None = None, message: str = ""
) -> Response:
    """402 with the current terms; 409 once nothing may be paid (no terms an agent could sign)."""
    now = platform.clock.now()
    due = amount_due(order)
    if not awaiting_payment(order, now) or due <= 0:
        raise _closed(order, now)
    if await relay_busy(platform, order):
        raise HttpError(409, "payment_in_progress", "Another authorization is paying this payment; retry later")
    offers = _offers(platform, order)
    if not offers:
        raise HttpError(
            409,
            "gasless_unavailable",
            "None of this payment's coins can be paid by signature here; pay it at its checkoutUrl",
        )
    deposit = await assign_deposit_address(platform.engine, platform.deposit_keys, order)
    accepts = []
    for option in offers:
        terms = order_requirements(option, deposit, due).to_wire()
        terms["extra"]["paymentId"] = f"pi_{order['id']}"
        terms["extra"]["currency"] = option.asset.symbol  # for agents that do not know this chain's tokens
        accepts.append(terms)
    required: dict[str, Any] = {"x402Version": 2}
    if error:
        required["error"] = error
    required["resource"] = {
        "url": str(request.url),
        "description": f"Payment of {amount_text(order)} {order['currency']} to {order['merchant_name']}",
        "mimeType": "application/json",
    }
    required["accepts"] = accepts
    header = base64.b64encode(json.dumps(required, separators=(",", ":"), ensure_ascii=False).encode()).decode()
    body = X402PaymentRequired(
        error=error or None,
        resource=X402Resource.model_validate(required["resource"]),
        accepts=[X402Offer.model_validate(terms) for terms in accepts],
        message=message or None,
    )
    headers = {PAYMENT_REQUIRED: header, "Cache-Control": "no-store", _EXPOSE[0]: _EXPOSE[1]}
    return ModelResponse(body, status_code=402, headers=headers)


def _matches(offer: PaymentRequirements, accepted: PaymentRequirements) -> str | None:
    """Why ``accepted`` is not the offer ``offer`` (a reason code), or None."""
    if accepted.scheme != "exact":
        return reasons.INVALID_SCHEME
    if accepted.pay_to.lower() != offer.pay_to.lower():
        return reasons.INVALID_RECIPIENT
    if accepted.amount != offer.amount:
        return reasons.INVALID_VALUE
    return None


async def pay(request: Request) -> Response:
    platform = platform_of(request)
    order = await load_order(platform, request.path_params["payment_id"])
    header = request.headers.get("payment-signature")
    if header is None:
        return await _challenge(request, platform, order)
    try:
        payload = decode_payment_payload(header)
    except InvalidPaymentError as exc:
        return await _challenge(request, platform, order, exc.reason, exc.message)
    accepted = payload.accepted
    if accepted is None:
        return await _challenge(request, platform, order, reasons.INVALID_X402_VERSION, "send an x402 v2 payment")
    option = next(
        (
            o
            for o in _offers(platform, order)
            if o.network == accepted.network and o.asset.address.lower() == accepted.asset.lower()
        ),
        None,
    )
    if option is None:
        message = "this payment takes none of that token on that network; pay one of the offers"
        return await _challenge(request, platform, order, reasons.INVALID_ASSET, message)
    if order["relay_hash"] is None or order["relay_hash"] != relay_digest(payload, option.asset.address):
        # not a payment made already: its terms must be the current ones
        if not awaiting_payment(order, platform.clock.now()) or amount_due(order) <= 0:
            raise _closed(order, platform.clock.now())
        current = order_requirements(option, order["deposit_address"] or "", amount_due(order))
        problem = _matches(current, accepted)
        if problem is not None:
            message = "the payment's terms are not this payment's current ones (amount due, address); pay the new offer"
            return await _challenge(request, platform, order, problem, message)
    try:
        relayed = await relay_authorization(platform, order, accepted, payload, resource=str(request.url))
    except RelayRefused as exc:
        if exc.status == 409 and exc.code in ("payment_intent_unexpected_state", "payment_in_progress"):
            raise HttpError(exc.status, exc.code, exc.message) from None
        return await _challenge(request, platform, order, exc.reason, exc.message)
    return await _answer(request, platform, option, relayed, payload)


async def _answer(
    request: Request, platform: Platform, option: PaymentOption, relayed: Relayed, payload: PaymentPayload
) -> Response:
    outcome = relayed.outcome
    settlement = (PAYMENT_RESPONSE, encode_header(outcome.response))
    if outcome.status == "unavailable":
        raise HttpError(503, "chain_unavailable", "The chain cannot be reached right now; nothing was taken: retry")
    if outcome.status == "settled":
        await look_for_payment(platform, relayed.order, [option.chain])
        order = await load_order(platform, relayed.order["id"])
        headers = {settlement[0]: settlement[1], "Cache-Control": "no-store", _EXPOSE[0]: _EXPOSE[1]}
        return ModelResponse(public_order_of(order, platform.chains), headers=headers)
    if outcome.status == "pending":
        return _pending(outcome.response)
    answer = await _challenge(
        request, platform, relayed.order, outcome.response.error_reason, outcome.message or "the payment failed"
    )
    answer.headers[settlement[0]] = settlement[1]
    return answer


def _pending(response: SettlementResponse) -> Response:
    """402 ``settlement_pending``: sent and not final yet; the same signature, sent again, gets the
    outcome. No ``PAYMENT-REQUIRED``: nothing new to sign."""
    body = X402PaymentPending(
        error=X402PendingError(
            message="the payment is not final yet; retry the same PAYMENT-SIGNATURE to receive the answer",
            transaction=response.transaction,
        )
    )
    headers = {
        PAYMENT_RESPONSE: encode_header(response),
        "Retry-After": "1",
        "Cache-Control": "no-store",
        _EXPOSE[0]: _EXPOSE[1],
    }
    return ModelResponse(body, status_code=402, headers=headers)


routes = [
    ApiRoute(
        "GET",
        "/x402/pay/{payment_id}",
        pay,
        Operation(
            id="payPaymentIntentX402",
            tag="Checkout",
            summary="Pay a payment intent over x402 (its x402Url)",
            description="An x402 v2 resource priced at the amount still due. Without a payment: 402 with "
            "`PAYMENT-REQUIRED` (one `exact` offer per EIP-3009 coin and network, paying the deposit "
            "address). With `PAYMENT-SIGNATURE`: the platform relays the authorization and answers the order "
            "with `PAYMENT-RESPONSE` (transaction and signed receipt). Terms that are not the current ones "
            "get a new 402 naming the problem; a payment still settling, 402 `settlement_pending` (send the "
            "same signature again). Once nothing is due (paid, paying, cancelled, expired): 409 without "
            "`PAYMENT-REQUIRED`; the same signature sent again still answers its receipt.",
            answer=CheckoutPaymentIntent,
            public=True,
            parameters=[
                PAYMENT_ID,
                header("PAYMENT-SIGNATURE", "base64 JSON x402 v2 `PaymentPayload` paying one of the offers", TEXT),
            ],
            errors=(404, 409, 429),
            headers={
                "PAYMENT-RESPONSE": "base64 JSON x402 `SettlementResponse`; `extensions.receipt` is the signed receipt"
            },
            answers=[
                Answer(
                    status=402,
                    description="Payment required (x402 v2), or the payment is not final yet",
                    model=X402PaymentRequiredOrPending,
                    headers={"PAYMENT-REQUIRED": "base64 JSON x402 `PaymentRequired`"},
                )
            ],
        ),
        name="x402-pay",
    )
]
