"""Schemas of the OpenAPI document: the building blocks, and the response objects written to match
what the handlers answer (request bodies come from the handlers' pydantic models:
`x402mw.platform.api.openapi_models`; see `x402mw.platform.api.openapi`)."""

from __future__ import annotations

from typing import Any

from x402mw.platform.api.fields import NO_NUL

__all__ = [
    "ADDRESS",
    "BOOLEAN",
    "DECIMAL",
    "INTEGER",
    "MINOR",
    "REF",
    "STRING",
    "TEXT",
    "TIMESTAMP",
    "Schema",
    "const",
    "enum",
    "list_of",
    "nullable",
    "object_schema",
    "ref",
    "response_schemas",
]

Schema = dict[str, Any]

REF = "#/components/schemas/{model}"

_DIGITS = {"type": "string", "pattern": "^[0-9]+$"}
STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
BOOLEAN: Schema = {"type": "boolean"}
ADDRESS: Schema = {"type": "string", "pattern": "^0x[0-9a-fA-F]{40}$", "description": "EVM address"}
TIMESTAMP: Schema = {"type": "string", "format": "date-time", "description": "ISO 8601 UTC, milliseconds"}
MINOR: Schema = _DIGITS | {"description": "integer amount in the coin's minor units (6 decimals)"}
DECIMAL: Schema = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$", "description": "decimal amount"}
TEXT: Schema = {"type": "string", "pattern": NO_NUL}
"""A string in a request: no JSON string a request carries may hold NUL (`read_json` refuses it)."""


def ref(name: str) -> Schema:
    return {"$ref": REF.format(model=name)}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def object_schema(properties: dict[str, Schema], *, optional: tuple[str, ...] = (), **extra: Any) -> Schema:
    required = [name for name in properties if name not in optional]
    return {"type": "object", "properties": properties, "required": required} | extra


def const(value: str) -> Schema:
    return {"type": "string", "const": value}


def enum(*values: str) -> Schema:
    return {"type": "string", "enum": list(values)}


def list_of(name: str) -> Schema:
    return object_schema(
        {"object": const("list"), "data": {"type": "array", "items": ref(name)}, "hasMore": BOOLEAN},
        description=f"A page of {name} objects, newest first.",
    )


def response_schemas() -> dict[str, Schema]:
    status_payment = enum("claimed", "submitted", "settled", "failed")
    return {
        "AgentEndpoint": object_schema(
            {
                "id": STRING,
                "object": const("agent_endpoint"),
                "name": STRING,
                "resourceUrl": STRING,
                "chainId": INTEGER,
                "network": STRING | {"description": "`eip155:<chainId>`"},
                "currency": enum("USDC", "EURC"),
                "asset": nullable(ADDRESS),
                "assetName": nullable(STRING | {"description": "the token's EIP-712 domain name"}),
                "assetVersion": nullable(STRING | {"description": "the token's EIP-712 domain version"}),
                "decimals": INTEGER,
                "payoutAddress": ADDRESS,
                "pricingMode": enum("fixed", "dynamic"),
                "amountMinor": nullable(MINOR),
                "releasePolicy": enum("included", "confirmed"),
                "maxTimeoutSeconds": INTEGER,
                "livemode": BOOLEAN,
                "createdAt": TIMESTAMP,
                "updatedAt": TIMESTAMP,
            },
            description="A resource the merchant sells to agents per request.",
        ),
        "AgentChallenge": object_schema(
            {
                "challengeId": STRING,
                "object": const("agent_challenge"),
                "status": enum("open", "expired", "processing", "settled", "failed"),
                "endpointId": STRING,
                "network": STRING,
                "asset": ADDRESS,
                "payTo": ADDRESS,
                "amountMinor": MINOR,
                "resource": STRING,
                "expiresAt": TIMESTAMP,
                "createdAt": TIMESTAMP,
                "livemode": BOOLEAN,
                "payment": nullable(ref("AgentPayment")),
            },
            description="A challenge issued by the seller middleware, with the payment that answered it.",
        ),
        "AgentPayment": object_schema(
            {
                "id": STRING,
                "object": const("agent_payment"),
                "status": status_payment,
                "challengeId": nullable(STRING),
                "endpointId": nullable(STRING),
                "network": STRING,
                "asset": ADDRESS,
                "currency": STRING,
                "amountMinor": MINOR,
                "payer": ADDRESS,
                "payTo": ADDRESS,
                "transaction": nullable(STRING),
                "blockNumber": nullable(INTEGER),
                "errorReason": nullable(STRING | {"description": "x402 reason code of a failed payment"}),
                "receipt": nullable(ref("Receipt")),
                "livemode": BOOLEAN,
                "createdAt": TIMESTAMP,
                "settledAt": nullable(TIMESTAMP),
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
                "object": const("agent_usage"),
                "month": STRING | {"pattern": "^[0-9]{4}-[0-9]{2}$"},
                "livemode": BOOLEAN,
                "settlements": INTEGER,
                "freeSettlements": INTEGER,
                "volume": {
                    "type": "object",
                    "additionalProperties": DECIMAL,
                    "description": "settled amount per coin",
                },
                "plannedFee": {"type": "object", "additionalProperties": DECIMAL, "description": "fee per coin"},
                "billed": BOOLEAN | {"description": "always false during the beta"},
            },
            description="Settlements of one month and the planned fee (first 1,000 free).",
        ),
        **_webhook_schemas(),
        "AgentEndpointList": list_of("AgentEndpoint"),
        "AgentPaymentList": list_of("AgentPayment"),
        "ChallengeBatchResult": object_schema({"object": const("challenge_batch"), "received": INTEGER}),
        "SettlementResult": object_schema(
            {
                "status": enum("settled", "pending", "failed"),
                "settlement": ref("SettlementResponse"),
                "message": STRING,
                "paymentId": STRING,
                "accepted": object_schema({"payTo": ADDRESS}),
            },
            optional=("message", "paymentId", "accepted"),
            description="The outcome of one paid request; `settlement` goes into `PAYMENT-RESPONSE`.",
        ),
        "SupportedKinds": object_schema(
            {
                "kinds": {
                    "type": "array",
                    "items": object_schema({"x402Version": INTEGER, "scheme": STRING, "network": STRING}),
                },
                "extensions": {"type": "array", "items": STRING},
                "signers": {"type": "object", "additionalProperties": {"type": "array", "items": ADDRESS}},
            }
        ),
        "FaucetTransfer": object_schema(
            {
                "object": const("faucet_transfer"),
                "network": STRING,
                "currency": STRING,
                "address": ADDRESS,
                "amount": DECIMAL,
                "transaction": STRING,
            }
        ),
        "HealthStatus": object_schema(
            {
                "status": const("ok"),
                "version": STRING,
                "receiptSigner": ADDRESS | {"description": "address that signs settlement receipts"},
                "networks": {"type": "array", "items": STRING},
            }
        ),
        "Readiness": object_schema(
            {
                "status": enum("ready", "not_ready"),
                "database": enum("ok", "unavailable"),
                "chains": {
                    "type": "object",
                    "description": "each served network (CAIP-2) and whether its node can be reached",
                    "additionalProperties": enum("ok", "unavailable"),
                },
            }
        ),
        "Error": object_schema(
            {
                "type": enum(
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


def _webhook_schemas() -> dict[str, Schema]:
    event_fields: dict[str, Schema] = {
        "id": STRING | {"format": "uuid", "description": "also the `webhook-id` header of its deliveries"},
        "object": const("event"),
        "type": STRING | {"description": "e.g. `agent_payment.settled`, `payment_intent.canceled`"},
        "createdAt": TIMESTAMP,
        "livemode": BOOLEAN,
        "data": {"type": "object", "description": "the objects the event is about, e.g. `agentPayment`"},
    }
    attempt = object_schema(
        {
            "at": TIMESTAMP,
            "statusCode": nullable(INTEGER),
            "error": nullable(STRING | {"description": "the network error when there was no answer"}),
            "durationMs": INTEGER,
        }
    )
    return {
        "WebhookEndpoint": object_schema(
            {
                "id": STRING,
                "object": const("webhook_endpoint"),
                "url": STRING | {"format": "uri"},
                "enabledEvents": {"type": "array", "items": STRING},
                "description": nullable(STRING),
                "status": enum("enabled", "disabled"),
                "livemode": BOOLEAN,
                "createdAt": TIMESTAMP,
                "updatedAt": TIMESTAMP,
                "secret": STRING
                | {
                    "pattern": "^whsec_",
                    "description": "the signing secret; answered only by create and rotate-secret",
                },
            },
            optional=("secret",),
            description="A URL receiving the merchant's events, signed with Standard Webhooks.",
        ),
        "WebhookEndpointList": list_of("WebhookEndpoint"),
        "DeletedWebhookEndpoint": object_schema(
            {"id": STRING, "object": const("webhook_endpoint"), "deleted": {"type": "boolean", "const": True}}
        ),
        "Event": object_schema(event_fields, description="Something that happened, as delivered to webhooks."),
        "EventList": list_of("Event"),
        "WebhookDelivery": object_schema(
            {
                "id": STRING,
                "endpointId": STRING,
                "status": enum("pending", "delivered", "failed"),
                "attempts": {"type": "array", "items": attempt, "description": "the latest 50 attempts"},
                "lastStatusCode": nullable(INTEGER),
                "nextAttemptAt": nullable(TIMESTAMP),
                "deliveredAt": nullable(TIMESTAMP),
            },
            description="One event owed to one webhook endpoint.",
        ),
        "EventWithDeliveries": object_schema(
            event_fields | {"deliveries": {"type": "array", "items": ref("WebhookDelivery")}},
            description="An event and its delivery to each endpoint.",
        ),
        "Redelivery": object_schema({"object": const("event"), "id": STRING, "redelivered": INTEGER}),
    }
