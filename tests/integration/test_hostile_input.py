"""Hostile input on every documented operation: never a 5xx, always the error envelope.

Each operation of the OpenAPI document is called with bodies built from its own request schema but
filled with wrong values (wrong types, huge numbers, floats, control characters, bad URLs and dates),
with raw bodies that are not JSON, with hostile query strings and idempotency keys, and with path
ids that are unknown, malformed or the merchant's own real objects. The draw is seeded, so a failure
repeats. New operations are covered as soon as they are documented."""

from __future__ import annotations

import random
import re
import uuid
from typing import Any

import httpx
import pytest

from tests.harness import PlatformHarness
from x402mw.platform.openapi.document import build_document
from x402mw.protocol import PaymentRequirements

VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    1.5,
    1e308,
    10**40,
    "",
    " ",
    "x" * 5000,
    "0x" + "g" * 40,
    "💥",
    "\u0000",
    "-1",
    "NaN",
    "0.0000001",
    "2026-13-45T99:99:99Z",
    "1970-01-01T00:00:00Z",
    "https://",
    "javascript:alert(1)",
    [],
    {},
    [1, 2],
    {"a": {"b": []}},
    "USDT",
    "eip155:1",
    "0x0000000000000000000000000000000000000000",
    "*",
    "9" * 80,
]
RAW_BODIES = [b"{", b"[]", b"null", b"\xff\xfe", b'{"a":1}' * 1000, b'{"amount": 1e400}', b'{"amount": 0.1000001}']
BAD_IDS = ["x", str(uuid.UUID(int=0)), f"pi_{uuid.UUID(int=0)}", "%00", "..", "a" * 300, "😀", "' OR 1=1 --"]
IDEMPOTENCY_KEYS = [b"k", "klü".encode(), b"a" * 300, b"k k"]
CALLS_PER_OPERATION = 12


def _schema(document: dict[str, Any], operation: dict[str, Any]) -> dict[str, Any]:
    schema = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return dict(schema.get("properties", {}))


def _real_ids(harness: PlatformHarness, key: str) -> list[str]:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=harness.url, headers=headers, timeout=60) as api:
        orders = [
            api.post("/payment-intents", json={"orderId": f"hostile-{n}", "amount": "3", "currency": "USDC"}).json()[
                "paymentIntent"
            ]
            for n in range(2)
        ]
        paid = api.post(f"/sandbox/payment-intents/{orders[1]['id']}/simulate-payment", json={})
        assert paid.status_code == 200, paid.text
        hook = api.post("/webhook-endpoints", json={"url": "https://example.com/hook", "enabledEvents": ["*"]})
        assert hook.status_code == 201, hook.text
        events = api.get("/events").json()["data"]
    return [orders[0]["id"], f"pi_{orders[0]['id']}", orders[1]["id"], hook.json()["webhookEndpoint"]["id"]] + [
        event["id"] for event in events[:2]
    ]


def _is_envelope(response: httpx.Response) -> bool:
    if response.status_code == 402 and "payment-required" in response.headers:
        return True  # an x402 challenge (GET /x402/pay/{id} of an open order): the protocol's own shape
    try:
        body = response.json()
        if response.status_code == 402 and isinstance(body, dict) and body.get("x402Version") == 2:
            return "accepts" in body  # an order agents pay answers x402's own PaymentRequired
        error = body["error"]
    except (ValueError, KeyError, TypeError):
        # the hosted checkout page answers an unknown order with its own HTML page
        return response.status_code == 404 and response.headers.get("content-type", "").startswith("text/html")
    return isinstance(error, dict) and {"type", "code", "message", "requestId"} <= set(error)


@pytest.mark.both_databases  # huge numbers and control characters: PostgreSQL refuses what SQLite stores
def test_no_operation_answers_hostile_input_with_a_server_error(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("Hostile input")
    document = build_document()
    ids = BAD_IDS + _real_ids(dev_platform, key) * 3
    draw = random.Random(402)
    origin = dev_platform.url.removesuffix("/v1")
    failures: list[str] = []
    calls = 0
    with httpx.Client(timeout=60) as client:
        for path, methods in document["paths"].items():
            for method, operation in methods.items():
                properties = _schema(document, operation)
                for _ in range(CALLS_PER_OPERATION):
                    url = origin + re.sub(r"\{\w+\}", lambda _match: draw.choice(ids), path)
                    headers: dict[str, Any] = {"Authorization": f"Bearer {key}"}
                    if draw.random() < 0.2:
                        headers["Idempotency-Key"] = draw.choice(IDEMPOTENCY_KEYS)
                    if draw.random() < 0.2:
                        headers["Content-Type"] = "application/json"
                        request = client.build_request(
                            method.upper(), url, content=draw.choice(RAW_BODIES), headers=headers
                        )
                    else:
                        body = {name: draw.choice(VALUES) for name in properties if draw.random() < 0.7}
                        query = {}
                        if draw.random() < 0.5:
                            name = draw.choice(["limit", "starting_after", "ending_before", "orderId", "type"])
                            query[name] = str(draw.choice(VALUES))
                        request = client.build_request(
                            method.upper(),
                            url,
                            json=body if method in ("post", "patch") else None,
                            params=query,
                            headers=headers,
                        )
                    calls += 1
                    what = f"{method.upper()} {str(request.url)[:120]} {request.content[:160]!r}"
                    try:
                        response = client.send(request)
                    except httpx.TransportError as exc:  # the server dropped the connection: as bad as a 500
                        failures.append(f"{exc!r} on {what}")
                        continue
                    if response.status_code >= 500 or (response.status_code >= 400 and not _is_envelope(response)):
                        failures.append(f"{response.status_code} {response.text[:160]} on {what}")
    assert calls >= 30 * CALLS_PER_OPERATION
    assert not failures, "\n".join(failures[:20])


@pytest.mark.both_databases  # PostgreSQL refuses NUL in text, SQLite stores it
def test_a_nul_character_is_refused_before_it_reaches_the_database(dev_platform: PlatformHarness) -> None:
    # PostgreSQL text cannot hold NUL: unrefused, each of these was a 500 there
    _, key, _ = dev_platform.merchant("NUL")
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=dev_platform.url, headers=headers, timeout=60) as api:
        for path in ("/webhook-endpoints/%00", "/agent/payments/%00", "/agent/challenges/a%00b", "/events/%00"):
            reply = api.get(path)
            assert reply.status_code == 400, (path, reply.text)
            assert reply.json()["error"]["message"] == "The URL path contains a NUL character"
            error = reply.json()["error"]
            assert error["code"] == "url_invalid"
            assert error["requestId"] == reply.headers["request-id"] != ""
        reply = api.get("/events", params={"type": "payment_intent.created\x00"})
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["param"] == "type"
        for body, param in (
            ({"orderId": "a\x00b", "amount": "1", "currency": "USDC"}, "orderId"),
            ({"orderId": "nul-2", "amount": "1", "currency": "USDC", "metadata": {"k": "v\x00"}}, "metadata.k"),
            ({"orderId": "nul-3", "amount": "1", "currency": "USDC", "metadata": {"k\x00": "v"}}, "metadata.k\x00"),
            ({"orderId": "nul-4", "amount": "1", "currency": "USDC", "customer": {"name": "\x00"}}, "customer.name"),
        ):
            reply = api.post("/payment-intents", json=body)
            assert reply.status_code == 400, reply.text
            assert reply.json()["error"]["param"] == param
        assert api.get("/payment-intents").json()["data"] == []  # nothing was stored
        written = api.post("/payment-intents", json={"orderId": "a\\u0000b", "amount": "1", "currency": "USDC"})
        assert written.status_code == 201, written.text  # a backslash followed by u0000 is ordinary text
        assert written.json()["paymentIntent"]["orderId"] == "a\\u0000b"


@pytest.mark.both_databases  # PostgreSQL refuses text that is not UTF-8, SQLite stores it
def test_an_unpaired_surrogate_is_refused_before_it_is_stored(dev_platform: PlatformHarness) -> None:
    # JSON can spell half of a surrogate pair ("\ud800"), which no UTF-8 text can hold: stored as a
    # metadata key it made the creation itself answer 500, and every later read of the order.
    _, key, _ = dev_platform.merchant("Surrogates")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with httpx.Client(base_url=dev_platform.url, headers=headers, timeout=60) as api:
        for body, param in (
            (
                rb'{"orderId": "s-1", "amount": "1", "currency": "USDC", "metadata": {"\udfff": "v"}}',
                "metadata.\\udfff",
            ),
            (rb'{"orderId": "s-2", "amount": "1", "currency": "USDC", "metadata": {"k": "\uD800"}}', "metadata.k"),
            (rb'{"orderId": "s-\ud800", "amount": "1", "currency": "USDC"}', "orderId"),
        ):
            reply = api.post("/payment-intents", content=body)
            assert reply.status_code == 400, reply.text
            assert reply.json()["error"]["param"] == param
        assert api.get("/payment-intents").json()["data"] == []
        paired = api.post(
            "/payment-intents", content=rb'{"orderId": "s-\ud83d\ude00", "amount": "1", "currency": "USDC"}'
        )
        assert paired.status_code == 201 and paired.json()["paymentIntent"]["orderId"] == "s-\U0001f600"


def test_a_method_the_url_does_not_take_is_a_405_naming_the_ones_it_does(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("405")
    with httpx.Client(base_url=dev_platform.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        for method, path, allowed in (
            ("TRACE", "/health", {"GET", "HEAD", "OPTIONS"}),
            ("DELETE", "/payment-intents", {"GET", "HEAD", "POST", "OPTIONS"}),
            ("PUT", "/webhook-endpoints/whk_x", {"GET", "HEAD", "PATCH", "DELETE", "OPTIONS"}),
        ):
            reply = api.request(method, path)
            assert reply.status_code == 405, (method, path, reply.text)
            assert reply.json()["error"]["code"] == "method_not_allowed"
            assert {name.strip() for name in reply.headers["allow"].split(",")} == allowed


def test_a_control_character_in_the_path_is_refused_everywhere(dev_platform: PlatformHarness) -> None:
    # A trailing %0A slipped past the end of a mount's pattern: the checkout API answered its
    # HTML 404 page instead of the JSON envelope.
    origin = dev_platform.url.removesuffix("/v1")
    with httpx.Client(base_url=origin, timeout=60) as client:
        paths = ("/checkout/v1/payment-intents/abc%0A", "/v1/payment-intents/a%09b", "/checkout/x%7F", "/healthz%0D")
        for path in paths:
            reply = client.get(path)
            assert reply.status_code == 400, (path, reply.text)
            assert reply.json()["error"]["code"] == "url_invalid"
            assert reply.json()["error"]["message"] == "The URL path contains a control character"


def _nullable(document: dict[str, Any], schema_name: str) -> dict[str, bool]:
    properties = document["components"]["schemas"][schema_name]["properties"]
    return {name: {"type": "null"} in field.get("anyOf", ()) for name, field in properties.items()}


def test_a_patch_takes_null_exactly_where_the_document_says(dev_platform: PlatformHarness) -> None:
    # The document is generated from the models and the handler enforces them: sending `null` for
    # each field must be refused as "cannot be null" exactly where the schema does not admit null.
    deployment = dev_platform.deploy(amount_minor=None, pricing="dynamic", fund="")
    document = build_document()
    with deployment.api() as api:
        hook = api.post("/webhook-endpoints", json={"url": "https://example.com/hook", "enabledEvents": ["*"]})
        assert hook.status_code == 201, hook.text
        targets = {
            f"/agent/endpoints/{deployment.endpoint_id}": "EndpointUpdate",
            f"/webhook-endpoints/{hook.json()['webhookEndpoint']['id']}": "WebhookEndpointUpdate",
        }
        cleared = 0
        for path, schema_name in targets.items():
            for name, nullable in _nullable(document, schema_name).items():
                reply = api.patch(path, json={name: None})
                if nullable:
                    assert reply.status_code == 200, (path, name, reply.text)
                    cleared += 1
                else:
                    assert reply.status_code == 400, (path, name, reply.text)
                    assert reply.json()["error"] | {"requestId": ""} == {
                        "type": "invalid_request_error",
                        "code": "parameter_invalid",
                        "message": f"{name} cannot be null",
                        "param": name,
                        "requestId": "",
                    }
    assert cleared == 3  # a dynamic endpoint's amountMinor and channel offer, a webhook endpoint's description


def test_a_seal_in_other_characters_is_a_seal_of_another_merchant(dev_platform: PlatformHarness) -> None:
    # the facilitator checks the seal of a challenge it has no record of: any text is merely a wrong seal
    deployment = dev_platform.deploy()
    extra = {"name": "USD Coin", "version": "2", "challengeId": "c" * 32, "expiresAt": 4_000_000_000}
    with deployment.api() as api:
        for seal in ("é" * 32, "\u2028" * 43, "ｆ" * 32):
            requirements = {
                "scheme": "exact",
                "network": dev_platform.network,
                "amount": "5000",
                "asset": dev_platform.usdc,
                "payTo": deployment.payout,
                "maxTimeoutSeconds": 120,
                "extra": extra | {"seal": seal},
            }
            payload = deployment.agent.sign_payment(PaymentRequirements.model_validate(requirements)).to_wire()
            body = {"x402Version": 2, "paymentPayload": payload, "paymentRequirements": requirements}
            for operation in ("/x402/verify", "/x402/settle"):
                refused = api.post(operation, json=body)
                assert refused.status_code == 404, (operation, seal, refused.text)
                assert refused.json()["error"]["param"] == "paymentRequirements.extra.challengeId"
    assert dev_platform.balance(deployment.payout) == 0


def test_a_month_of_usage_is_one_with_a_next_month(dev_platform: PlatformHarness) -> None:
    _merchant, key, _ = dev_platform.merchant("Usage months")
    with httpx.Client(base_url=dev_platform.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        for month in ("9999-12", "9999-01", "２０２６-01", "٢٠٢٦-01", "2026-13", "0000-01"):
            refused = api.get("/agent/usage", params={"month": month})
            assert refused.status_code == 400, (month, refused.text)
            assert refused.json()["error"]["param"] == "month"
        for month in ("9998-12", "0001-01", "2026-11"):
            answered = api.get("/agent/usage", params={"month": month})
            assert answered.status_code == 200 and answered.json()["usage"]["month"] == month
