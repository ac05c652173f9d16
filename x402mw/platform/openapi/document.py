"""The OpenAPI 3.1 document of the platform API, served at ``GET /v1/openapi.json`` (no API key).

The document is built by walking the platform's routes (`x402mw.platform.routes.platform_routes`, the
tree the app mounts, with this document's own route),
as Starlette's ``SchemaGenerator`` does: each `ApiRoute` carries its `Operation` (id, tag, summary,
description, the model it answers and the errors it documents, its body model and parameters) next
to its method and path in its resource module, and a route of the API that is not an `ApiRoute`
is an error. Every schema is generated: request bodies from the pydantic models the handlers
validate with (`x402mw.platform.openapi.models`), answers from the response models the handlers
serialise (`x402mw.platform.objects`, through `x402mw.platform.openapi.answers`), each field
described by its model's ``Field(description=...)``. What is written here is what the whole
document says: the API's description, its tags, the shared parameters and errors, and links.
``tests/answers.py`` checks that every answer the test suite receives keeps to its operation's
schema, and ``docs/api-reference.md`` is rendered from this document
(`x402mw.platform.openapi.reference`).

>>> from x402mw.platform.openapi.document import build_document
>>> build_document()["paths"]["/v1/agent/endpoints"]["post"]["operationId"]
'createAgentEndpoint'
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from x402mw._version import __version__
from x402mw.platform.http.responses import answer_body
from x402mw.platform.http.routing import STRING, UUID, ApiRoute, Operation, Schema
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.service import ErrorEnvelope, OpenApiDocument
from x402mw.platform.openapi.answers import answer_schemas
from x402mw.platform.openapi.models import model_schemas
from x402mw.platform.openapi.operations import ERRORS, describe
from x402mw.platform.openapi.schemas import ref
from x402mw.platform.routes import platform_routes
from x402mw.platform.services.chains import ChainHandle

IDEMPOTENCY_KEY = "^[!-~](?:[ -~]*[!-~])?$"


def _components(bodies: list[type[BaseModel]], answers: dict[str, Schema]) -> Schema:
    request_id = {"$ref": "#/components/headers/Request-Id"}
    schemas = model_schemas(bodies)
    for name, schema in answers.items():
        if schemas.setdefault(name, schema) != schema:
            raise RuntimeError(f"a request body and an answer are both named {name}")
    return {
        "schemas": schemas,
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
                "description": "id of an object of the list: answer the page of older objects after it "
                "(an id the merchant has no such object with is a 404)",
                "schema": UUID,
            },
            "Idempotency-Key": {
                "name": "Idempotency-Key",
                "in": "header",
                "description": "1–255 printable ASCII characters. The same key with the same request within "
                "24 h answers the stored response again (with `Idempotent-Replayed: true`); with another "
                "request, 400 `idempotency_error`.",
                # leading and trailing spaces are not part of a header's value in HTTP
                "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": IDEMPOTENCY_KEY},
            },
            "ending_before": {
                "name": "ending_before",
                "in": "query",
                "description": "id of an object of the list: answer the page of newer objects before it; "
                "with `starting_after`, the objects between the two",
                "schema": UUID,
            },
        },
        "headers": {"Request-Id": {"description": "id of this request, quoted in logs and errors", "schema": STRING}},
        "responses": {
            name: {
                "description": text,
                "headers": {"Request-Id": request_id},
                "content": {"application/json": {"schema": ref(ErrorEnvelope.__name__)}},
            }
            for name, text in ERRORS.values()
        },
    }


_TAGS = [
    ("Payment intents", "Payment orders a buyer pays at checkout, with wallet or transfer."),
    ("Payment links", "Reusable priced links: each buyer who opens one gets a payment intent of their own."),
    ("Refunds", "Full refunds of paid orders to the paying wallet, from the treasury."),
    ("Balances", "The merchant's money per chain and coin: credited payments less refunds."),
    ("Reports", "Revenue, conversion, failures, subscriptions and top payers, read from rollups kept up to date."),
    ("Agent endpoints", "The resources a merchant sells to agents per request."),
    ("Challenges", "Challenges issued by the seller middleware, and the status of one payment."),
    ("Agent payments", "Settling paid requests, the payments settled, and monthly usage."),
    (
        "Agent channels",
        "Payment channels (`batch-settlement`): what each was charged off-chain, and claimed, settled and "
        "refunded on chain.",
    ),
    ("Facilitator", "The standard x402 v2 facilitator API, for any x402 seller."),
    ("Webhook endpoints", "URLs receiving the merchant's events, signed with Standard Webhooks."),
    ("Events", "What happened (the webhook outbox), each event's deliveries, and redelivery."),
    ("Subscription plans", "Prices per week, month, quarter or year that subscriptions are opened on."),
    (
        "Subscriptions",
        "Customers' subscriptions: each period has an invoice with a payment order the customer pays; "
        "webhooks (`subscription.*`) say when access starts, renews, lapses and ends.",
    ),
    ("Test clocks", "Test mode: clocks moved by hand, on which subscriptions live, to run months in seconds."),
    ("Sandbox", "Test-mode helpers, refused for live keys."),
    (
        "Checkout",
        "The public API of hosted checkout, under `/checkout/v1`: no API key; the payment intent's id "
        "(bare UUID or `pi_<uuid>`) is all it takes, so it answers only what a buyer may see.",
    ),
    ("Health", "Service status and this document."),
]

_DESCRIPTION = """\
The x402mw platform API. Authenticate with a merchant API key, as `Authorization: Bearer <key>` or
`x-api-key: <key>`; test keys (`sk_test_…`) see only test-mode objects. JSON is camelCase.
Errors answer `{"error": {"type", "code", "message", "requestId", "param"?}}` and every response
has a `Request-Id` header. Lists take `limit` (1–100, default 10), `starting_after` and
`ending_before`, and answer `{"object": "list", "data": [...], "hasMore"}`. Paths are relative to
`{api_host}`, the platform's origin.

Amounts are decimal strings in one grammar: ASCII digits without a sign, an exponent, white space
or a leading zero, then optionally `.` and at most 6 digits (`"25.00"`, `"0.5"`; not `" 1 "`, `"1."`,
`".5"` or `"+1"`). A JSON number is accepted too and read by its value, never as a float. No string
in a request may contain a NUL character. Ids are UUIDs (a challenge's id is the seller
middleware's); an id in a path that names nothing, malformed or unknown, answers 404
`resource_missing`. A request the document calls valid is answered 2xx, or 404 for an id that does
not exist, or 409 when the object's state does not allow it; one it calls invalid is a 400.

Every path answers `OPTIONS` with 204 and an `Allow` header naming its methods (no API key needed),
and `HEAD` wherever it answers `GET`; a method a path does not take is a 405 with the same `Allow`."""


# Where an operation's answer names an object that other operations take as a path parameter:
# (operation, status, JSON pointer to the id, parameter, the operations that take it). Rendered as
# OpenAPI links, which client generators and stateful API testers follow.
_LINKS: list[tuple[str, str, str, str, list[str]]] = [
    (
        "createPaymentIntent",
        "201",
        "/paymentIntent/id",
        "payment_id",
        [
            "retrievePaymentIntent",
            "cancelPaymentIntent",
            "createRefund",
            "sandboxSimulatePayment",
            "retrieveCheckoutPaymentIntent",
            "createCheckoutAttempt",
        ],
    ),
    ("createRefund", "201", "/refund/id", "refund_id", ["retrieveRefund"]),
    (
        "createPaymentLink",
        "201",
        "/paymentLink/id",
        "link_id",
        ["retrievePaymentLink", "updatePaymentLink", "openCheckoutPaymentLink"],
    ),
    (
        "createWebhookEndpoint",
        "201",
        "/webhookEndpoint/id",
        "webhook_endpoint_id",
        ["retrieveWebhookEndpoint", "updateWebhookEndpoint", "rotateWebhookSecret", "deleteWebhookEndpoint"],
    ),
    ("createAgentEndpoint", "201", "/endpoint/id", "endpoint_id", ["retrieveAgentEndpoint", "updateAgentEndpoint"]),
    ("createSubscriptionPlan", "201", "/plan/id", "plan_id", ["retrieveSubscriptionPlan", "updateSubscriptionPlan"]),
    (
        "createSubscription",
        "201",
        "/subscription/id",
        "subscription_id",
        ["retrieveSubscription", "listSubscriptionInvoices", "cancelSubscription"],
    ),
    ("createTestClock", "201", "/testClock/id", "test_clock_id", ["retrieveTestClock", "advanceTestClock"]),
]


def _add_links(paths: dict[str, Schema]) -> None:
    by_id = {op["operationId"]: op for item in paths.values() for op in item.values() if isinstance(op, dict)}
    for source, status, pointer, parameter, targets in _LINKS:
        links = by_id[source]["responses"][status].setdefault("links", {})
        for target in targets:
            name = target[0].upper() + target[1:]
            links[name] = {"operationId": target, "parameters": {parameter: f"$response.body#{pointer}"}}


def _with_answers(paths: dict[str, Schema]) -> dict[str, Schema]:
    """Puts in place of each response model (an `Operation`'s ``answer``, an `Answer`'s ``model``) the
    schema generated from it; the components those schemas reference, by name."""
    contents = [
        response["content"]["application/json"]
        for item in paths.values()
        for op in item.values()
        for response in op["responses"].values()
        if "content" in response
    ]
    contents = list({id(content): content for content in contents}.values())  # responses may share one
    models = list(dict.fromkeys([ErrorEnvelope, *(content["schema"] for content in contents)]))
    components, answers = answer_schemas(models)
    for content in contents:
        content["schema"] = answers[content["schema"]]
    return components


def _operations(routes: Sequence[BaseRoute], prefix: str = "") -> Iterator[tuple[str, str, Operation]]:
    """Each documented route's method, path and operation, mounts included, in the order they are routed."""
    for route in routes:
        if isinstance(route, Mount):
            yield from _operations(route.routes, prefix + route.path)
        elif isinstance(route, ApiRoute):
            (method,) = set(route.methods or ()) - {"HEAD"}
            yield method.lower(), prefix + route.path_format, route.operation
        elif isinstance(route, Route) and route.include_in_schema:
            raise RuntimeError(f"route {prefix}{route.path} is not documented: make it an ApiRoute")


@functools.cache
def _document() -> Schema:
    paths: dict[str, Schema] = {}
    bodies: list[type[BaseModel]] = []
    for method, path, operation in _operations(platform_routes(*document_routes())):
        if method in paths.setdefault(path, {}):
            raise RuntimeError(f"{method.upper()} {path} is routed twice")
        paths[path][method] = describe(method, path, operation)
        if operation.body is not None and operation.body not in bodies:
            bodies.append(operation.body)
    answers = _with_answers(paths)
    _add_links(paths)
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
        "components": _components(bodies, answers),
    }


@dataclass(frozen=True)
class ServedChain:
    """What the document says of one chain the platform serves."""

    chain_id: int
    network: str
    livemode: bool
    faucet: bool  # the sandbox can mint its test coins

    @classmethod
    def of(cls, chain: ChainHandle) -> ServedChain:
        faucet = not chain.livemode and (chain.dev is not None or chain.minter_key is not None)
        return cls(chain.chain_id, chain.network.caip2, chain.livemode, faucet)


def _one_of(values: Sequence[object]) -> Schema:
    return {"enum": list(values)} if values else {"not": {}}


def _served(document: Schema, chains: Sequence[ServedChain]) -> Schema:
    """``document`` stating which chains and networks a request may name on this platform."""
    schemas = document["components"]["schemas"]
    networks = [chain.network for chain in chains]
    test_networks = [chain.network for chain in chains if not chain.livemode]
    faucet = [chain.network for chain in chains if chain.faucet]
    schemas["EndpointCreate"]["properties"]["chainId"] |= _one_of([chain.chain_id for chain in chains])
    schemas["FaucetBody"]["properties"]["network"] |= _one_of(faucet)
    for name in ("AttemptBody", "SyncBody", "AuthorizationBody"):
        schemas[name]["properties"]["network"] |= _one_of(networks)
    for option in schemas["PrepareBody"]["properties"]["network"]["anyOf"]:
        if option.get("type") == "string":
            option |= _one_of(networks)
    for option in schemas["SimulatePaymentBody"]["properties"]["network"]["anyOf"]:
        if option.get("type") == "string":
            option |= _one_of(test_networks)
    return document


def build_document(chains: Sequence[ServedChain] | None = None) -> Schema:
    """The OpenAPI 3.1 document of the whole platform API (a fresh copy of one built per process).
    With ``chains``, the document a platform serving them serves: the chain ids and networks that
    requests name are listed (``GET /v1/openapi.json``); without, they are only described."""
    document = copy.deepcopy(_document())
    return document if chains is None else _served(document, chains)


@functools.cache
def _document_bytes(chains: tuple[ServedChain, ...]) -> bytes:
    return answer_body(OpenApiDocument.model_validate(build_document(chains)))


async def openapi_json(request: Request) -> Response:
    chains = tuple(ServedChain.of(chain) for chain in platform_of(request).chains)
    return Response(_document_bytes(chains), media_type="application/json")


def document_routes() -> list[BaseRoute]:
    """The route of this document, ``GET /v1/openapi.json``: what the app adds to the platform's
    routes (`platform_routes`), and what the document describes of itself."""
    return [
        ApiRoute(
            "GET",
            "/openapi.json",
            openapi_json,
            Operation(
                id="getOpenApiDocument",
                tag="Health",
                summary="This OpenAPI document",
                answer=OpenApiDocument,
                public=True,
                standalone=True,
            ),
        )
    ]
