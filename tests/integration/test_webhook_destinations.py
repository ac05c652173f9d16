"""Live webhooks go to public https URLs only (no SSRF into the platform's own network); test mode
allows any http(s) URL so integrations can be tried on localhost."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import update

from tests.harness import PlatformHarness
from tests.integration.test_webhook_delivery import Receiver
from x402mw.platform.db import tables
from x402mw.platform.services.merchants import create_api_key
from x402mw.platform.services.outbox import record_event
from x402mw.platform.webhooks.delivery import deliver_due
from x402mw.platform.webhooks.destinations import blocked_reason


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/x",
        "https://127.0.0.1/x",
        "https://10.1.2.3/x",
        "https://192.168.0.10/x",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/x",
        "https://localhost:8443/x",
        "https://db.internal/x",
        "https://intranet/x",
    ],
)
def test_live_endpoints_refuse_private_destinations(dev_platform: PlatformHarness, url: str) -> None:
    merchant_id, test_key, _ = dev_platform.merchant()
    _, live_key = dev_platform.server.call(lambda p: create_api_key(p.engine, merchant_id, livemode=True))
    headers = {"Authorization": f"Bearer {live_key}"}
    with httpx.Client(base_url=dev_platform.url, headers=headers, timeout=30) as live:
        refused = live.post("/webhook-endpoints", json={"url": url, "enabledEvents": ["*"]})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "url_not_allowed" and refused.json()["error"]["param"] == "url"
        created = live.post("/webhook-endpoints", json={"url": "https://hooks.example.com/x", "enabledEvents": ["*"]})
        assert created.status_code == 201, created.text
        moved = live.patch(f"/webhook-endpoints/{created.json()['webhookEndpoint']['id']}", json={"url": url})
        assert moved.status_code == 400 and moved.json()["error"]["code"] == "url_not_allowed"
    if url.startswith("https://"):  # test mode takes any http(s) URL
        test_headers = {"Authorization": f"Bearer {test_key}"}
        reply = httpx.post(
            dev_platform.url + "/webhook-endpoints",
            json={"url": url, "enabledEvents": ["*"]},
            headers=test_headers,
            timeout=30,
        )
        assert reply.status_code == 201, reply.text


def test_public_destinations_are_allowed() -> None:
    assert blocked_reason("https://hooks.example.com/x", livemode=True) is None
    assert blocked_reason("https://8.8.8.8/x", livemode=True) is None
    assert blocked_reason("http://127.0.0.1:9/x", livemode=False) is None


def test_delivery_checks_the_destination_again(dev_platform: PlatformHarness) -> None:
    """An endpoint whose URL came to point inside (stored before the rule, or re-pointed) gets nothing."""
    receiver = Receiver().start()
    try:
        merchant_id, _, _ = dev_platform.merchant()
        _, live_key = dev_platform.server.call(lambda p: create_api_key(p.engine, merchant_id, livemode=True))
        headers = {"Authorization": f"Bearer {live_key}"}
        with httpx.Client(base_url=dev_platform.url, headers=headers, timeout=30) as live:
            created = live.post(
                "/webhook-endpoints", json={"url": "https://hooks.example.com/x", "enabledEvents": ["*"]}
            )
            endpoint_id = created.json()["webhookEndpoint"]["id"]

        async def repoint_and_emit(platform: object) -> str:
            engine = dev_platform.platform.engine
            async with engine.begin() as conn:
                endpoints = tables.webhook_endpoints
                await conn.execute(
                    update(endpoints).where(endpoints.c.id == endpoint_id).values(url=receiver.url("inside"))
                )
                return await record_event(
                    conn,
                    merchant_id=merchant_id,
                    livemode=True,
                    type="payment_intent.created",
                    data={"paymentIntent": {"id": str(uuid.uuid4())}},
                    at=datetime.now(UTC),
                )

        event_id = dev_platform.server.call(repoint_and_emit)
        later = datetime.now(UTC) + timedelta(seconds=1)
        dev_platform.server.call(lambda p: deliver_due(p, now=later))
        assert receiver.received == []
        with httpx.Client(base_url=dev_platform.url, headers=headers, timeout=30) as live:
            delivery = live.get(f"/events/{event_id}").json()["event"]["deliveries"][0]
        assert delivery["status"] == "pending"
        assert delivery["attempts"][-1]["error"].startswith("BlockedDestination: ")
        with httpx.Client(base_url=dev_platform.url, headers=headers, timeout=30) as live:
            assert live.delete(f"/webhook-endpoints/{endpoint_id}").status_code == 200
    finally:
        receiver.stop()
