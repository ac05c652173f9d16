"""The API request log keeps the merchant's own requests, not the seller middleware's upkeep (its
terms revalidations, every second per endpoint, and its challenge registrations): issue 36."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import select

from tests.harness import PlatformHarness
from tests.waiting import eventually_async
from x402mw.platform.db import tables
from x402mw.platform.metrics import HTTP_REQUESTS, REQUEST_LOG_SKIPPED
from x402mw.seller import PaidRoute
from x402mw.seller.drivers import AsyncSeller
from x402mw.seller.gate import TERMS_REFRESH_SECONDS, PaymentGate, RequestView

pytestmark = pytest.mark.anyio


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _logged(harness: PlatformHarness, merchant_id: str) -> list[tuple[str, str, int]]:
    t = tables.api_requests

    async def read(p: Any) -> list[tuple[str, str, int]]:
        async with p.engine.connect() as conn:
            query = select(t.c.method, t.c.path, t.c.status).where(t.c.merchant_id == merchant_id)
            return [(r.method, r.path, r.status) for r in await conn.execute(query)]

    return harness.server.call(read)


def _count(counter: Any, *labels: str) -> float:
    return float(counter.labels(*labels)._value.get())


async def test_the_sellers_upkeep_is_counted_not_logged(dev_platform: PlatformHarness) -> None:
    deployment = await anyio.to_thread.run_sync(lambda: dev_platform.deploy(fund=""))
    endpoint_path = f"/v1/agent/endpoints/{deployment.endpoint_id}"
    revalidated = _count(HTTP_REQUESTS, "GET", "/v1/agent/endpoints/{endpoint_id}", "304")
    skipped = {k: _count(REQUEST_LOG_SKIPPED, k) for k in ("terms_revalidation", "challenge_registration")}
    clock = _Clock()
    seller = AsyncSeller(PaymentGate(api_key=deployment.api_key, platform_url=dev_platform.url, clock=clock))
    route, view = PaidRoute(deployment.endpoint_id), RequestView("GET", "http://testserver/weather", None)
    try:
        for _ in range(3):  # a 402 (terms fetched once, a challenge issued); its registration; a revalidation
            await seller.run(seller.gate.process(route, view))
            await seller.flush()
            clock.now += TERMS_REFRESH_SECONDS
            await seller.flush()
    finally:
        await seller.aclose()
    headers = {"Authorization": f"Bearer {deployment.api_key}"}
    async with httpx.AsyncClient(base_url=dev_platform.url.removesuffix("/v1"), headers=headers) as api:
        own = await api.get(endpoint_path)  # the merchant's own read of the endpoint: logged
        balances = await api.get("/v1/balances")
    assert own.status_code == 200 and balances.status_code == 200

    logged = await eventually_async(
        lambda: anyio.to_thread.run_sync(_logged, dev_platform, deployment.merchant_id),
        until=lambda rows: ("GET", "/v1/balances", 200) in rows,
        what="the merchant's own requests in the log",
    )
    assert ("GET", endpoint_path, 200) in logged
    assert logged.count(("GET", endpoint_path, 200)) == 1  # the seller's first fetch was 200 too, not logged
    assert not [r for r in logged if r[2] == 304 or r[1].endswith("/agent/challenges/batch")], logged
    assert sorted(r for r in logged if r[1].startswith("/v1/agent/")) == [
        ("GET", endpoint_path, 200),
        ("POST", "/v1/agent/endpoints", 201),  # the merchant made the endpoint (deploy)
    ]
    assert _count(HTTP_REQUESTS, "GET", "/v1/agent/endpoints/{endpoint_id}", "304") >= revalidated + 3
    assert _count(REQUEST_LOG_SKIPPED, "terms_revalidation") >= skipped["terms_revalidation"] + 4  # 1 fetch, 3 x 304
    assert _count(REQUEST_LOG_SKIPPED, "challenge_registration") >= skipped["challenge_registration"] + 3
