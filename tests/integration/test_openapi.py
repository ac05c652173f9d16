"""The OpenAPI document: the same operations as the app's routes, valid OpenAPI 3.1, served as built,
and rendered into docs/api-reference.md."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import httpx
from openapi_spec_validator import validate
from starlette.routing import BaseRoute, Mount, Route

from tests.harness import PlatformHarness, sqlite_only
from x402mw import __version__
from x402mw.platform.app import create_app
from x402mw.platform.http.fields import MINOR_SCHEMA, amount_schema
from x402mw.platform.openapi.document import ServedChain, build_document
from x402mw.platform.openapi.reference import render_markdown
from x402mw.platform.services.payment_intents import ORDER_AMOUNTS
from x402mw.platform.services.sandbox import FAUCET_AMOUNTS

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "api-reference.md"
METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def _routes(routes: list[BaseRoute], prefix: str = "") -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for route in routes:
        if isinstance(route, Mount):
            found |= _routes(route.routes, prefix + route.path)
        elif isinstance(route, Route):
            if not route.include_in_schema:
                continue  # an HTML page (hosted checkout), not an API operation
            found |= {(method.lower(), prefix + route.path_format) for method in route.methods or ()} - {
                ("head", prefix + route.path_format)
            }
        else:
            raise AssertionError(f"unexpected route type {route!r}")
    return found


def _operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method, path): operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }


def _resolve(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = document
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def test_every_route_is_documented_and_every_operation_is_routed() -> None:
    app = create_app()  # the lifespan (which would start a platform) never runs: only routes are read
    routed = _routes(app.routes)
    documented = set(_operations(build_document()))
    assert ("get", "/v1/agent/endpoints/{endpoint_id}") in routed, "routes are read with their {param} paths"
    assert ("get", "/merchant/v1/agent/challenges/{challenge_id}") in routed
    assert routed - documented == set(), "routes missing from the OpenAPI document"
    assert documented - routed == set(), "documented operations without a route"


def test_the_document_is_valid_openapi_3_1() -> None:
    document = build_document()
    validate(document)
    assert document["openapi"].startswith("3.1")
    assert document["info"]["version"] == __version__
    assert "{api_host}" in document["servers"][0]["url"]


def test_every_operation_is_complete() -> None:
    document = build_document()
    operations = _operations(document)
    ids = [operation["operationId"] for operation in operations.values()]
    assert len(ids) == len(set(ids)), "operationIds are unique"
    tags = {tag["name"] for tag in document["tags"]}
    for (method, path), operation in operations.items():
        where = f"{method.upper()} {path}"
        assert operation["summary"], where
        assert set(operation["tags"]) <= tags, where
        statuses = list(operation["responses"])
        assert any(status.startswith("2") for status in statuses), where
        # a 402 only where a payment is the point: an order's x402Url (its body is x402's, not an error)
        assert ("402" in statuses) is (path == "/x402/pay/{payment_id}"), where
        for status, response in operation["responses"].items():
            response = _resolve(document, response)
            assert "Request-Id" in response["headers"], f"{where} {status}"
            if status.startswith("4") and status != "402":
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorEnvelope"}, f"{where} {status}"
        if operation["security"]:
            assert "401" in statuses, where
        if "{" in path:
            assert "404" in statuses, where
        if "requestBody" in operation:
            assert {"400", "413"} <= set(statuses), where


def test_documented_auth_and_list_conventions() -> None:
    document = build_document()
    operations = _operations(document)
    public = {key for key, operation in operations.items() if operation["security"] == []}
    assert public == {
        ("get", "/v1/x402/supported"),
        ("get", "/v1/x402/discovery/resources"),
        ("get", "/v1/x402/discovery/search"),
        ("get", "/v1/health"),
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/v1/openapi.json"),
        ("get", "/checkout/v1/payment-intents/{payment_id}"),
        ("post", "/checkout/v1/payment-intents/{payment_id}/attempts"),
        ("post", "/checkout/v1/payment-intents/{payment_id}/transfer-status"),
        ("post", "/checkout/v1/payment-intents/{payment_id}/sync"),
        ("post", "/checkout/v1/payment-intents/{payment_id}/authorizations"),
        ("post", "/checkout/v1/payment-intents/{payment_id}/prepare"),
        ("post", "/checkout/v1/payment-links/{link_id}/payment-intents"),
        ("get", "/x402/pay/{payment_id}"),
    }
    # the public checkout endpoints are rate-limited, and say so
    for key in public:
        if key[1].startswith(("/checkout/", "/x402/pay/")):
            assert "429" in operations[key]["responses"], key
    assert operations["post", "/checkout/v1/payment-intents/{payment_id}/prepare"]["deprecated"] is True
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["bearerAuth"]["description"],
    }
    assert schemes["apiKeyHeader"] == {"type": "apiKey", "in": "header", "name": "x-api-key"}
    limit = _resolve(document, {"$ref": "#/components/parameters/limit"})
    assert limit["schema"] == {"type": "integer", "minimum": 1, "maximum": 100, "default": 10}
    for key in [("get", "/v1/agent/endpoints"), ("get", "/v1/agent/payments")]:
        names = {_resolve(document, p)["name"] for p in operations[key]["parameters"]}
        assert {"limit", "starting_after", "ending_before"} <= names, key
        page = _resolve(document, operations[key]["responses"]["200"]["content"]["application/json"]["schema"])
        assert page["required"] == ["object", "data", "hasMore"]
    error = document["components"]["schemas"]["Error"]
    assert error["required"] == ["type", "code", "message", "requestId"]
    assert set(error["properties"]) == {"type", "code", "message", "requestId", "param"}


def test_request_bodies_come_from_the_pydantic_models() -> None:
    schemas = build_document()["components"]["schemas"]
    create = schemas["EndpointCreate"]
    assert create["additionalProperties"] is False
    assert set(create["required"]) == {"name", "resourceUrl", "chainId", "currency", "payoutAddress"}
    assert create["properties"]["maxTimeoutSeconds"]["minimum"] == 30
    # minor units parsed from digit strings are documented as those strings (or JSON integers)
    assert create["properties"]["amountMinor"]["anyOf"][0] == MINOR_SCHEMA
    # amounts: the pattern of the parser's grammar and bounds, or a JSON number
    for model, amounts in (("PaymentIntentCreate", ORDER_AMOUNTS), ("FaucetBody", FAUCET_AMOUNTS)):
        assert schemas[model]["properties"]["amount"]["anyOf"] == amount_schema(amounts)["anyOf"], model
        assert schemas[model]["properties"]["amount"]["anyOf"][0]["pattern"] == amounts.pattern()
    assert schemas["PaymentRequirements"]["properties"]["amount"]["type"] == "string"
    assert schemas["SettleBody"]["properties"]["paymentPayload"]["$ref"] == "#/components/schemas/PaymentPayload"
    assert schemas["ChallengeBatch"]["properties"]["challenges"]["items"] == {
        "$ref": "#/components/schemas/ChallengeIn"
    }


@sqlite_only  # never reaches the database
def test_the_running_platform_serves_the_document(dev_platform: PlatformHarness) -> None:
    response = httpx.get(dev_platform.url + "/openapi.json", timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["request-id"].startswith("req_")
    served = [ServedChain.of(chain) for chain in dev_platform.platform.chains]
    assert response.json() == build_document(served)
    # which chains and networks requests may name on this platform
    schemas = response.json()["components"]["schemas"]
    assert schemas["EndpointCreate"]["properties"]["chainId"]["enum"] == [dev_platform.chain.chain_id]
    for name in ("FaucetBody", "AttemptBody", "SyncBody"):
        assert schemas[name]["properties"]["network"]["enum"] == [dev_platform.network], name
    assert "enum" not in build_document()["components"]["schemas"]["FaucetBody"]["properties"]["network"]


@sqlite_only  # never reaches the database
def test_options_names_the_documented_methods_of_every_path(dev_platform: PlatformHarness) -> None:
    # Every documented path answers OPTIONS, without an API key, with exactly its documented methods
    # (and HEAD where it takes GET, and OPTIONS) in Allow; a 405 names the same ones.
    document = build_document()
    origin = dev_platform.url.removesuffix("/v1")
    examples = {"challenge_id": "ch_1", "payment_id": str(uuid.uuid4())}
    with httpx.Client(base_url=origin, timeout=30) as client:
        for path, item in document["paths"].items():
            url = re.sub(r"\{(\w+)\}", lambda m: examples.get(m.group(1), str(uuid.uuid4())), path)
            documented = {method.upper() for method in item if method in METHODS}
            expected = documented | {"OPTIONS"} | ({"HEAD"} if "GET" in documented else set())
            reply = client.options(url)
            assert reply.status_code == 204, (path, reply.text)
            assert {name.strip() for name in reply.headers["allow"].split(",")} == expected, path
            assert reply.content == b"" and reply.headers["request-id"].startswith("req_")
            refused = client.request("PUT", url)
            assert refused.status_code == 405, (path, refused.text)
            assert {name.strip() for name in refused.headers["allow"].split(",")} == expected, path
        # a URL the API does not have is still a 404, OPTIONS or not
        assert client.options("/v1/nothing-here").status_code == 404
        # the concrete path wins over the templated one, as in the document: no challenge is called "batch"
        batch = client.get("/v1/agent/challenges/batch")
        assert batch.status_code == 405 and batch.headers["allow"] == "POST, OPTIONS"


def test_the_reference_page_is_rendered_from_the_document() -> None:
    page = render_markdown(build_document())
    assert REFERENCE.read_text(encoding="utf-8") == page, (
        "docs/api-reference.md is stale: run python -m x402mw.platform.openapi.reference > docs/api-reference.md"
    )
    for tag in ["Agent endpoints", "Challenges", "Agent payments", "Facilitator", "Sandbox", "Health"]:
        assert f"\n## {tag}\n" in page
    assert "`PATCH /v1/agent/endpoints/{endpoint_id}`" in page
    assert "| `payoutAddress` | string | yes |" in page


def test_links_lead_from_an_answer_s_id_to_the_operations_that_take_it() -> None:
    document = build_document()
    operations = {op["operationId"]: (path, op) for (_, path), op in _operations(document).items()}
    links = 0
    for _, operation in operations.values():
        for response in operation["responses"].values():
            for link in _resolve(document, response).get("links", {}).values():
                target_path, _ = operations[link["operationId"]]
                for parameter, expression in link["parameters"].items():
                    assert f"{{{parameter}}}" in target_path, (link, target_path)
                    schema = _resolve(document, response)["content"]["application/json"]["schema"]
                    for part in expression.removeprefix("$response.body#/").split("/"):
                        schema = _resolve(document, schema)["properties"][part]
                    assert _resolve(document, schema)["type"] == "string"
                    links += 1
    assert links >= 13


def test_url_fields_are_documented_as_the_validator_reads_them() -> None:
    from x402mw.platform.http.fields import http_url, resource_url

    schemas = build_document()["components"]["schemas"]
    fields = [
        ("WebhookEndpointCreate", "url"),
        ("WebhookEndpointUpdate", "url"),
        ("EndpointCreate", "resourceUrl"),
        ("EndpointUpdate", "resourceUrl"),
        ("PaymentIntentCreate", "successUrl"),
        ("PaymentIntentCreate", "cancelUrl"),
    ]
    samples = [
        "https://shop.example/thanks?order=1#top",
        "HTTP://shop.example:8080/",
        "http://user@shop.example/x",
        "ftp://shop.example/",
        "https://",
        "https:///path",
        "https://shop.example/a b",
        "shop.example/thanks",
        "https://shop.example/" + "a" * 2040,
        "https://[::1]:8080/hook",
        "https://[::1",
        "https://:80/",
        "https://user@/x",
        "https://shop.example:99999/",
        "https://shop.example\\@evil.example/",
        "https://shop.example/\u3000",
        "https://shop.example/\x7f",
        "mcp://tool/forecast",
        "mcp://tool/a.b-c_d",
        "mcp://tool/",
        "mcp://tool/a/b",
        "mcp://tool/" + "a" * 129,
        "mcp://forecast",
    ]
    for model, field in fields:
        schema = schemas[model]["properties"][field]
        schema = next((s for s in schema.get("anyOf", [schema]) if s.get("type") == "string"), schema)
        options = schema.get("anyOf", [schema])  # an agent endpoint's resourceUrl: http(s), or an MCP tool
        check = resource_url if field == "resourceUrl" else http_url
        for url in samples:
            try:
                accepted = check(url) == url
            except ValueError:
                accepted = False
            documented = any(
                re.search(option["pattern"], url) is not None and len(url) <= option.get("maxLength", len(url))
                for option in options
            )
            assert documented == accepted, (model, field, url)
