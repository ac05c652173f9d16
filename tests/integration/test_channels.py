"""Payment channels (``batch-settlement``) end to end on the platform: an endpoint offers them beside
``exact``; the x402 Foundation SDK's agent deposits once and pays many requests with vouchers; the
worker claims them in one transaction and settles the exact sum to the payout address."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
import pytest

from tests.channel_sellers import channel_app, channel_deployment, sdk_channel_agent
from tests.harness import PlatformHarness
from tests.sellers import asgi_transport, lifespan

pytestmark = pytest.mark.anyio


def _decoded(response: httpx.Response, header: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(base64.b64decode(response.headers[header]))
    return found


async def test_an_sdk_agent_pays_many_requests_then_one_claim_and_one_settle(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    deployment = await asyncio.to_thread(channel_deployment, harness, price=1_000)
    app = channel_app(deployment.api_key, harness.url, deployment.endpoint_id)
    plain = httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver")
    agent, _scheme = sdk_channel_agent(harness, deployment.agent_key, asgi_transport(app))
    async with lifespan(app), plain, agent:
        unpaid = await plain.get("/work")
        answers = [await agent.get("/work") for _ in range(12)]

    assert unpaid.status_code == 402
    schemes = [offer["scheme"] for offer in _decoded(unpaid, "PAYMENT-REQUIRED")["accepts"]]
    assert schemes == ["exact", "batch-settlement"]
    for response in answers:
        assert response.status_code == 200, response.text
    first, last = _decoded(answers[0], "PAYMENT-RESPONSE"), _decoded(answers[-1], "PAYMENT-RESPONSE")
    assert first["transaction"]  # the deposit
    assert last["transaction"] == "" and last["extra"]["chargedAmount"] == "1000"
    assert last["extra"]["channelState"]["chargedCumulativeAmount"] == "12000"

    worker = harness.platform.channel_worker
    before = await asyncio.to_thread(harness.balance, deployment.payout)
    claims = harness.server.call(lambda _p: worker.claim(everything=True))
    settles = harness.server.call(lambda _p: worker.settle())
    assert len(claims) == 1 and len(settles) == 1
    assert await asyncio.to_thread(harness.balance, deployment.payout) == before + 12_000
