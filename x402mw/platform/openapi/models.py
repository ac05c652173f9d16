"""The OpenAPI document's request bodies, generated from the pydantic models the handlers validate
with, as the wire sees them (see `x402mw.platform.openapi.document`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from x402mw.platform.api.agents.challenges import ChallengeBatch
from x402mw.platform.api.agents.endpoints import EndpointCreate, EndpointUpdate
from x402mw.platform.api.agents.settlements import SettleBody
from x402mw.platform.api.agents.sign_ins import SignInBody
from x402mw.platform.api.facilitator import FacilitatorBody
from x402mw.platform.api.sandbox import FaucetBody
from x402mw.platform.api.webhook_endpoints import SecretRotation, WebhookEndpointCreate, WebhookEndpointUpdate
from x402mw.platform.http.fields import MINOR_SCHEMA, NO_NUL, minor_units
from x402mw.platform.openapi.schemas import REF, TEXT, Schema, ref

__all__ = ["JSON_VALUE", "model_schemas"]

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


_BODY_MODELS: list[type[BaseModel]] = [
    EndpointCreate,
    EndpointUpdate,
    ChallengeBatch,
    FacilitatorBody,
    SettleBody,
    SignInBody,
    FaucetBody,
    WebhookEndpointCreate,
    WebhookEndpointUpdate,
    SecretRotation,
]

_ENDPOINT_FIELDS = {
    "name": "1–200 characters",
    "resourceUrl": "absolute http(s) URL of the paid resource, or `mcp://tool/<name>` for an MCP tool",
    "payoutAddress": "EVM address receiving the funds; snapshotted in each challenge",
    "pricingMode": "`fixed`, or `dynamic` (the middleware's amount callback prices each request)",
    "amountMinor": 'integer string of minor units (`"10000"` is 0.01 USDC); required with `fixed` pricing',
    "releasePolicy": "`included` (serve once the transfer is in a block) or `confirmed` (wait for confirmations)",
    "maxTimeoutSeconds": "validity of challenges and authorizations in seconds, 30–3600",
    "discoverable": "list the endpoint's settled resources in the public discovery catalogue; default false",
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
        "hold": "verify and claim the payment without sending it (answered `held`): a paid MCP tool, "
        "settled with `capture` once the tool succeeded or released when it failed",
        "capture": "the id of this payment's `held` agent payment: settle it now",
        "description": "what the resource is, for the discovery catalogue",
        "mimeType": "what the resource answers, for the discovery catalogue",
        "extensions": "the route's `bazaar` declaration, for the discovery catalogue",
    },
    "SignInBody": {
        "endpointId": "the agent endpoint being signed into",
        "address": "the address the message names",
        "message": "the EIP-4361 message text that was signed",
        "signature": "EIP-191 signature of the message (or a smart account's EIP-1271/6492 one), 0x hex",
        "nonce": "the message's nonce: each is accepted once",
        "keepUntil": "Unix time (seconds) until which the nonce is kept (at most an hour from now)",
        "windowSeconds": "how recent a payment lets the address in; null: any settled payment",
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
}
# SettleBody reads these two as dicts and validates them itself, with the models referenced here.
_PROPERTY_OVERRIDES: dict[str, dict[str, Schema]] = {
    "Authorization": {"nonce": {"type": "string", "pattern": "^0[xX][0-9a-fA-F]{64}$"}},
    "SettleBody": {
        "accepted": {"$ref": REF.format(model="PaymentRequirements")},
        "paymentPayload": {"$ref": REF.format(model="PaymentPayload")},
    },
}


def model_schemas(
    models: Sequence[type[BaseModel]] = (),
    notes: Mapping[str, Mapping[str, str]] | None = None,
    overrides: Mapping[str, Mapping[str, Schema]] | None = None,
) -> dict[str, Schema]:
    """The request bodies' schemas: this module's and ``models``, with field
    ``notes`` and property ``overrides`` (e.g. for amounts parsed before validation)."""
    found: dict[str, Schema] = {}
    for model in [*_BODY_MODELS, *models]:
        schema = model.model_json_schema(by_alias=True, ref_template=REF, schema_generator=_WireJsonSchema)
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
