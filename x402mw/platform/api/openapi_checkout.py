"""The OpenAPI document's public checkout API (``/checkout/v1``, no API key): request models, response
schemas and operations (see `x402mw.platform.api.openapi` and `x402mw.platform.checkout.api`).

The hosted pages under ``/checkout`` are HTML for buyers, not API operations: their routes are marked
``include_in_schema=False``."""

from __future__ import annotations

from pydantic import BaseModel

from x402mw.platform.api.fields import UUID_PATTERN
from x402mw.platform.api.openapi_operations import operation
from x402mw.platform.api.openapi_schemas import (
    ADDRESS,
    BOOLEAN,
    DECIMAL,
    INTEGER,
    MINOR,
    STRING,
    TIMESTAMP,
    Schema,
    const,
    enum,
    nullable,
    object_schema,
    ref,
)
from x402mw.platform.checkout.api import AttemptBody, SyncBody

__all__ = ["BODY_MODELS", "FIELD_NOTES", "TAGS", "operations", "schemas"]

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
_CURRENCY = enum("USDC", "USDT", "EURC")
_PAYMENT_ID = {
    "name": "payment_id",
    "in": "path",
    "required": True,
    "description": "the payment intent's id: a bare UUID or `pi_<uuid>`; any other value answers 404 "
    "`resource_missing`, as an unknown id does",
    "schema": {"type": "string", "pattern": "^(?:[Pp][Ii]_)?" + UUID_PATTERN.removeprefix("^")},
}


def schemas() -> dict[str, Schema]:
    url = nullable(STRING | {"format": "uri"})
    return {
        "CheckoutPaymentIntent": object_schema(
            {
                "id": STRING | {"format": "uuid"},
                "paymentId": STRING | {"format": "uuid", "description": "same as `id`"},
                "object": const("checkout_payment_intent"),
                "status": enum("requires_payment", "processing", "succeeded", "canceled", "expired", "refunded"),
                "amount": DECIMAL,
                "amountReceived": DECIMAL | {"description": "received so far"},
                "amountDue": DECIMAL | {"description": "`amount` less `amountReceived` (at least 0)"},
                "currency": _CURRENCY,
                "acceptedCurrencies": {"type": "array", "items": _CURRENCY},
                "paymentMethods": object_schema(
                    {"wallet": BOOLEAN, "transfer": BOOLEAN, "transferDefaultOpen": BOOLEAN}
                ),
                "merchant": object_schema({"name": STRING | {"description": "the merchant's display name"}}),
                "successUrl": url,
                "cancelUrl": url,
                "exceptions": {
                    "type": "array",
                    "items": enum("underpaid", "overpaid", "paid_late", "wrong_asset"),
                },
                "network": nullable(STRING | {"description": "`eip155:<chainId>` it was paid on; null until paid"}),
                "paidCurrency": nullable(_CURRENCY),
                "txHash": nullable(STRING),
                "paidAt": nullable(TIMESTAMP),
                "expiresAt": nullable(TIMESTAMP),
                "livemode": BOOLEAN | {"description": "false: a test payment on a test network"},
                "networks": {
                    "type": "array",
                    "items": ref("CheckoutNetwork"),
                    "description": "where the platform can take this payment (once part is paid: only that chain "
                    "and coin)",
                },
            },
            description="What checkout shows of a payment intent: never its `orderId`, metadata or customer.",
        ),
        "CheckoutNetwork": object_schema(
            {
                "network": STRING | {"description": "`eip155:<chainId>`"},
                "chainId": INTEGER,
                "name": STRING,
                "testnet": BOOLEAN,
                "currencies": {
                    "type": "array",
                    "items": object_schema(
                        {
                            "currency": _CURRENCY,
                            "tokenAddress": ADDRESS,
                            "decimals": INTEGER,
                            "methods": {"type": "array", "items": enum("transfer", "wallet")},
                            "gasless": BOOLEAN
                            | {"description": "EIP-3009: a wallet can pay by signature, without gas"},
                        }
                    ),
                },
            },
            description="A chain that can take the payment, and its coins the payment accepts.",
        ),
        "CheckoutAttempt": object_schema(
            {
                "object": const("checkout_attempt"),
                "paymentId": STRING | {"format": "uuid"},
                "method": enum("transfer", "wallet"),
                "network": STRING,
                "chainId": INTEGER,
                "networkName": STRING,
                "currency": _CURRENCY,
                "tokenAddress": ADDRESS,
                "decimals": INTEGER,
                "depositAddress": ADDRESS | {"description": "the payment's own address: send the coin here"},
                "amountDue": DECIMAL | {"description": "what is still to pay"},
                "amountDueMinor": MINOR,
                "paymentUri": STRING
                | {"description": "EIP-681: `ethereum:<token>@<chainId>/transfer?address=<deposit>&uint256=<amount>`"},
                "expiresAt": nullable(TIMESTAMP),
                "transaction": nullable(
                    object_schema(
                        {
                            "to": ADDRESS,
                            "data": STRING,
                            "value": STRING,
                            "chainId": STRING | {"description": "hex"},
                        },
                        description="`wallet`: an ordinary token transfer for `eth_sendTransaction`; report it "
                        "with `sync`",
                    )
                ),
                "authorization": nullable(
                    object_schema(
                        {
                            "primaryType": const("TransferWithAuthorization"),
                            "types": {"type": "object"},
                            "domain": object_schema(
                                {"name": STRING, "version": STRING, "chainId": INTEGER, "verifyingContract": ADDRESS}
                            ),
                            "message": object_schema(
                                {
                                    "to": ADDRESS,
                                    "value": MINOR,
                                    "validAfter": STRING,
                                    "validBefore": STRING,
                                    "nonce": STRING,
                                }
                            ),
                        },
                        description="`wallet` with an EIP-3009 coin: EIP-712 typed data for "
                        "`eth_signTypedData_v4`, with `message.from` set to the wallet's account",
                    )
                ),
            },
            description="How to pay a payment intent with the chosen network, coin and method.",
        ),
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
            ref("CheckoutPaymentIntent"),
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
            ref("CheckoutAttempt"),
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
            ref("CheckoutPaymentIntent"),
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
            ref("CheckoutPaymentIntent"),
            public=True,
            body="SyncBody",
            errors=(404,),
        ),
    ]
    for _method, _path, item in found:  # the helper knows only API paths' parameters
        item["parameters"] = [_PAYMENT_ID]
    return found
