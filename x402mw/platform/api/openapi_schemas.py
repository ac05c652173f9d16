"""Schemas of the OpenAPI document: request bodies from the handlers' pydantic models, response
objects written to match what the handlers answer (see `x402mw.platform.api.openapi`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue
from pydantic_core import core_schema

from x402mw.platform.api.agent_challenges import ChallengeBatch
from x402mw.platform.api.agent_endpoints import EndpointCreate, EndpointUpdate
from x402mw.platform.api.agent_settlements import SettleBody
from x402mw.platform.api.facilitator import FacilitatorBody
from x402mw.platform.api.fields import MINOR_SCHEMA, NO_NUL, minor_units
from x402mw.platform.api.sandbox import FaucetBody
from x402mw.platform.api.webhook_endpoints import SecretRotation, WebhookEndpointCreate, WebhookEndpointUpdate
from x402mw.protocol.models import SettlementResponse, VerifyResponse

__all__ = [
    "ADDRESS",
    "BOOLEAN",
    "DECIMAL",
    "INTEGER",
    "MINOR",
    "REF",
    "STRING",
    "TIMESTAMP",
    "Schema",
    "const",
    "enum",
    "list_of",
    "model_schemas",
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
JSON_VALUE = "JsonValue"
"""The schema of any JSON a request may carry where a model takes anything: no NUL in its strings
or member names."""


def json_value_schema() -> Schema:
    any_json = ref(JSON_VALUE)
    return {
        "description": "Any JSON value, without NUL in its strings and member names.",
        "anyOf": [
            TEXT,
            {"type": ["number", "boolean", "null"]},
            {"type": "array", "items": any_json},
            {"type": "object", "propertyNames": TEXT, "additionalProperties": any_json},
        ],
    }


# An integer of the x402 wire (an amount, a Unix time) as its digit string; the models take any up to
# 2**256 - 1, the document promises those below 10**18.
_WIRE_DIGITS = {"type": "string", "pattern": "^(?:0|[1-9][0-9]{0,17})$"}
# Where `_WireJsonSchema` means `JSON_VALUE`: a marker, since pydantic accounts for every "$ref" it
# writes; `model_schemas` puts the reference in its place.
_ANY_JSON = {"x-any-json": True}


def _with_json_value(node: Any) -> Any:
    if node == _ANY_JSON:
        return ref(JSON_VALUE)
    if isinstance(node, dict):
        return {key: _with_json_value(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_with_json_value(value) for value in node]
    return node


class _WireJsonSchema(GenerateJsonSchema):
    """Pydantic's generator, adjusted to the wire: amounts that a ``mode="before"`` validator parses
    from digit strings into ``int`` are documented as the strings clients send (with `minor_units`,
    also as JSON integers); strings the model leaves free are documented without NUL, and members
    the model takes without a schema as `JSON_VALUE`; field titles (which only repeat the name) are
    left out."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def function_before_schema(self, schema: core_schema.BeforeValidatorFunctionSchema) -> JsonSchemaValue:
        inner = schema["schema"]
        base = inner["schema"] if inner["type"] == "nullable" else inner
        if base["type"] == "int":
            function = schema["function"]["function"]
            digits = dict(MINOR_SCHEMA) if function is minor_units else dict(_WIRE_DIGITS)
            return {"anyOf": [digits, {"type": "null"}]} if base is not inner else digits
        return super().function_before_schema(schema)

    def str_schema(self, schema: core_schema.StringSchema) -> JsonSchemaValue:
        answer = super().str_schema(schema)
        if "pattern" not in answer and "format" not in answer:
            answer["pattern"] = NO_NUL
        return answer

    def any_schema(self, schema: core_schema.AnySchema) -> JsonSchemaValue:
        return dict(_ANY_JSON)

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        answer = super().dict_schema(schema)
        answer.setdefault("propertyNames", TEXT)
        return answer

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        answer = super().model_schema(schema)
        target = answer
        if "$ref" in answer:
            target = self.definitions.get(answer["$ref"].split("/")[-1], answer)
        if target.get("type") == "object" and target.get("additionalProperties") is not False:
            # members the model ignores or keeps are read all the same: no NUL in them either
            target["additionalProperties"] = dict(_ANY_JSON)
            target.setdefault("propertyNames", TEXT)
        return answer


_BODY_MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (EndpointCreate, "validation"),
    (EndpointUpdate, "validation"),
    (ChallengeBatch, "validation"),
    (FacilitatorBody, "validation"),
    (SettleBody, "validation"),
    (FaucetBody, "validation"),
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
    "pricingMode": "`fixed`, or `dynamic` (the middleware's amount callback prices each request)",
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
    "Authorization": {"nonce": {"type": "string", "pattern": "^0[xX][0-9a-fA-F]{64}$"}},
    "SettleBody": {
        "accepted": {"$ref": REF.format(model="PaymentRequirements")},
        "paymentPayload": {"$ref": REF.format(model="PaymentPayload")},
    },
}


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


def model_schemas(
    models: Sequence[type[BaseModel]] = (),
    notes: Mapping[str, Mapping[str, str]] | None = None,
    overrides: Mapping[str, Mapping[str, Schema]] | None = None,
) -> dict[str, Schema]:
    """The request bodies' schemas: this module's and ``models`` (validation mode), with field
    ``notes`` and property ``overrides`` (e.g. for amounts parsed before validation)."""
    found: dict[str, Schema] = {}
    for model, mode in [*_BODY_MODELS, *((m, "validation") for m in models)]:
        schema = model.model_json_schema(by_alias=True, ref_template=REF, schema_generator=_WireJsonSchema, mode=mode)
        schema = _with_json_value(schema)
        for name, sub in {**schema.pop("$defs", {}), model.__name__: schema}.items():
            if found.setdefault(name, sub) != sub:
                raise RuntimeError(f"two different JSON schemas are named {name}")
    found[JSON_VALUE] = json_value_schema()
    all_notes = {**_FIELD_NOTES, **(notes or {})}
    for name, fields in all_notes.items():
        properties = found[name]["properties"]
        for field, note in fields.items():
            properties[field]["description"] = note
    for name, replaced in {**_PROPERTY_OVERRIDES, **(overrides or {})}.items():
        for field, override in replaced.items():
            found[name]["properties"][field] = override | {"description": all_notes[name][field]}
    return found


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
