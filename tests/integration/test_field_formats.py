"""The OpenAPI document's formats hold on the real platform: a resource URL is a URI (RFC 3986:
ASCII, a host, percent-encoding) or an MCP tool's ``mcp://tool/<name>``, and a name holds no control
character, for create and update alike; and the public ``sync`` of a checkout answers at once for a
transaction hash the chain does not know, rather than waiting for it."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

from tests.harness import PlatformHarness

BAD_URLS = [
    "hTtP://~y@\u00a4\u00eaw\u2026",  # what schemathesis sent: not ASCII
    "http://shop.example/caf\u00e9",
    "http://shop.example/a b",
    "http://shop.example/%zz",
    "http://",
    "mcp://tool/",
]
BAD_NAMES = ["two\nlines", "tab\there", "bell\x07", "c1\x85", "del\x7f"]


def _api(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _refused(reply: httpx.Response, param: str) -> None:
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "parameter_invalid" and error["param"] == param, error


def test_agent_endpoints_refuse_a_resource_url_that_is_no_uri_and_names_with_control_characters(
    dev_platform: PlatformHarness,
) -> None:
    deployment = dev_platform.deploy(fund="")
    path = f"/agent/endpoints/{deployment.endpoint_id}"
    body = {
        "name": "Weather",
        "resourceUrl": "http://testserver/weather",
        "chainId": dev_platform.chain.chain_id,
        "currency": "USDC",
        "payoutAddress": deployment.payout,
        "amountMinor": "10000",
    }
    with deployment.api() as api:
        for url in BAD_URLS:
            _refused(api.patch(path, json={"resourceUrl": url}), "resourceUrl")
            _refused(api.post("/agent/endpoints", json=body | {"resourceUrl": url}), "resourceUrl")
        for name in BAD_NAMES:
            _refused(api.patch(path, json={"name": name}), "name")
            _refused(api.post("/agent/endpoints", json=body | {"name": name}), "name")
        assert api.get(path).json()["endpoint"]["resourceUrl"] == "http://testserver/weather"  # unchanged
        good = "https://xn--caf-dma.example/b%C3%BCcher?q=1&r=%20#top"
        changed = api.patch(path, json={"resourceUrl": good, "name": "Café — météo"})
        assert changed.status_code == 200, changed.text
        assert (changed.json()["endpoint"]["resourceUrl"], changed.json()["endpoint"]["name"]) == (good, "Café — météo")


def test_every_name_of_the_api_refuses_control_characters(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        link = {"name": "Mug", "amount": "7", "currency": "USDC"}
        plan = {"name": "Monthly", "amount": "5", "currency": "USDC", "interval": "monthly"}
        order = {"orderId": f"o-{uuid.uuid4()}", "amount": "1", "currency": "USDC"}
        for name in BAD_NAMES:
            _refused(api.post("/payment-links", json=link | {"name": name}), "name")
            _refused(api.post("/subscription-plans", json=plan | {"name": name}), "name")
            _refused(api.post("/payment-intents", json=order | {"customerName": name}), "customerName")
            reply = api.post("/payment-intents", json=order | {"customer": {"name": name}})
            _refused(reply, "customer.name")


def test_sync_answers_at_once_for_a_transaction_the_chain_does_not_know(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        reply = api.post("/payment-intents", json={"orderId": f"o-{uuid.uuid4()}", "amount": "1", "currency": "USDC"})
        assert reply.status_code == 201, reply.text
        order: dict[str, Any] = reply.json()["paymentIntent"]
    checkout = dev_platform.url.removesuffix("/v1") + "/checkout/v1"
    with httpx.Client(base_url=checkout, timeout=60) as public:
        for tx_hash in ("0x" + "00" * 32, "0x" + "ab" * 32):
            started = time.monotonic()
            answer = public.post(
                f"/payment-intents/{order['id']}/sync", json={"txHash": tx_hash, "network": dev_platform.network}
            )
            took = time.monotonic() - started
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == order["status"]  # nothing paid: the order as it stands
            # (it waited the whole 10 s for a receipt that never comes; a bound with a wide margin)
            assert took < 3.0, took
