"""The OpenAPI document's public checkout API (``/checkout/v1``, no API key): request models, their
field notes, and operations (see `x402mw.platform.api.openapi` and `x402mw.platform.checkout.api`).

The hosted pages under ``/checkout`` are HTML for buyers, not API operations: their routes are marked
``include_in_schema=False``."""

from __future__ import annotations

from pydantic import BaseModel

from x402mw.platform.api.fields import UUID_PATTERN
from x402mw.platform.api.openapi_operations import operation
from x402mw.platform.api.openapi_schemas import Schema
from x402mw.platform.checkout.api import AttemptBody, SyncBody
from x402mw.platform.objects.checkout import CheckoutAttempt, CheckoutPaymentIntent

__all__ = ["BODY_MODELS", "FIELD_NOTES", "TAGS", "operations"]

TAG = "Checkout"
TAGS = [
    (
        TAG,
        "The public API of hosted checkout, under `/checkout/v1`: no API key; the payment intent's id "
        "(bare UUID or `pi_<uuid>`) is all it takes, so it answers only what a buyer may see.",
    )
]
BODY_MODELS: list[type[BaseModel]] = [AttemptBody, SyncBody]
FIELD_NOTES: dict[str, dict[str, str]] = {
    "AttemptBody": {
        "network": "`eip155:<chainId>`: one of the order's `networks`",
        "currency": "one of the order's `acceptedCurrencies` that the network has",
        "method": "`transfer` (send to the deposit address from anywhere) or `wallet` (a browser wallet pays); "
        "must be enabled in the order's `paymentMethods`",
    },
    "SyncBody": {
        "txHash": "the transaction the buyer's wallet sent",
        "network": "`eip155:<chainId>` it was sent on: one of the order's `networks`",
    },
}
_PAYMENT_ID = {
    "name": "payment_id",
    "in": "path",
    "required": True,
    "description": "the payment intent's id: a bare UUID or `pi_<uuid>`; any other value answers 404 "
    "`resource_missing`, as an unknown id does",
    "schema": {"type": "string", "pattern": "^(?:[Pp][Ii]_)?" + UUID_PATTERN.removeprefix("^")},
}


def operations() -> list[tuple[str, str, Schema]]:
    base = "/checkout/v1/payment-intents/{payment_id}"
    found = [
        operation(
            "GET",
            base,
            "retrieveCheckoutPaymentIntent",
            TAG,
            "Read a payment intent for checkout",
            "",
            CheckoutPaymentIntent,
            public=True,
            errors=(404,),
        ),
        operation(
            "POST",
            base + "/attempts",
            "createCheckoutAttempt",
            TAG,
            "Choose how to pay",
            "Validates the buyer's choice against the order (400 `unsupported_chain`, `unsupported_currency` "
            "or `payment_method_unavailable`, naming `param`) and answers the payment configuration, giving "
            "the order its deposit address on first use. 409 `payment_intent_unexpected_state` once the "
            "order no longer awaits payment (paid, cancelled or past `expiresAt`).",
            CheckoutAttempt,
            public=True,
            body="AttemptBody",
            errors=(404, 409),
        ),
        operation(
            "POST",
            base + "/transfer-status",
            "checkCheckoutTransferStatus",
            TAG,
            "Check for a transfer",
            "Looks for money at the order's deposit address now (the platform's worker also does every few "
            "seconds) and answers the order as it then is. No body, or `{}`.",
            CheckoutPaymentIntent,
            public=True,
            errors=(400, 404, 413),
        ),
        operation(
            "POST",
            base + "/sync",
            "syncCheckoutTransaction",
            TAG,
            "Report a wallet's transaction",
            "The buyer's wallet sent a transfer to the deposit address: waits up to 10 s for it to be mined, "
            "looks for the money, and answers the order as it then is.",
            CheckoutPaymentIntent,
            public=True,
            body="SyncBody",
            errors=(404,),
        ),
    ]
    for _method, _path, item in found:  # the helper knows only API paths' parameters
        item["parameters"] = [_PAYMENT_ID]
    return found
