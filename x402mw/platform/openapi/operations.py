"""The operations of the OpenAPI document: one entry per route, with its parameters, body, the
response model it answers and the errors it documents (see `x402mw.platform.openapi.document`, which
puts the models' generated schemas in place)."""

from __future__ import annotations

import re

from pydantic import BaseModel

from x402mw.platform.api import discovery
from x402mw.platform.api.agents.settlements import MONTH
from x402mw.platform.http.fields import CHALLENGE_ID_SCHEMA, UUID_PATTERN
from x402mw.platform.objects.agents import (
    AgentChallengeEnvelope,
    AgentEndpointEnvelope,
    AgentEndpointList,
    AgentPaymentEnvelope,
    AgentPaymentList,
    AgentUsageEnvelope,
    ChallengeBatchResult,
    DiscoveryList,
    DiscoverySearch,
    SettlementRelease,
    SettlementResult,
    SignInResult,
    SupportedKinds,
)
from x402mw.platform.objects.payments import FaucetTransfer
from x402mw.platform.objects.service import HealthStatus, OpenApiDocument, Readiness
from x402mw.platform.objects.webhooks import (
    DeletedWebhookEndpoint,
    EventList,
    EventWithDeliveriesEnvelope,
    Redelivery,
    WebhookEndpointEnvelope,
    WebhookEndpointList,
)
from x402mw.platform.openapi.schemas import STRING, Schema, ref
from x402mw.platform.webhooks import EVENT_TYPES
from x402mw.protocol.models import SettlementResponse, VerifyResponse

__all__ = ["ERRORS", "LIST_PARAMS", "UUID", "operation", "operations", "query"]

ERRORS = {
    400: (
        "BadRequest",
        "Invalid request: a parameter is missing, unknown or invalid (`param` names it; a NUL character "
        "in any query parameter too), an `Idempotency-Key` was reused with another request "
        "(`idempotency_error`), or the URL path holds a control character (`url_invalid`).",
    ),
    401: ("Unauthorized", "The API key is missing, invalid or revoked."),
    404: ("NotFound", "No such object, or it belongs to another merchant (`resource_missing`)."),
    409: (
        "Conflict",
        "A request with this `Idempotency-Key` is still running (`idempotency_key_in_use`), or the request "
        "conflicts with the object's state (the operation names the codes).",
    ),
    413: ("PayloadTooLarge", "The request body is larger than 1 MiB."),
    422: ("Unprocessable", "The request is valid but cannot be carried out (e.g. `insufficient_balance`)."),
    429: (
        "TooManyRequests",
        "Rate limited (type `rate_limit_error`, code `rate_limited`): the public checkout endpoints count "
        "requests per client address and per payment intent; retry after `Retry-After` seconds.",
    ),
    503: (
        "ServiceUnavailable",
        "A dependency is down: the database (`database_unavailable`) or a chain's node (`chain_unavailable`). "
        "Nothing was taken or recorded; retry after `Retry-After` seconds, with the same `Idempotency-Key`.",
    ),
}
_NO_DEPENDENCY = frozenset({"/v1/health", "/healthz", "/readyz", "/v1/openapi.json", "/v1/x402/supported"})
UUID: Schema = {"type": "string", "pattern": UUID_PATTERN}
_MISSING = "; any other value answers 404 `resource_missing`, as an unknown id does"
_PATH_PARAMS: dict[str, tuple[str, Schema]] = {
    "endpoint_id": ("id of an agent endpoint (a UUID)", UUID),
    "challenge_id": ("id of a challenge, as the seller middleware made it", CHALLENGE_ID_SCHEMA),
    "payment_id": (
        "id of an agent payment or of a payment intent (a UUID; a payment intent's also as `pi_<uuid>`, "
        "as its `checkoutUrl` shows it)",
        {"type": "string", "pattern": "^(pi_)?" + UUID_PATTERN.removeprefix("^")},
    ),
    "webhook_endpoint_id": ("id of a webhook endpoint (a UUID)", UUID),
    "event_id": ("id of an event (a UUID)", UUID),
    "refund_id": ("id of a refund (a UUID)", UUID),
    "plan_id": ("id of a subscription plan (a UUID)", UUID),
    "subscription_id": ("id of a subscription (a UUID)", UUID),
    "test_clock_id": ("id of a test clock (a UUID)", UUID),
}
LIST_PARAMS = [{"$ref": "#/components/parameters/" + name} for name in ("limit", "starting_after", "ending_before")]


def query(name: str, description: str, schema: Schema) -> Schema:
    """A query parameter; a value its schema refuses is a 400 naming it."""
    return {"name": name, "in": "query", "description": description, "schema": schema}


def _pattern(regex: re.Pattern[str]) -> Schema:
    return {"type": "string", "pattern": regex.pattern}


# The discovery endpoints' filters, with the patterns x402mw.platform.api.discovery checks them by.
_OFFSET: Schema = {"type": "string", "pattern": "^(?:0|[1-9][0-9]{0,3}|10000)$"}
_WORDS: Schema = {"type": "string", "maxLength": 200, "pattern": "^[ -~]*[!-~][ -~]*$"}
_DISCOVERY_FILTERS = [
    query("type", "`http` or `mcp`", {"type": "string", "enum": ["http", "mcp"]}),
    query("payTo", "recipient address", _pattern(discovery.ADDRESS)),
    query("scheme", "payment scheme, e.g. `exact`", _pattern(discovery.SCHEME)),
    query("network", "CAIP-2 network, e.g. `eip155:8453`", _pattern(discovery.NETWORK)),
    query("extensions", "an extension the resource declares, e.g. `bazaar`", _pattern(discovery.EXTENSION)),
    query("limit", "1–100; default 20", {"type": "string", "pattern": "^(?:[1-9][0-9]?|100)$"}),
]


def operation(
    method: str,
    path: str,
    operation_id: str,
    tag: str,
    summary: str,
    description: str,
    answer: type[BaseModel],
    *,
    status: int = 200,
    public: bool = False,
    body: str | None = None,
    query: list[Schema] | None = None,
    errors: tuple[int, ...] = (),
) -> tuple[str, str, Schema]:
    """The operation ``operation_id``; its ``status`` answers the model ``answer``, whose schema
    the document puts in place of the class (`x402mw.platform.openapi.document`)."""
    idempotent = method == "POST" and not public
    parameters = list(query or [])
    if idempotent:
        parameters.append({"$ref": "#/components/parameters/Idempotency-Key"})
    parameters += [
        {"name": name, "in": "path", "required": True, "description": text + _MISSING, "schema": schema}
        for name, (text, schema) in _PATH_PARAMS.items()
        if "{" + name + "}" in path
    ]
    responses: Schema = {
        str(status): {
            "description": "Created" if status == 201 else "OK",
            "headers": {"Request-Id": {"$ref": "#/components/headers/Request-Id"}},
            "content": {"application/json": {"schema": answer}},
        }
    }
    implied = (
        *(() if public else (401,)),
        *((400, 413) if body else ()),
        *((400, 409) if idempotent else ()),
        # a parameter its schema refuses; and for every operation, a NUL in the query or a control
        # character in the path (refused before any handler runs)
        400,
        *(() if path in _NO_DEPENDENCY else (503,)),
    )
    for code in sorted({*errors, *implied}):
        responses[str(code)] = {"$ref": "#/components/responses/" + ERRORS[code][0]}
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
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref(body)}}}
    operation["responses"] = responses
    return method.lower(), path, operation


def _conditional(entry: tuple[str, str, Schema]) -> tuple[str, str, Schema]:
    """A read that answers an ``ETag`` and takes ``If-None-Match``: 304 while unchanged."""
    method, path, operation = entry
    etag = {"description": "the answer's entity tag, for `If-None-Match`", "schema": {"type": "string"}}
    operation["parameters"] = [
        *operation.get("parameters", []),
        {
            "name": "If-None-Match",
            "in": "header",
            "required": False,
            "description": "an `ETag` of an earlier answer: 304 without a body while it is still the current one",
            "schema": {"type": "string"},
        },
    ]
    operation["responses"]["200"]["headers"]["ETag"] = etag
    operation["responses"]["304"] = {
        "description": "Not modified: the answer would be the one `If-None-Match` names",
        "headers": {"Request-Id": {"$ref": "#/components/headers/Request-Id"}, "ETag": etag},
    }
    return method, path, operation


def _not_ready(entry: tuple[str, str, Schema]) -> tuple[str, str, Schema]:
    """The readiness probe answers 503 with its own body, not the error envelope."""
    method, path, operation = entry
    operation["responses"]["503"] = {
        "description": "Not ready: what cannot be reached is named",
        "headers": {"Request-Id": {"$ref": "#/components/headers/Request-Id"}},
        "content": {"application/json": {"schema": Readiness}},
    }
    return method, path, operation


def operations() -> list[tuple[str, str, Schema]]:
    endpoints, challenges, payments = "Agent endpoints", "Challenges", "Agent payments"
    return [
        *_webhook_operations(),
        operation(
            "POST",
            "/v1/agent/endpoints",
            "createAgentEndpoint",
            endpoints,
            "Create an agent endpoint",
            "A test key may only use test networks, a live key only live ones (`400 livemode_mismatch`).",
            AgentEndpointEnvelope,
            status=201,
            body="EndpointCreate",
        ),
        operation(
            "GET",
            "/v1/agent/endpoints",
            "listAgentEndpoints",
            endpoints,
            "List agent endpoints",
            "Newest first. An unknown cursor id is a 404.",
            AgentEndpointList,
            query=LIST_PARAMS,
            errors=(400, 404),
        ),
        _conditional(
            operation(
                "GET",
                "/v1/agent/endpoints/{endpoint_id}",
                "retrieveAgentEndpoint",
                endpoints,
                "Retrieve an agent endpoint",
                "The answer carries an `ETag`; sent back in `If-None-Match`, it is answered `304` without "
                "a body while the endpoint is unchanged (the seller middleware revalidates its terms so).",
                AgentEndpointEnvelope,
                errors=(404,),
            )
        ),
        operation(
            "PATCH",
            "/v1/agent/endpoints/{endpoint_id}",
            "updateAgentEndpoint",
            endpoints,
            "Update an agent endpoint",
            "Any field but `chainId` and `currency`. A new `payoutAddress` applies to challenges issued "
            "afterwards; payments of challenges issued before still settle to the old one. 409 "
            "`endpoint_needs_amount` when the endpoint would be `fixed` without `amountMinor`.",
            AgentEndpointEnvelope,
            body="EndpointUpdate",
            errors=(404, 409),
        ),
        operation(
            "POST",
            "/v1/agent/challenges/batch",
            "recordChallenges",
            challenges,
            "Record issued challenges",
            "The seller middleware issues challenges locally and sends them here in background batches.",
            ChallengeBatchResult,
            body="ChallengeBatch",
            errors=(404,),
        ),
        operation(
            "GET",
            "/v1/agent/challenges/{challenge_id}",
            "retrieveChallenge",
            challenges,
            "Retrieve a challenge and its payment",
            "",
            AgentChallengeEnvelope,
            errors=(404,),
        ),
        operation(
            "GET",
            "/merchant/v1/agent/challenges/{challenge_id}",
            "retrieveChallengeLegacy",
            challenges,
            "Retrieve a challenge (legacy path)",
            "Legacy alias `{api_host}/merchant/v1/agent/challenges/{challenge_id}` of "
            "`GET /v1/agent/challenges/{challenge_id}`, with the same answer.",
            AgentChallengeEnvelope,
            errors=(404,),
        ),
        operation(
            "POST",
            "/v1/agent/settlements",
            "settleAgentPayment",
            payments,
            "Settle a paid request",
            "Called by the seller middleware once per paid request. Verifies the payment, settles it "
            "on-chain with the relayer paying the gas, and answers a signed receipt. A refused "
            "payment is a 200 with `status: failed` and the reason in `settlement.errorReason`; "
            "the same signed payload sent again answers the original outcome. A payload carrying the "
            "x402 `payment-identifier` extension is settled once per id: the same id and payload answer "
            "the stored settlement (checked before the payment is verified); the same id with another "
            "payload is a 409 `payment_identifier_conflict`, and nothing is taken.",
            SettlementResult,
            body="SettleBody",
            errors=(404, 409),
        ),
        operation(
            "POST",
            "/v1/agent/settlements/{payment_id}/release",
            "releaseAgentPayment",
            payments,
            "Release a held payment",
            "Called by the seller's MCP adapter when a paid tool failed: the payment held with "
            "`hold: true` is given up, nothing is taken, and its authorization may be used again. "
            "409 once the payment is being settled or settled.",
            SettlementRelease,
            errors=(404, 409),
        ),
        operation(
            "GET",
            "/v1/agent/payments",
            "listAgentPayments",
            payments,
            "List agent payments",
            "Settled and failed agent payments, newest first.",
            AgentPaymentList,
            query=[
                *LIST_PARAMS,
                query("endpointId", "only this endpoint's payments", UUID),
            ],
            errors=(400, 404),
        ),
        operation(
            "GET",
            "/v1/agent/payments/{payment_id}",
            "retrieveAgentPayment",
            payments,
            "Retrieve an agent payment",
            "",
            AgentPaymentEnvelope,
            errors=(404,),
        ),
        operation(
            "GET",
            "/v1/agent/usage",
            "retrieveAgentUsage",
            payments,
            "Retrieve monthly usage",
            "Settlements, volume per coin and the planned fee: the first 1,000 settlements a month are "
            "free, then per settlement the larger of 0.005 and 0.3 % of its amount. Nothing is billed "
            "during the beta.",
            AgentUsageEnvelope,
            query=[query("month", "`YYYY-MM`; default the current month", STRING | {"pattern": f"^{MONTH.pattern}$"})],
            errors=(400,),
        ),
        operation(
            "POST",
            "/v1/x402/verify",
            "facilitatorVerify",
            "Facilitator",
            "Verify a payment (x402 facilitator)",
            "Checks the signature, terms and the payer's balance without settling. A payment it refuses is "
            "a 200 with `isValid: false` and the reason in `invalidReason`. Requirements carrying another "
            "merchant's x402mw challenge (`extra.challengeId`) are a 404, and nothing is verified.",
            VerifyResponse,
            body="FacilitatorBody",
            errors=(404,),
        ),
        operation(
            "POST",
            "/v1/x402/settle",
            "facilitatorSettle",
            "Facilitator",
            "Settle a payment (x402 facilitator)",
            "A refused payment is a 200 with `success: false` and the reason in `errorReason`. A "
            "settlement still pending after 30 s answers `success: false`, `errorReason: "
            "settlement_pending` with the transaction; the same request later answers the final result. "
            "Requirements carrying another merchant's x402mw challenge (`extra.challengeId`) are a 404, and "
            "nothing is settled. A `payment-identifier` id already used with another payload is a 409 "
            "`payment_identifier_conflict`; with the same payload it answers the stored settlement.",
            SettlementResponse,
            body="FacilitatorBody",
            errors=(404, 409),
        ),
        operation(
            "POST",
            "/v1/agent/sign-ins",
            "createSignIn",
            payments,
            "Sign a paying wallet back in (sign-in-with-x)",
            "The seller middleware's check of a `SIGN-IN-WITH-X` message: the signature (EIP-191, or a smart "
            "account's EIP-1271 / ERC-6492), the nonce (accepted once, in every process) and a "
            "settled payment by that address for the endpoint within `windowSeconds`. A refusal is a 200 "
            "with `signedIn: false` and the reason.",
            SignInResult,
            body="SignInBody",
            errors=(404,),
        ),
        operation(
            "GET",
            "/v1/x402/discovery/resources",
            "discoveryListResources",
            "Facilitator",
            "List discoverable resources (x402 Bazaar)",
            "The resources this platform settled for whose endpoints are `discoverable`, newest first. "
            "Public; rate limited per client address (429 with `Retry-After`).",
            DiscoveryList,
            public=True,
            query=[
                *_DISCOVERY_FILTERS,
                query("offset", "0–10000; default 0", _OFFSET),
            ],
            errors=(429,),
        ),
        operation(
            "GET",
            "/v1/x402/discovery/search",
            "discoverySearch",
            "Facilitator",
            "Search discoverable resources (x402 Bazaar)",
            "Resources whose URL, description or name contain every word of `query`. Public; rate limited.",
            DiscoverySearch,
            public=True,
            query=[
                query("query", "1–200 printable characters: the words to find", _WORDS) | {"required": True},
                *_DISCOVERY_FILTERS,
                query("cursor", "the `pagination.cursor` of the previous page", _OFFSET),
            ],
            errors=(429,),
        ),
        operation(
            "GET",
            "/v1/x402/supported",
            "facilitatorSupported",
            "Facilitator",
            "List supported payment kinds (x402 facilitator)",
            "",
            SupportedKinds,
            public=True,
        ),
        operation(
            "POST",
            "/v1/sandbox/faucet",
            "sandboxFaucet",
            "Sandbox",
            "Mint test coins",
            "Test keys only. Mints test USDC or EURC on the dev chain or on a local node whose token "
            "minter the platform holds.",
            FaucetTransfer,
            body="FaucetBody",
        ),
        operation("GET", "/v1/health", "getHealth", "Health", "Platform health", "", HealthStatus, public=True),
        operation(
            "GET",
            "/healthz",
            "getHealthz",
            "Health",
            "Platform health (probe path)",
            "",
            HealthStatus,
            public=True,
        ),
        _not_ready(
            operation(
                "GET",
                "/readyz",
                "getReadiness",
                "Health",
                "Readiness (probe path)",
                "Whether the platform can take payments now: its database answers and each chain's node can be "
                "reached. 200 when all can, else 503 with the same body naming what cannot (new payments, orders "
                "and refunds are answered 503 with `Retry-After` meanwhile).",
                Readiness,
                public=True,
            )
        ),
        operation(
            "GET",
            "/v1/openapi.json",
            "getOpenApiDocument",
            "Health",
            "This OpenAPI document",
            "",
            OpenApiDocument,
            public=True,
        ),
    ]


def _webhook_operations() -> list[tuple[str, str, Schema]]:
    hooks, events = "Webhook endpoints", "Events"
    one = "/v1/webhook-endpoints/{webhook_endpoint_id}"
    return [
        operation(
            "POST",
            "/v1/webhook-endpoints",
            "createWebhookEndpoint",
            hooks,
            "Create a webhook endpoint",
            "Answers the signing `secret` (`whsec_…`): store it now, reads never show it again.",
            WebhookEndpointEnvelope,
            status=201,
            body="WebhookEndpointCreate",
        ),
        operation(
            "GET",
            "/v1/webhook-endpoints",
            "listWebhookEndpoints",
            hooks,
            "List webhook endpoints",
            "Newest first.",
            WebhookEndpointList,
            query=LIST_PARAMS,
            errors=(400, 404),
        ),
        operation(
            "GET",
            one,
            "retrieveWebhookEndpoint",
            hooks,
            "Retrieve a webhook endpoint",
            "",
            WebhookEndpointEnvelope,
            errors=(404,),
        ),
        operation(
            "PATCH",
            one,
            "updateWebhookEndpoint",
            hooks,
            "Update a webhook endpoint",
            "An endpoint answering 410 is disabled by the platform; enable it again here.",
            WebhookEndpointEnvelope,
            body="WebhookEndpointUpdate",
            errors=(404,),
        ),
        operation(
            "DELETE",
            one,
            "deleteWebhookEndpoint",
            hooks,
            "Delete a webhook endpoint",
            "Its pending deliveries are dropped.",
            DeletedWebhookEndpoint,
            errors=(404,),
        ),
        operation(
            "POST",
            one + "/rotate-secret",
            "rotateWebhookSecret",
            hooks,
            "Rotate the signing secret",
            "Answers the new secret. Until `expiresInSeconds` have passed, deliveries carry one signature "
            "per valid secret, so receivers can switch without dropping events.",
            WebhookEndpointEnvelope,
            body="SecretRotation",
            errors=(404,),
        ),
        operation(
            "GET",
            "/v1/events",
            "listEvents",
            events,
            "List events",
            "Newest first.",
            EventList,
            query=[
                *LIST_PARAMS,
                query("type", "only events of this type", {"type": "string", "enum": list(EVENT_TYPES)}),
            ],
            errors=(400, 404),
        ),
        operation(
            "GET",
            "/v1/events/{event_id}",
            "retrieveEvent",
            events,
            "Retrieve an event and its deliveries",
            "",
            EventWithDeliveriesEnvelope,
            errors=(404,),
        ),
        operation(
            "POST",
            "/v1/events/{event_id}/redeliver",
            "redeliverEvent",
            events,
            "Redeliver an event",
            "Owes the event again, from now and for three more days, to every enabled endpoint whose "
            "filter matches; `redelivered` counts them. Takes no parameters.",
            Redelivery,
            errors=(404,),
        ),
    ]
