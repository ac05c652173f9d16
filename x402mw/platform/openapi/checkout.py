"""The OpenAPI document's public checkout API (``/checkout/v1``, no API key): request models, their
field notes, and operations (see `x402mw.platform.openapi.document` and `x402mw.platform.checkout.api`).

The hosted pages under ``/checkout`` are HTML for buyers, not API operations: their routes are marked
``include_in_schema=False``."""

from __future__ import annotations

from pydantic import BaseModel

from x402mw.platform.checkout.bodies import (
    AttemptBody,
    AuthorizationBody,
    PrepareBody,
    SyncBody,
    WalletAuthorization,
)
from x402mw.platform.http.fields import UUID_PATTERN
from x402mw.platform.objects.checkout import CheckoutAttempt, CheckoutPaymentIntent, X402PaymentRequiredOrPending
from x402mw.platform.openapi.links import LINK_ID
from x402mw.platform.openapi.operations import operation
from x402mw.platform.openapi.schemas import STRING, TEXT, Schema

__all__ = ["BODY_MODELS", "FIELD_NOTES", "TAGS", "operations"]

TAG = "Checkout"
TAGS = [
    (
        TAG,
        "The public API of hosted checkout, under `/checkout/v1`: no API key; the payment intent's id "
        "(bare UUID or `pi_<uuid>`) is all it takes, so it answers only what a buyer may see.",
    )
]
BODY_MODELS: list[type[BaseModel]] = [AttemptBody, SyncBody, AuthorizationBody, WalletAuthorization, PrepareBody]
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
    "AuthorizationBody": {
        "network": "`eip155:<chainId>`: one of the order's `networks`",
        "currency": "an EIP-3009 coin the order accepts (USDC, EURC; USDT has no authorization: 409 "
        "`gasless_unavailable`)",
        "authorization": "the `TransferWithAuthorization` message the wallet signed: `attempts` (`method: "
        "wallet`) answers it in `authorization.message`, with `from` set to the wallet's account",
        "signature": "what `eth_signTypedData_v4` answered: a key's 65 bytes, or a smart account's signature "
        "(checked by the wallet with EIP-1271; ERC-6492-wrapped for a wallet not deployed yet)",
    },
    "WalletAuthorization": {
        "from": "the paying wallet (it needs the coin, no ETH)",
        "to": "the order's deposit address",
        "value": "the amount due, in minor units",
        "validAfter": "Unix time",
        "validBefore": "Unix time; at least a few seconds ahead",
        "nonce": "32 bytes of hex",
    },
    "PrepareBody": {
        "network": "default: the first of the order's `networks`",
        "currency": "default: the order's `currency`, else the first coin of that network",
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


def _public(found: list[tuple[str, str, Schema]], parameters: list[Schema]) -> None:
    for _method, _path, item in found:  # the helper knows only API paths' parameters
        item["parameters"] = [*parameters, *(p for p in item.get("parameters", []) if p.get("in") != "path")]
        item["responses"]["429"] = {"$ref": "#/components/responses/TooManyRequests"}
        item["responses"]["400"] = {"$ref": "#/components/responses/BadRequest"}  # a path's control character
        item["responses"] = dict(sorted(item["responses"].items()))


def _relay_operations(base: str) -> list[tuple[str, str, Schema]]:
    found = [
        operation(
            "POST",
            base + "/authorizations",
            "createCheckoutAuthorization",
            TAG,
            "Pay with a wallet's signed authorization (gasless)",
            "The wallet signed the EIP-3009 `TransferWithAuthorization` that `attempts` (`method: wallet`) "
            "answered; the platform checks it like an agent payment and relays it, paying the gas, then "
            "answers the order (`processing` or `succeeded` once the transfer is in a block). 409 when the "
            "authorization does not fit the order, naming `param`: `authorization_signature_invalid` "
            "(not signed by `from` for this coin and chain), `authorization_wrong_recipient` (not the "
            "order's deposit address), `authorization_wrong_amount` (not the amount due), "
            "`authorization_expired`, `authorization_not_yet_valid`, `authorization_used` (its nonce is "
            "spent), `gasless_unavailable` (USDT), `payment_intent_unexpected_state`, "
            "`payment_in_progress` (another authorization is paying it); 422 `insufficient_funds`. "
            "Nothing is sent for a refused one. The same authorization sent again answers the order as "
            "it is, and is never credited twice. 503 `chain_unavailable` (with `Retry-After`): nothing "
            "was sent.",
            CheckoutPaymentIntent,
            public=True,
            body="AuthorizationBody",
            errors=(404, 409, 422),
        ),
        operation(
            "POST",
            base + "/prepare",
            "prepareCheckoutPayment",
            TAG,
            "Prepare a transfer (legacy, deprecated)",
            "Kept for old integrations; use `attempts`. Answers what a transfer `attempts` answers, for "
            "`network` and `currency` (each optional), with `Deprecation: true` and `Link: <…>; "
            'rel="successor-version"` pointing to the `attempts` operation.',
            CheckoutAttempt,
            public=True,
            body="PrepareBody",
            errors=(404, 409),
        ),
    ]
    prepare = found[1][2]
    prepare["deprecated"] = True
    prepare["requestBody"]["required"] = False
    prepare["responses"]["200"]["headers"] |= {
        "Deprecation": {"description": "`true`: this operation is deprecated", "schema": STRING},
        "Link": {"description": '`<…attempts…>; rel="successor-version"`', "schema": STRING},
    }
    return found


def _x402_operation() -> tuple[str, str, Schema]:
    method, path, item = operation(
        "GET",
        "/x402/pay/{payment_id}",
        "payPaymentIntentX402",
        TAG,
        "Pay a payment intent over x402 (its x402Url)",
        "An x402 v2 resource priced at the amount still due. Without a payment: 402 with "
        "`PAYMENT-REQUIRED` (one `exact` offer per EIP-3009 coin and network, paying the deposit "
        "address). With `PAYMENT-SIGNATURE`: the platform relays the authorization and answers the order "
        "with `PAYMENT-RESPONSE` (transaction and signed receipt). Terms that are not the current ones "
        "get a new 402 naming the problem; a payment still settling, 402 `settlement_pending` (send the "
        "same signature again). Once nothing is due (paid, paying, cancelled, expired): 409 without "
        "`PAYMENT-REQUIRED`; the same signature sent again still answers its receipt.",
        CheckoutPaymentIntent,
        public=True,
        errors=(404, 409),
    )
    item["responses"]["200"]["headers"]["PAYMENT-RESPONSE"] = {
        "description": "base64 JSON x402 `SettlementResponse`; `extensions.receipt` is the signed receipt",
        "schema": STRING,
    }
    item["responses"]["402"] = {
        "description": "Payment required (x402 v2), or the payment is not final yet",
        "headers": {
            "Request-Id": {"$ref": "#/components/headers/Request-Id"},
            "PAYMENT-REQUIRED": {"description": "base64 JSON x402 `PaymentRequired`", "schema": STRING},
        },
        "content": {"application/json": {"schema": X402PaymentRequiredOrPending}},
    }
    item["parameters"] = [
        {
            "name": "PAYMENT-SIGNATURE",
            "in": "header",
            "required": False,
            "description": "base64 JSON x402 v2 `PaymentPayload` paying one of the offers",
            "schema": TEXT,
        }
    ]
    return method, path, item


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
    found += _relay_operations(base)
    found.append(_x402_operation())
    _public(found, [_PAYMENT_ID])
    opened = [
        operation(
            "POST",
            "/checkout/v1/payment-links/{link_id}/payment-intents",
            "openCheckoutPaymentLink",
            TAG,
            "Open a payment link",
            "Makes a payment intent of the link's for one buyer and answers it (the link's page does the same, "
            "keeping the order in a cookie). 409 `payment_link_inactive` when the merchant deactivated it.",
            CheckoutPaymentIntent,
            status=201,
            public=True,
            errors=(404, 409),
        )
    ]
    _public(opened, [LINK_ID])
    return found + opened
