"""Schemas of the OpenAPI document: request bodies from the handlers' pydantic models, response
objects written to match what the handlers answer (see `x402mw.platform.api.openapi`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue
from pydantic_core import core_schema

from x402mw.platform.api.agent_challenges import ChallengeBatch
from x402mw.platform.api.agent_endpoints import EndpointCreate, EndpointUpdate
from x402mw.platform.api.agent_settlements import SettleBody
from x402mw.platform.api.facilitator import FacilitatorBody
from x402mw.platform.api.payment_intents import PaymentIntentCreate
from x402mw.platform.api.sandbox import FaucetBody
from x402mw.platform.api.webhook_endpoints import SecretRotation, WebhookEndpointCreate, WebhookEndpointUpdate
from x402mw.protocol.models import SettlementResponse, VerifyResponse

__all__ = ["REF", "STRING", "Schema", "model_schemas", "object_schema", "ref", "response_schemas"]

Schema = dict[str, Any]

REF = "#/components/schemas/{model}"

_DIGITS = {"type": "string", "pattern": "^[0-9]+$"}
STRING: Schema = {"type": "string"}
_INTEGER: Schema = {"type": "integer"}
_BOOLEAN: Schema = {"type": "boolean"}
_ADDRESS: Schema = {"type": "string", "pattern": "^0x[0-9a-fA-F]{40}$", "description": "EVM address"}
_TIMESTAMP: Schema = {"type": "string", "format": "date-time", "description": "ISO 8601 UTC, milliseconds"}
_MINOR: Schema = _DIGITS | {"description": "integer amount in the coin's minor units (6 decimals)"}
_DECIMAL: Schema = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$", "description": "decimal amount"}


class _WireJsonSchema(GenerateJsonSchema):
    """Pydantic's generator, adjusted to the wire: amounts that a ``mode="before"`` validator parses
    from digit strings into ``int`` are documented as the strings clients send, and field titles
    (which only repeat the name) are left out."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def function_before_schema(self, schema: core_schema.BeforeValidatorFunctionSchema) -> JsonSchemaValue:
        inner = schema["schema"]
        base = inner["schema"] if inner["type"] == "nullable" else inner
        if base["type"] == "int":
            digits = dict(_DIGITS)
            return {"anyOf": [digits, {"type": "null"}]} if base is not inner else digits
        return super().function_before_schema(schema)


_BODY_MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (EndpointCreate, "validation"),
    (EndpointUpdate, "validation"),
    (ChallengeBatch, "validation"),
    (FacilitatorBody, "validation"),
    (SettleBody, "validation"),
    (FaucetBody, "validation"),
    (PaymentIntentCreate, "validation"),
    (WebhookEndpointCreate, "validation"),
    (WebhookEndpointUpdate, "validation"),
    (SecretRotation, "validation"),
    (SettlementResponse, "serialization"),
    (VerifyResponse, "serialization"),
]

_ENDPOINT_FIELDS = {
    "name": "1–200 characters",
    "resourceUrl": "absolute http(s) URL of the paid resource",
    "payoutAddress": "EVM address receiving the funds; snapshotted in each challenge",
    "pricingMode": "`fixed`, or `dynamic` (the middleware's amount callback prices each challenge)",
    "amountMinor": 'integer string of minor units (`"10000"` is 0.01 USDC); required with `fixed` pricing',
    "releasePolicy": "`included` (serve once the transfer is in a block) or `confirmed` (wait for confirmations)",
    "maxTimeoutSeconds": "validity of challenges and authorizations in seconds, 30–3600",
}
_WEBHOOK_FIELDS = {
    "url": "absolute http(s) URL receiving the POSTed events",
    "enabledEvents": 'event types to receive (e.g. `agent_payment.settled`), or `["*"]` for all',
    "description": "free text, at most 500 characters",
}
_FIELD_NOTES: dict[str, dict[str, str]] = {
    "WebhookEndpointCreate": _WEBHOOK_FIELDS,
    "WebhookEndpointUpdate": _WEBHOOK_FIELDS
    | {"status": "`disabled` stops deliveries (pending ones wait); `enabled` resumes them"},
    "SecretRotation": {
        "expiresInSeconds": "how long the previous secret keeps signing deliveries next to the new one, "
        "0–604800 (7 days); default 86400"
    },
    "EndpointCreate": _ENDPOINT_FIELDS
    | {
        "chainId": "EVM chain id settled by this platform (see `GET /v1/x402/supported`)",
        "currency": "`USDC` or `EURC`; `USDT` is refused (no EIP-3009)",
    },
    "EndpointUpdate": _ENDPOINT_FIELDS,
    "ChallengeBatch": {"challenges": "challenges the seller middleware issued; ones already recorded are ignored"},
    "ChallengeIn": {
        "challengeId": "the id the seller middleware gave the challenge",
        "endpointId": "one of the caller's agent endpoints",
        "network": "CAIP-2 network, e.g. `eip155:84532`",
        "asset": "token address",
        "payTo": "payout address snapshotted in the challenge",
        "amount": "integer string of minor units",
        "resource": "URL of the paid resource",
        "expiresAt": "Unix time (seconds) after which the challenge can no longer be paid",
    },
    "SettleBody": {
        "endpointId": "the agent endpoint being paid",
        "challengeId": "the challenge the payment answers",
        "resource": "URL of the paid resource",
        "expiresAt": "Unix time (seconds) at which the challenge expires",
        "accepted": "the payment terms the agent accepted (sealed by the middleware)",
        "paymentPayload": "the agent's signed payload (`PAYMENT-SIGNATURE`)",
        "waitSeconds": "how long to wait for inclusion before answering `pending`, 0.1–120",
    },
    "FacilitatorBody": {
        "x402Version": "1 or 2",
        "paymentPayload": "the buyer's signed payload",
        "paymentRequirements": "the terms the payload must satisfy",
    },
    "FaucetBody": {
        "network": "a test network of this platform, e.g. `eip155:1337`",
        "currency": "coin to mint",
        "address": "EVM address receiving the coins",
        "amount": "decimal amount of coins, at most 1,000,000",
    },
    "PaymentIntentCreate": {
        "orderId": "the order's id in the merchant's system, 1–200 characters, unique per merchant and mode",
        "amount": 'decimal amount, greater than 0, at most 6 decimals and 1,000,000,000; a string such as `"12.50"` '
        "is recommended, JSON numbers are read exactly (never as floats)",
        "currency": "the primary coin",
        "acceptedCurrencies": "coins offered at checkout; must include `currency`; default `[currency]`",
        "customer": "the buyer",
        "customerEmail": "legacy form of `customer.email`; must agree with it when both are sent",
        "customerName": "legacy form of `customer.name`; must agree with it when both are sent",
        "successUrl": "absolute http(s) URL the buyer returns to after paying, at most 2048 characters",
        "cancelUrl": "absolute http(s) URL the buyer returns to after cancelling, at most 2048 characters",
        "metadata": "at most 50 string values, keys at most 40 and values at most 500 characters. "
        "`fixed_transfer_customer_id` reuses one deposit address for that customer's orders "
        "(`409 fixed_transfer_active_payment` while another open order holds it)",
        "paymentMethods": "what checkout offers; default wallet and transfer, transfer panel closed",
        "expiresAt": "ISO 8601 timestamp with a timezone, in the future; the order expires then",
    },
    "CustomerIn": {"email": "email address, at most 320 characters", "name": "at most 200 characters"},
    "PaymentMethodsIn": {
        "wallet": "offer payment from a browser wallet (default true)",
        "transfer": "offer a transfer to a dedicated deposit address (default true)",
        "transferDefaultOpen": "open the transfer panel first (default false; needs `transfer`)",
    },
    "PaymentRequirements": {
        "scheme": "`exact`",
        "network": "CAIP-2 network, e.g. `eip155:8453`",
        "amount": "integer string of the token's atomic units",
        "asset": "token address",
        "payTo": "recipient address",
        "maxTimeoutSeconds": "how long the payment may take",
        "extra": "the token's EIP-712 domain `name` and `version`",
    },
    "PaymentPayload": {
        "x402Version": "2 (1 for payloads read from `X-PAYMENT`)",
        "accepted": "the requirements the payer accepted, as offered",
        "payload": "the signed authorization",
    },
    "ExactEvmPayload": {"signature": "EIP-712 signature of the authorization, 0x hex"},
    "Authorization": {
        "from": "payer address",
        "to": "recipient address",
        "value": "integer string of atomic units",
        "validAfter": "Unix time (seconds) as a string",
        "validBefore": "Unix time (seconds) as a string",
        "nonce": "0x followed by 64 hex digits",
    },
    "SettlementResponse": {
        "errorReason": "x402 reason code when `success` is false",
        "payer": "payer address",
        "transaction": "transaction hash",
        "amount": "settled amount in atomic units",
        "extensions": "`receipt`: the platform's signed receipt",
    },
    "VerifyResponse": {"invalidReason": "x402 reason code when `isValid` is false", "payer": "payer address"},
}
# SettleBody reads these two as dicts and validates them itself, with the models referenced here.
_PROPERTY_OVERRIDES: dict[str, dict[str, Schema]] = {
    "PaymentIntentCreate": {
        "amount": {"anyOf": [_DECIMAL, {"type": "number", "exclusiveMinimum": 0}]},
    },
    "SettleBody": {
        "accepted": {"$ref": REF.format(model="PaymentRequirements")},
        "paymentPayload": {"$ref": REF.format(model="PaymentPayload")},
    },
}


def ref(name: str) -> Schema:
    return {"$ref": REF.format(model=name)}


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def object_schema(properties: dict[str, Schema], *, optional: tuple[str, ...] = (), **extra: Any) -> Schema:
    required = [name for name in properties if name not in optional]
    return {"type": "object", "properties": properties, "required": required} | extra


def _const(value: str) -> Schema:
    return {"type": "string", "const": value}


def _enum(*values: str) -> Schema:
    return {"type": "string", "enum": list(values)}


def _list_of(name: str) -> Schema:
    return object_schema(
        {"object": _const("list"), "data": {"type": "array", "items": ref(name)}, "hasMore": _BOOLEAN},
        description=f"A page of {name} objects, newest first.",
    )


def model_schemas() -> dict[str, Schema]:
    found: dict[str, Schema] = {}
    for model, mode in _BODY_MODELS:
        schema = model.model_json_schema(by_alias=True, ref_template=REF, schema_generator=_WireJsonSchema, mode=mode)
        for name, sub in {**schema.pop("$defs", {}), model.__name__: schema}.items():
            if found.setdefault(name, sub) != sub:
                raise RuntimeError(f"two different JSON schemas are named {name}")
    for name, notes in _FIELD_NOTES.items():
        properties = found[name]["properties"]
        for field, note in notes.items():
            properties[field]["description"] = note
    for name, overrides in _PROPERTY_OVERRIDES.items():
        for field, override in overrides.items():
            found[name]["properties"][field] = override | {"description": _FIELD_NOTES[name][field]}
    return found


def response_schemas() -> dict[str, Schema]:
    status_payment = _enum("claimed", "submitted", "settled", "failed")
    return {
        "AgentEndpoint": object_schema(
            {
                "id": STRING,
                "object": _const("agent_endpoint"),
                "name": STRING,
                "resourceUrl": STRING,
                "chainId": _INTEGER,
                "network": STRING | {"description": "`eip155:<chainId>`"},
                "currency": _enum("USDC", "EURC"),
                "asset": _nullable(_ADDRESS),
                "assetName": _nullable(STRING | {"description": "the token's EIP-712 domain name"}),
                "assetVersion": _nullable(STRING | {"description": "the token's EIP-712 domain version"}),
                "decimals": _INTEGER,
                "payoutAddress": _ADDRESS,
                "pricingMode": _enum("fixed", "dynamic"),
                "amountMinor": _nullable(_MINOR),
                "releasePolicy": _enum("included", "confirmed"),
                "maxTimeoutSeconds": _INTEGER,
                "livemode": _BOOLEAN,
                "createdAt": _TIMESTAMP,
                "updatedAt": _TIMESTAMP,
            },
            description="A resource the merchant sells to agents per request.",
        ),
        "AgentChallenge": object_schema(
            {
                "challengeId": STRING,
                "object": _const("agent_challenge"),
                "status": _enum("open", "expired", "processing", "settled", "failed"),
                "endpointId": STRING,
                "network": STRING,
                "asset": _ADDRESS,
                "payTo": _ADDRESS,
                "amountMinor": _MINOR,
                "resource": STRING,
                "expiresAt": _TIMESTAMP,
                "createdAt": _TIMESTAMP,
                "livemode": _BOOLEAN,
                "payment": _nullable(ref("AgentPayment")),
            },
            description="A challenge issued by the seller middleware, with the payment that answered it.",
        ),
        "AgentPayment": object_schema(
            {
                "id": STRING,
                "object": _const("agent_payment"),
                "status": status_payment,
                "challengeId": _nullable(STRING),
                "endpointId": _nullable(STRING),
                "network": STRING,
                "asset": _ADDRESS,
                "currency": STRING,
                "amountMinor": _MINOR,
                "payer": _ADDRESS,
                "payTo": _ADDRESS,
                "transaction": _nullable(STRING),
                "blockNumber": _nullable(_INTEGER),
                "errorReason": _nullable(STRING | {"description": "x402 reason code of a failed payment"}),
                "receipt": _nullable(ref("Receipt")),
                "livemode": _BOOLEAN,
                "createdAt": _TIMESTAMP,
                "settledAt": _nullable(_TIMESTAMP),
            },
            description="One EIP-3009 authorization settled (or refused) by the platform.",
        ),
        "Receipt": {
            "type": "object",
            "additionalProperties": STRING,
            "description": "Settlement receipt signed with EIP-191 by the receipt key (`signer`, `signature`, "
            "and the signed fields); verify it with `x402mw.evm.receipts.verify_receipt`.",
        },
        "AgentUsage": object_schema(
            {
                "object": _const("agent_usage"),
                "month": STRING | {"pattern": "^[0-9]{4}-[0-9]{2}$"},
                "livemode": _BOOLEAN,
                "settlements": _INTEGER,
                "freeSettlements": _INTEGER,
                "volume": {
                    "type": "object",
                    "additionalProperties": _DECIMAL,
                    "description": "settled amount per coin",
                },
                "plannedFee": {"type": "object", "additionalProperties": _DECIMAL, "description": "fee per coin"},
                "billed": _BOOLEAN | {"description": "always false during the beta"},
            },
            description="Settlements of one month and the planned fee (first 1,000 free).",
        ),
        **_webhook_schemas(),
        "PaymentIntent": _payment_intent(),
        "PaymentIntentList": _list_of("PaymentIntent"),
        "AgentEndpointList": _list_of("AgentEndpoint"),
        "AgentPaymentList": _list_of("AgentPayment"),
        "ChallengeBatchResult": object_schema({"object": _const("challenge_batch"), "received": _INTEGER}),
        "SettlementResult": object_schema(
            {
                "status": _enum("settled", "pending", "failed"),
                "settlement": ref("SettlementResponse"),
                "message": STRING,
                "paymentId": STRING,
                "accepted": object_schema({"payTo": _ADDRESS}),
            },
            optional=("message", "paymentId", "accepted"),
            description="The outcome of one paid request; `settlement` goes into `PAYMENT-RESPONSE`.",
        ),
        "SupportedKinds": object_schema(
            {
                "kinds": {
                    "type": "array",
                    "items": object_schema({"x402Version": _INTEGER, "scheme": STRING, "network": STRING}),
                },
                "extensions": {"type": "array", "items": STRING},
                "signers": {"type": "object", "additionalProperties": {"type": "array", "items": _ADDRESS}},
            }
        ),
        "FaucetTransfer": object_schema(
            {
                "object": _const("faucet_transfer"),
                "network": STRING,
                "currency": STRING,
                "address": _ADDRESS,
                "amount": _DECIMAL,
                "transaction": STRING,
            }
        ),
        "HealthStatus": object_schema(
            {
                "status": _const("ok"),
                "version": STRING,
                "receiptSigner": _ADDRESS | {"description": "address that signs settlement receipts"},
                "networks": {"type": "array", "items": STRING},
            }
        ),
        "Error": object_schema(
            {
                "type": _enum(
                    "invalid_request_error",
                    "authentication_error",
                    "idempotency_error",
                    "rate_limit_error",
                    "api_error",
                ),
                "code": STRING | {"description": "e.g. `parameter_invalid`, `resource_missing`"},
                "message": STRING,
                "requestId": STRING | {"description": "also in the `Request-Id` header"},
                "param": STRING | {"description": "the request parameter at fault, when there is one"},
            },
            optional=("param",),
        ),
        "ErrorEnvelope": object_schema({"error": ref("Error")}),
    }


def _payment_intent() -> Schema:
    currency = _enum("USDC", "USDT", "EURC")
    url = _nullable(STRING | {"format": "uri"})
    return object_schema(
        {
            "paymentId": STRING | {"format": "uuid", "description": "bare UUID; use it in API calls"},
            "id": STRING | {"format": "uuid", "description": "same as `paymentId`"},
            "object": _const("payment_intent"),
            "status": _enum("requires_payment", "processing", "succeeded", "canceled", "expired", "refunded"),
            "orderId": STRING,
            "amount": _DECIMAL,
            "amountReceived": _DECIMAL | {"description": "received so far (an underpaid order shows it)"},
            "currency": currency,
            "acceptedCurrencies": {"type": "array", "items": currency},
            "paymentMethods": object_schema(
                {"wallet": _BOOLEAN, "transfer": _BOOLEAN, "transferDefaultOpen": _BOOLEAN}
            ),
            "checkoutUrl": STRING
            | {
                "format": "uri",
                "description": "`{checkout_url_base}/pi_<uuid>`: hand it to the buyer exactly as returned",
            },
            "successUrl": url,
            "cancelUrl": url,
            "customer": object_schema({"email": _nullable(STRING), "name": _nullable(STRING)}),
            "metadata": {"type": "object", "additionalProperties": STRING},
            "exceptions": {
                "type": "array",
                "items": _enum("underpaid", "overpaid", "paid_late", "wrong_asset"),
                "description": "irregularities of the payment; never statuses",
            },
            "txHash": _nullable(STRING),
            "paidAt": _nullable(_TIMESTAMP),
            "expiresAt": _nullable(_TIMESTAMP),
            "livemode": _BOOLEAN,
            "createdAt": _TIMESTAMP,
            "updatedAt": _TIMESTAMP,
        },
        description="A payment order: an amount the merchant asks a buyer to pay at checkout.",
    )


def _webhook_schemas() -> dict[str, Schema]:
    event_fields: dict[str, Schema] = {
        "id": STRING | {"format": "uuid", "description": "also the `webhook-id` header of its deliveries"},
        "object": _const("event"),
        "type": STRING | {"description": "e.g. `agent_payment.settled`, `payment_intent.canceled`"},
        "createdAt": _TIMESTAMP,
        "livemode": _BOOLEAN,
        "data": {"type": "object", "description": "the objects the event is about, e.g. `agentPayment`"},
    }
    attempt = object_schema(
        {
            "at": _TIMESTAMP,
            "statusCode": _nullable(_INTEGER),
            "error": _nullable(STRING | {"description": "the network error when there was no answer"}),
            "durationMs": _INTEGER,
        }
    )
    return {
        "WebhookEndpoint": object_schema(
            {
                "id": STRING,
                "object": _const("webhook_endpoint"),
                "url": STRING | {"format": "uri"},
                "enabledEvents": {"type": "array", "items": STRING},
                "description": _nullable(STRING),
                "status": _enum("enabled", "disabled"),
                "livemode": _BOOLEAN,
                "createdAt": _TIMESTAMP,
                "updatedAt": _TIMESTAMP,
                "secret": STRING
                | {
                    "pattern": "^whsec_",
                    "description": "the signing secret; answered only by create and rotate-secret",
                },
            },
            optional=("secret",),
            description="A URL receiving the merchant's events, signed with Standard Webhooks.",
        ),
        "WebhookEndpointList": _list_of("WebhookEndpoint"),
        "DeletedWebhookEndpoint": object_schema(
            {"id": STRING, "object": _const("webhook_endpoint"), "deleted": {"type": "boolean", "const": True}}
        ),
        "Event": object_schema(event_fields, description="Something that happened, as delivered to webhooks."),
        "EventList": _list_of("Event"),
        "WebhookDelivery": object_schema(
            {
                "id": STRING,
                "endpointId": STRING,
                "status": _enum("pending", "delivered", "failed"),
                "attempts": {"type": "array", "items": attempt, "description": "the latest 50 attempts"},
                "lastStatusCode": _nullable(_INTEGER),
                "nextAttemptAt": _nullable(_TIMESTAMP),
                "deliveredAt": _nullable(_TIMESTAMP),
            },
            description="One event owed to one webhook endpoint.",
        ),
        "EventWithDeliveries": object_schema(
            event_fields | {"deliveries": {"type": "array", "items": ref("WebhookDelivery")}},
            description="An event and its delivery to each endpoint.",
        ),
        "Redelivery": object_schema({"object": _const("event"), "id": STRING, "redelivered": _INTEGER}),
    }
