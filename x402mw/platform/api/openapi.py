"""The OpenAPI 3.1 document of the platform API, served at ``GET /v1/openapi.json`` (no API key).

Request bodies come from the pydantic models the handlers validate with; response objects are
written here to match what the handlers answer. ``tests/integration/test_openapi.py`` checks that
the documented operations and the app's routes are the same set, and ``docs/api-reference.md`` is
rendered from this document (`x402mw.platform.api.reference`).

>>> from x402mw.platform.api.openapi import build_document
>>> build_document()["paths"]["/v1/agent/endpoints"]["post"]["operationId"]
'createAgentEndpoint'
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue
from pydantic_core import core_schema
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from x402mw import __version__
from x402mw.platform.api.agent_challenges import ChallengeBatch
from x402mw.platform.api.agent_endpoints import EndpointCreate, EndpointUpdate
from x402mw.platform.api.agent_settlements import SettleBody
from x402mw.platform.api.facilitator import FacilitatorBody
from x402mw.platform.api.sandbox import FaucetBody
from x402mw.protocol.models import SettlementResponse, VerifyResponse

__all__ = ["build_document", "routes"]

Schema = dict[str, Any]
REF = "#/components/schemas/{model}"

_DIGITS = {"type": "string", "pattern": "^[0-9]+$"}
_STRING: Schema = {"type": "string"}
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
_FIELD_NOTES: dict[str, dict[str, str]] = {
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
_PROPERTY_OVERRIDES = {
    "SettleBody": {
        "accepted": {"$ref": REF.format(model="PaymentRequirements")},
        "paymentPayload": {"$ref": REF.format(model="PaymentPayload")},
    }
}


def _ref(name: str) -> Schema:
    return {"$ref": REF.format(model=name)}


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _object(properties: dict[str, Schema], *, optional: tuple[str, ...] = (), **extra: Any) -> Schema:
    required = [name for name in properties if name not in optional]
    return {"type": "object", "properties": properties, "required": required} | extra


def _const(value: str) -> Schema:
    return {"type": "string", "const": value}


def _enum(*values: str) -> Schema:
    return {"type": "string", "enum": list(values)}


def _list_of(name: str) -> Schema:
    return _object(
        {"object": _const("list"), "data": {"type": "array", "items": _ref(name)}, "hasMore": _BOOLEAN},
        description=f"A page of {name} objects, newest first.",
    )


def _model_schemas() -> dict[str, Schema]:
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


def _response_schemas() -> dict[str, Schema]:
    status_payment = _enum("claimed", "submitted", "settled", "failed")
    return {
        "AgentEndpoint": _object(
            {
                "id": _STRING,
                "object": _const("agent_endpoint"),
                "name": _STRING,
                "resourceUrl": _STRING,
                "chainId": _INTEGER,
                "network": _STRING | {"description": "`eip155:<chainId>`"},
                "currency": _enum("USDC", "EURC"),
                "asset": _nullable(_ADDRESS),
                "assetName": _nullable(_STRING | {"description": "the token's EIP-712 domain name"}),
                "assetVersion": _nullable(_STRING | {"description": "the token's EIP-712 domain version"}),
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
        "AgentChallenge": _object(
            {
                "challengeId": _STRING,
                "object": _const("agent_challenge"),
                "status": _enum("open", "expired", "processing", "settled", "failed"),
                "endpointId": _STRING,
                "network": _STRING,
                "asset": _ADDRESS,
                "payTo": _ADDRESS,
                "amountMinor": _MINOR,
                "resource": _STRING,
                "expiresAt": _TIMESTAMP,
                "createdAt": _TIMESTAMP,
                "livemode": _BOOLEAN,
                "payment": _nullable(_ref("AgentPayment")),
            },
            description="A challenge issued by the seller middleware, with the payment that answered it.",
        ),
        "AgentPayment": _object(
            {
                "id": _STRING,
                "object": _const("agent_payment"),
                "status": status_payment,
                "challengeId": _nullable(_STRING),
                "endpointId": _nullable(_STRING),
                "network": _STRING,
                "asset": _ADDRESS,
                "currency": _STRING,
                "amountMinor": _MINOR,
                "payer": _ADDRESS,
                "payTo": _ADDRESS,
                "transaction": _nullable(_STRING),
                "blockNumber": _nullable(_INTEGER),
                "errorReason": _nullable(_STRING | {"description": "x402 reason code of a failed payment"}),
                "receipt": _nullable(_ref("Receipt")),
                "livemode": _BOOLEAN,
                "createdAt": _TIMESTAMP,
                "settledAt": _nullable(_TIMESTAMP),
            },
            description="One EIP-3009 authorization settled (or refused) by the platform.",
        ),
        "Receipt": {
            "type": "object",
            "additionalProperties": _STRING,
            "description": "Settlement receipt signed with EIP-191 by the receipt key (`signer`, `signature`, "
            "and the signed fields); verify it with `x402mw.evm.receipts.verify_receipt`.",
        },
        "AgentUsage": _object(
            {
                "object": _const("agent_usage"),
                "month": _STRING | {"pattern": "^[0-9]{4}-[0-9]{2}$"},
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
        "AgentEndpointList": _list_of("AgentEndpoint"),
        "AgentPaymentList": _list_of("AgentPayment"),
        "ChallengeBatchResult": _object({"object": _const("challenge_batch"), "received": _INTEGER}),
        "SettlementResult": _object(
            {
                "status": _enum("settled", "pending", "failed"),
                "settlement": _ref("SettlementResponse"),
                "message": _STRING,
                "paymentId": _STRING,
                "accepted": _object({"payTo": _ADDRESS}),
            },
            optional=("message", "paymentId", "accepted"),
            description="The outcome of one paid request; `settlement` goes into `PAYMENT-RESPONSE`.",
        ),
        "SupportedKinds": _object(
            {
                "kinds": {
                    "type": "array",
                    "items": _object({"x402Version": _INTEGER, "scheme": _STRING, "network": _STRING}),
                },
                "extensions": {"type": "array", "items": _STRING},
                "signers": {"type": "object", "additionalProperties": {"type": "array", "items": _ADDRESS}},
            }
        ),
        "FaucetTransfer": _object(
            {
                "object": _const("faucet_transfer"),
                "network": _STRING,
                "currency": _STRING,
                "address": _ADDRESS,
                "amount": _DECIMAL,
                "transaction": _STRING,
            }
        ),
        "HealthStatus": _object(
            {
                "status": _const("ok"),
                "version": _STRING,
                "receiptSigner": _ADDRESS | {"description": "address that signs settlement receipts"},
                "networks": {"type": "array", "items": _STRING},
            }
        ),
        "Error": _object(
            {
                "type": _enum(
                    "invalid_request_error",
                    "authentication_error",
                    "idempotency_error",
                    "rate_limit_error",
                    "api_error",
                ),
                "code": _STRING | {"description": "e.g. `parameter_invalid`, `resource_missing`"},
                "message": _STRING,
                "requestId": _STRING | {"description": "also in the `Request-Id` header"},
                "param": _STRING | {"description": "the request parameter at fault, when there is one"},
            },
            optional=("param",),
        ),
        "ErrorEnvelope": _object({"error": _ref("Error")}),
    }


_ERRORS = {
    400: (
        "BadRequest",
        "Invalid request: a parameter is missing, unknown or invalid (`param` names it), or an "
        "`Idempotency-Key` was reused with another request (`idempotency_error`).",
    ),
    401: ("Unauthorized", "The API key is missing, invalid or revoked."),
    404: ("NotFound", "No such object, or it belongs to another merchant (`resource_missing`)."),
    409: ("Conflict", "A request with this `Idempotency-Key` is still running (`idempotency_key_in_use`)."),
    413: ("PayloadTooLarge", "The request body is larger than 1 MiB."),
}
_PATH_PARAMS = {
    "endpoint_id": "id of an agent endpoint",
    "challenge_id": "id of a challenge",
    "payment_id": "id of an agent payment",
}
_LIST_PARAMS = [{"$ref": "#/components/parameters/" + name} for name in ("limit", "starting_after", "ending_before")]


def _components() -> Schema:
    request_id = {"$ref": "#/components/headers/Request-Id"}
    return {
        "schemas": _model_schemas() | _response_schemas(),
        "securitySchemes": {
            "bearerAuth": {"type": "http", "scheme": "bearer", "description": "`Authorization: Bearer sk_test_…`"},
            "apiKeyHeader": {"type": "apiKey", "in": "header", "name": "x-api-key"},
        },
        "parameters": {
            "limit": {
                "name": "limit",
                "in": "query",
                "description": "page size",
                "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
            },
            "starting_after": {
                "name": "starting_after",
                "in": "query",
                "description": "id of an object: answer the page of older objects after it",
                "schema": _STRING,
            },
            "Idempotency-Key": {
                "name": "Idempotency-Key",
                "in": "header",
                "description": "1–255 printable ASCII characters. The same key with the same request within "
                "24 h answers the stored response again (with `Idempotent-Replayed: true`).",
                "schema": {"type": "string", "minLength": 1, "maxLength": 255},
            },
            "ending_before": {
                "name": "ending_before",
                "in": "query",
                "description": "id of an object: answer the page of newer objects before it",
                "schema": _STRING,
            },
        },
        "headers": {"Request-Id": {"description": "id of this request, quoted in logs and errors", "schema": _STRING}},
        "responses": {
            name: {
                "description": text,
                "headers": {"Request-Id": request_id},
                "content": {"application/json": {"schema": _ref("ErrorEnvelope")}},
            }
            for name, text in _ERRORS.values()
        },
    }


def _operation(
    method: str,
    path: str,
    operation_id: str,
    tag: str,
    summary: str,
    description: str,
    answer: Schema,
    *,
    status: int = 200,
    public: bool = False,
    body: str | None = None,
    query: list[Schema] | None = None,
    errors: tuple[int, ...] = (),
) -> tuple[str, str, Schema]:
    idempotent = method == "POST" and not public
    parameters = list(query or [])
    if idempotent:
        parameters.append({"$ref": "#/components/parameters/Idempotency-Key"})
    parameters += [
        {"name": name, "in": "path", "required": True, "description": text, "schema": _STRING}
        for name, text in _PATH_PARAMS.items()
        if "{" + name + "}" in path
    ]
    responses: Schema = {
        str(status): {
            "description": "Created" if status == 201 else "OK",
            "headers": {"Request-Id": {"$ref": "#/components/headers/Request-Id"}},
            "content": {"application/json": {"schema": answer}},
        }
    }
    implied = (*(() if public else (401,)), *((400, 413) if body else ()), *((400, 409) if idempotent else ()))
    for code in sorted({*errors, *implied}):
        responses[str(code)] = {"$ref": "#/components/responses/" + _ERRORS[code][0]}
    operation: Schema = {
        "operationId": operation_id,
        "tags": [tag],
        "summary": summary,
        "description": description,
        "security": [] if public else [{"bearerAuth": []}, {"apiKeyHeader": []}],
    }
    if parameters:
        operation["parameters"] = parameters
    if body is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    operation["responses"] = responses
    return method.lower(), path, operation


def _wrapped(key: str, name: str) -> Schema:
    return _object({key: _ref(name)})


def _operations() -> list[tuple[str, str, Schema]]:
    endpoints, challenges, payments = "Agent endpoints", "Challenges", "Agent payments"
    return [
        _operation(
            "POST",
            "/v1/agent/endpoints",
            "createAgentEndpoint",
            endpoints,
            "Create an agent endpoint",
            "A test key may only use test networks, a live key only live ones (`400 livemode_mismatch`).",
            _wrapped("endpoint", "AgentEndpoint"),
            status=201,
            body="EndpointCreate",
        ),
        _operation(
            "GET",
            "/v1/agent/endpoints",
            "listAgentEndpoints",
            endpoints,
            "List agent endpoints",
            "Newest first. An unknown cursor id is a 404.",
            _ref("AgentEndpointList"),
            query=_LIST_PARAMS,
            errors=(400, 404),
        ),
        _operation(
            "GET",
            "/v1/agent/endpoints/{endpoint_id}",
            "retrieveAgentEndpoint",
            endpoints,
            "Retrieve an agent endpoint",
            "",
            _wrapped("endpoint", "AgentEndpoint"),
            errors=(404,),
        ),
        _operation(
            "PATCH",
            "/v1/agent/endpoints/{endpoint_id}",
            "updateAgentEndpoint",
            endpoints,
            "Update an agent endpoint",
            "Any field but `chainId` and `currency`. A new `payoutAddress` applies to challenges issued "
            "afterwards; payments of challenges issued before still settle to the old one.",
            _wrapped("endpoint", "AgentEndpoint"),
            body="EndpointUpdate",
            errors=(404,),
        ),
        _operation(
            "POST",
            "/v1/agent/challenges/batch",
            "recordChallenges",
            challenges,
            "Record issued challenges",
            "The seller middleware issues challenges locally and sends them here in background batches.",
            _ref("ChallengeBatchResult"),
            body="ChallengeBatch",
            errors=(404,),
        ),
        _operation(
            "GET",
            "/v1/agent/challenges/{challenge_id}",
            "retrieveChallenge",
            challenges,
            "Retrieve a challenge and its payment",
            "",
            _wrapped("challenge", "AgentChallenge"),
            errors=(404,),
        ),
        _operation(
            "GET",
            "/merchant/v1/agent/challenges/{challenge_id}",
            "retrieveChallengeLegacy",
            challenges,
            "Retrieve a challenge (legacy path)",
            "Legacy alias `{api_host}/merchant/v1/agent/challenges/{challenge_id}` of "
            "`GET /v1/agent/challenges/{challenge_id}`, with the same answer.",
            _wrapped("challenge", "AgentChallenge"),
            errors=(404,),
        ),
        _operation(
            "POST",
            "/v1/agent/settlements",
            "settleAgentPayment",
            payments,
            "Settle a paid request",
            "Called by the seller middleware once per paid request. Verifies the payment, settles it "
            "on-chain with the relayer paying the gas, and answers a signed receipt. A refused "
            "payment is a 200 with `status: failed` and the reason in `settlement.errorReason`; "
            "the same signed payload sent again answers the original outcome.",
            _ref("SettlementResult"),
            body="SettleBody",
            errors=(404,),
        ),
        _operation(
            "GET",
            "/v1/agent/payments",
            "listAgentPayments",
            payments,
            "List agent payments",
            "Settled and failed agent payments, newest first.",
            _ref("AgentPaymentList"),
            query=[
                *_LIST_PARAMS,
                {
                    "name": "endpointId",
                    "in": "query",
                    "description": "only this endpoint's payments",
                    "schema": _STRING,
                },
            ],
            errors=(400, 404),
        ),
        _operation(
            "GET",
            "/v1/agent/payments/{payment_id}",
            "retrieveAgentPayment",
            payments,
            "Retrieve an agent payment",
            "",
            _wrapped("agentPayment", "AgentPayment"),
            errors=(404,),
        ),
        _operation(
            "GET",
            "/v1/agent/usage",
            "retrieveAgentUsage",
            payments,
            "Retrieve monthly usage",
            "Settlements, volume per coin and the planned fee: the first 1,000 settlements a month are "
            "free, then per settlement the larger of 0.005 and 0.3 % of its amount. Nothing is billed "
            "during the beta.",
            _wrapped("usage", "AgentUsage"),
            query=[
                {
                    "name": "month",
                    "in": "query",
                    "description": "`YYYY-MM`; default the current month",
                    "schema": _STRING | {"pattern": "^[0-9]{4}-[0-9]{2}$"},
                }
            ],
            errors=(400,),
        ),
        _operation(
            "POST",
            "/v1/x402/verify",
            "facilitatorVerify",
            "Facilitator",
            "Verify a payment (x402 facilitator)",
            "Checks the signature, terms and the payer's balance without settling.",
            _ref("VerifyResponse"),
            body="FacilitatorBody",
        ),
        _operation(
            "POST",
            "/v1/x402/settle",
            "facilitatorSettle",
            "Facilitator",
            "Settle a payment (x402 facilitator)",
            "A settlement still pending after 30 s answers `success: false`, `errorReason: "
            "settlement_pending` with the transaction; the same request later answers the final result.",
            _ref("SettlementResponse"),
            body="FacilitatorBody",
        ),
        _operation(
            "GET",
            "/v1/x402/supported",
            "facilitatorSupported",
            "Facilitator",
            "List supported payment kinds (x402 facilitator)",
            "",
            _ref("SupportedKinds"),
            public=True,
        ),
        _operation(
            "POST",
            "/v1/sandbox/faucet",
            "sandboxFaucet",
            "Sandbox",
            "Mint test coins",
            "Test keys only. Mints test USDC or EURC on the dev chain or on a local node whose token "
            "minter the platform holds.",
            _ref("FaucetTransfer"),
            body="FaucetBody",
        ),
        _operation(
            "GET", "/v1/health", "getHealth", "Health", "Platform health", "", _ref("HealthStatus"), public=True
        ),
        _operation(
            "GET",
            "/healthz",
            "getHealthz",
            "Health",
            "Platform health (probe path)",
            "",
            _ref("HealthStatus"),
            public=True,
        ),
        _operation(
            "GET",
            "/v1/openapi.json",
            "getOpenApiDocument",
            "Health",
            "This OpenAPI document",
            "",
            {"type": "object", "description": "an OpenAPI 3.1 document"},
            public=True,
        ),
    ]


_TAGS = [
    ("Agent endpoints", "The resources a merchant sells to agents per request."),
    ("Challenges", "Challenges issued by the seller middleware, and the status of one payment."),
    ("Agent payments", "Settling paid requests, the payments settled, and monthly usage."),
    ("Facilitator", "The standard x402 v2 facilitator API, for any x402 seller."),
    ("Sandbox", "Test-mode helpers, refused for live keys."),
    ("Health", "Service status and this document."),
]

_DESCRIPTION = """\
The x402mw platform API. Authenticate with a merchant API key, as `Authorization: Bearer <key>` or
`x-api-key: <key>`; test keys (`sk_test_…`) see only test-mode objects. JSON is camelCase and
amounts are strings. Errors answer `{"error": {"type", "code", "message", "requestId", "param"?}}`
and every response has a `Request-Id` header. Lists take `limit` (1–100, default 10),
`starting_after` and `ending_before`, and answer `{"object": "list", "data": [...], "hasMore"}`.
Paths are relative to `{api_host}`, the platform's origin."""


@functools.cache
def _document() -> Schema:
    paths: dict[str, Schema] = {}
    for method, path, operation in _operations():
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "x402mw platform API", "version": __version__, "description": _DESCRIPTION},
        "servers": [
            {
                "url": "{api_host}",
                "description": "the platform's origin (its base URL without `/v1`)",
                "variables": {"api_host": {"default": "http://127.0.0.1:4402"}},
            }
        ],
        "tags": [{"name": name, "description": text} for name, text in _TAGS],
        "paths": paths,
        "components": _components(),
    }


@functools.cache
def _document_bytes() -> bytes:
    return json.dumps(_document(), ensure_ascii=False, separators=(",", ":")).encode()


def build_document() -> Schema:
    """The OpenAPI 3.1 document of the whole platform API (a fresh copy of one built per process)."""
    return copy.deepcopy(_document())


async def openapi_json(_request: Request) -> Response:
    return Response(_document_bytes(), media_type="application/json")


routes = [Route("/openapi.json", openapi_json, methods=["GET"])]
