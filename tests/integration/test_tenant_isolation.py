"""Tenant isolation across the whole API: every operation of the OpenAPI document that takes an id
answers another merchant's id exactly as it answers an unknown one, 404 ``resource_missing``, and
changes nothing. New routes are covered as soon as they are documented."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest

from tests.channel_fixtures import channel_app, open_channel
from tests.harness import PlatformHarness
from tests.sellers import asgi_transport, starlette_app
from x402mw.client import X402Auth
from x402mw.platform.openapi.document import build_document

pytestmark = pytest.mark.anyio

# bodies that would be accepted for the caller's own objects, so that only ownership can fail
_BODIES = {
    ("patch", "/v1/agent/endpoints/{endpoint_id}"): {"name": "Taken over"},
    ("patch", "/v1/webhook-endpoints/{webhook_endpoint_id}"): {"description": "taken over"},
    ("post", "/v1/payment-intents/{payment_id}/refunds"): {"reason": "taken over"},
    ("post", "/v1/sandbox/payment-intents/{payment_id}/simulate-payment"): {"scenario": "exact"},
    ("patch", "/v1/subscription-plans/{plan_id}"): {"name": "Taken over"},
    ("post", "/v1/test-clocks/{test_clock_id}/advance"): {"frozenTime": "2026-02-01T00:00:00Z"},
    ("patch", "/v1/payment-links/{link_id}"): {"name": "Taken over"},
}


async def _owner_ids(harness: PlatformHarness) -> tuple[str, dict[str, str]]:
    """A merchant with one object of every kind; its key and the ids by path parameter."""
    deployment = await asyncio.to_thread(harness.deploy)
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    auth = X402Auth(deployment.agent)
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver", auth=auth) as seller:
        assert (await seller.get("/weather")).status_code == 200
    headers = {"Authorization": f"Bearer {deployment.api_key}"}
    async with httpx.AsyncClient(base_url=harness.url, headers=headers, timeout=60) as api:
        offered = await api.patch(f"/agent/endpoints/{deployment.endpoint_id}", json={"channel": {}})
        assert offered.status_code == 200, offered.text
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as seller:
        channel = "0x" + (await open_channel(harness, seller, deployment.agent_key, "/work")).channel.hex()
    async with httpx.AsyncClient(base_url=harness.url, headers=headers, timeout=60) as api:
        agent_payment = (await api.get("/agent/payments")).json()["data"][0]
        order = (
            await api.post("/payment-intents", json={"orderId": "isolated", "amount": "2", "currency": "USDC"})
        ).json()["paymentIntent"]
        paid = await api.post(f"/sandbox/payment-intents/{order['id']}/simulate-payment", json={})
        assert paid.status_code == 200, paid.text
        refund = (await api.post(f"/payment-intents/{order['id']}/refunds", json={})).json()["refund"]
        hook = (
            await api.post("/webhook-endpoints", json={"url": "https://example.com/hook", "enabledEvents": ["*"]})
        ).json()
        event = (await api.get("/events")).json()["data"][0]
        plan = (
            await api.post(
                "/subscription-plans", json={"name": "Pro", "amount": "1", "currency": "USDC", "interval": "weekly"}
            )
        ).json()["plan"]
        clock = (await api.post("/test-clocks", json={"frozenTime": "2026-01-31T00:00:00Z"})).json()["testClock"]
        opened = await api.post(
            "/subscriptions", json={"planId": plan["id"], "merchantCustomerId": "isolated", "testClock": clock["id"]}
        )
        subscription = opened.json()["subscription"]
        link = (await api.post("/payment-links", json={"name": "Ticket", "amount": "1", "currency": "USDC"})).json()
    ids = {
        "endpoint_id": deployment.endpoint_id,
        "challenge_id": agent_payment["challengeId"],
        "agent_payment_id": agent_payment["id"],
        "payment_id": order["id"],
        "refund_id": refund["id"],
        "webhook_endpoint_id": hook["webhookEndpoint"]["id"],
        "event_id": event["id"],
        "plan_id": plan["id"],
        "test_clock_id": clock["id"],
        "subscription_id": subscription["id"],
        "link_id": link["paymentLink"]["id"],
        "channel_id": channel,
    }
    return deployment.api_key, ids


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _url(harness: PlatformHarness, path: str, ids: dict[str, str]) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "payment_id" and path.startswith(("/v1/agent/payments/", "/v1/agent/settlements/")):
            name = "agent_payment_id"
        return ids[name]

    origin = harness.url.removesuffix("/v1")
    return origin + re.sub(r"\{(\w+)\}", fill, path)


# A report's name is no object of a merchant's: each key reads its own figures (tests/integration/test_reports.py).
_NAMES_NOT_IDS = {"/v1/reports/{name}"}


async def test_every_operation_answers_another_merchants_ids_with_404(dev_platform: PlatformHarness) -> None:
    owner_key, ids = await _owner_ids(dev_platform)
    _, intruder_key, _ = await asyncio.to_thread(dev_platform.merchant, "Intruder")
    operations = [  # the public checkout API takes no key: there, knowing an order's id is what lets a buyer in
        (method, path)
        for path, methods in build_document()["paths"].items()
        if "{" in path and path not in _NAMES_NOT_IDS
        for method, operation in methods.items()
        if operation["security"]
    ]
    assert len(operations) >= 16
    checked = []
    async with httpx.AsyncClient(timeout=60) as client:
        for method, path in operations:
            url = _url(dev_platform, path, ids)
            body: Any = _BODIES.get((method, path), {} if method in ("post", "patch") else None)
            taken = await client.request(method.upper(), url, json=body, headers=_auth(intruder_key))
            assert taken.status_code == 404, f"{method.upper()} {path}: {taken.text}"
            assert taken.json()["error"]["code"] == "resource_missing", taken.text
            checked.append(path)
            if method != "delete":  # the ids are real: their owner is not told 404
                own = await client.request(method.upper(), url, json=body, headers=_auth(owner_key))
                assert own.status_code != 404, f"the owner's {method.upper()} {path}: {own.text}"
    assert len(checked) == len(operations)
    async with httpx.AsyncClient(timeout=60) as client:  # leave no endpoint with deliveries due
        url = _url(dev_platform, "/v1/webhook-endpoints/{webhook_endpoint_id}", ids)
        assert (await client.delete(url, headers=_auth(owner_key))).status_code == 200
