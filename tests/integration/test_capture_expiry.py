"""A held payment whose authorization ran out is captured as ``failed`` with the documented reason
(``..._valid_before`` for a paid tool's exact hold, ``permit2_deadline_expired`` for a metered
request's upto hold), on SQLite and PostgreSQL alike, whether the capture comes before the worker
swept the hold or after, and however often it is sent."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from tests.harness import PlatformHarness
from tests.metered_fixtures import approve_permit2, metered_deployment
from x402mw.platform.db import tables
from x402mw.protocol import decode_payment_required
from x402mw.protocol.codec import encode_header
from x402mw.seller import Held, PaidRoute, PaymentGate, RequestView, ServeMetered, run_async

pytestmark = [
    pytest.mark.both_databases,
    pytest.mark.anyio,
]  # a capture racing the worker's sweep of the hold: each database's locking

EXACT_EXPIRED = "invalid_exact_evm_payload_authorization_valid_before"
UPTO_EXPIRED = "permit2_deadline_expired"


def _expire(harness: PlatformHarness, payment_ids: list[str]) -> int:
    """Date the held payments' authorization a second ago, as if their time had passed (the chain
    and the signature are not consulted for a hold that is not sent); the time they expired at."""

    async def write(platform: Any) -> int:
        now = int(platform.clock.time())
        table = tables.agent_payments
        async with platform.engine.begin() as conn:
            await conn.execute(update(table).where(table.c.id.in_(payment_ids)).values(valid_before=now - 1))
        return now

    return int(harness.server.call(write))


async def _captures(http: httpx.AsyncClient, payment_id: str, body: dict[str, Any]) -> list[tuple[int, str, str]]:
    """Capture twice; each answer's status code, ``status`` and ``errorReason``."""
    found = []
    for _ in range(2):
        reply = await http.post(f"/agent/settlements/{payment_id}/capture", json=body)
        data = reply.json() if reply.status_code == 200 else {"status": reply.text, "settlement": {}}
        found.append((reply.status_code, data["status"], data["settlement"].get("errorReason")))
    return found


async def _statuses(http: httpx.AsyncClient) -> dict[str, tuple[str, str | None]]:
    return {p["id"]: (p["status"], p["errorReason"]) for p in (await http.get("/agent/payments")).json()["data"]}


async def test_an_expired_exact_hold_is_captured_as_failed_before_and_after_the_sweep(
    dev_platform: PlatformHarness,
) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, resource_url="mcp://tool/forecast")
    gate = PaymentGate(api_key=deployment.api_key, platform_url=dev_platform.url)
    route, url = PaidRoute(deployment.endpoint_id), "mcp://tool/forecast"
    headers = {"Authorization": f"Bearer {deployment.api_key}"}
    writes = dev_platform.platform.settlement.writes
    async with httpx.AsyncClient(base_url=dev_platform.url, headers=headers, timeout=60) as http:
        held = []
        for _ in range(2):
            answer = await run_async(gate.hold(route, RequestView("TOOL", url, None)), http)
            offer = decode_payment_required(dict(answer.headers)["PAYMENT-REQUIRED"])
            payload = deployment.agent.sign_payment(offer.accepts[0], resource=offer.resource).to_wire()
            hold = await run_async(gate.hold(route, RequestView("TOOL", url, payload)), http)
            assert isinstance(hold, Held)
            held.append(hold.payment_id)
        now = await asyncio.to_thread(_expire, dev_platform, held)
        # the first captured before the worker's sweep, the second after it
        before = await _captures(http, held[0], {})
        assert before == [(200, "failed", EXACT_EXPIRED)] * 2
        assert await asyncio.to_thread(dev_platform.server.call, lambda p: writes.expire_holds(now)) == 1
        after = await _captures(http, held[1], {})
        statuses = await _statuses(http)
    assert before == after == [(200, "failed", EXACT_EXPIRED)] * 2
    assert statuses == {payment_id: ("failed", EXACT_EXPIRED) for payment_id in held}
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 0


async def test_an_upto_capture_after_the_permits_deadline_is_failed_before_and_after_the_sweep(
    dev_platform: PlatformHarness,
) -> None:
    deployment = await asyncio.to_thread(metered_deployment, dev_platform, ceiling=30_000)
    await asyncio.to_thread(approve_permit2, dev_platform, deployment.agent_key)
    gate = PaymentGate(api_key=deployment.api_key, platform_url=dev_platform.url)
    route, url = PaidRoute(deployment.endpoint_id), "http://testserver/generate"
    recovery = dev_platform.platform.settlement.recovery
    headers = {"Authorization": f"Bearer {deployment.api_key}"}
    async with httpx.AsyncClient(base_url=dev_platform.url, headers=headers, timeout=60) as http:
        held = []
        for _ in range(2):
            unpaid = await run_async(gate.process(route, RequestView("GET", url, None)), http)
            offer = decode_payment_required(dict(unpaid.headers)["PAYMENT-REQUIRED"])
            payload = deployment.agent.sign_upto(offer.accepts[0], resource=offer.resource)
            metered = await run_async(gate.process(route, RequestView("GET", url, encode_header(payload))), http)
            assert isinstance(metered, ServeMetered) and metered.payment.payment_id
            held.append(metered.payment.payment_id)
        now = await asyncio.to_thread(_expire, dev_platform, held)
        before = await _captures(http, held[0], {"amountMinor": "1234"})
        assert before == [(200, "failed", UPTO_EXPIRED)] * 2
        swept = await asyncio.to_thread(dev_platform.server.call, lambda p: recovery.close_lapsed_holds(now))
        after = await _captures(http, held[1], {"amountMinor": "1234"})
        statuses = await _statuses(http)
    assert swept == 1
    assert before == after == [(200, "failed", UPTO_EXPIRED)] * 2
    assert statuses == {payment_id: ("failed", UPTO_EXPIRED) for payment_id in held}
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 0
