"""Rate limits of the public checkout endpoints, on real app instances served by uvicorn over one
platform (SQLite): counted in each instance's memory by default, and across instances
through the Redis that runs at 127.0.0.1:6379 (each test counts under a key prefix of its own)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import uvicorn

from tests.harness import PlatformHarness
from tests.waiting import eventually_async
from x402mw.platform.app import create_app
from x402mw.platform.checkout.pages import POLL_SECONDS
from x402mw.platform.checkout.rate_limits import CheckoutRateLimits
from x402mw.platform.server import free_port

REDIS_URL = "redis://127.0.0.1:6379/0"


@contextlib.contextmanager
def _instance(harness: PlatformHarness, limits: CheckoutRateLimits | None) -> Iterator[str]:
    """Another app instance over the harness's platform (on its event loop), as another ``serve``
    process would be; yields its origin."""
    port = free_port()
    running: dict[str, Any] = {}

    async def start(platform: Any) -> None:
        app = create_app(platform=platform, checkout_limits=limits)
        # with its lifespan, whose end closes the rate limits' connections to Redis
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
        running["task"] = asyncio.get_running_loop().create_task(server.serve())
        running["server"] = server
        await eventually_async(lambda: server.started, what="the second app to serve", interval=0.01)

    async def stop(platform: Any) -> None:
        running["server"].should_exit = True
        await running["task"]

    harness.server.call(start)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        harness.server.call(stop)


def _order(harness: PlatformHarness) -> str:
    _, key, _ = harness.merchant()
    with httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        reply = api.post("/payment-intents", json={"orderId": str(uuid.uuid4()), "amount": "1", "currency": "USDC"})
    assert reply.status_code == 201, reply.text
    payment_id: str = reply.json()["paymentIntent"]["id"]
    return payment_id


def _read(origin: str, payment_id: str) -> httpx.Response:
    with httpx.Client(timeout=60) as client:
        return client.get(f"{origin}/checkout/v1/payment-intents/pi_{payment_id}")


def _limited(reply: httpx.Response) -> dict[str, Any]:
    assert reply.status_code == 429, reply.text
    assert 1 <= int(reply.headers["retry-after"]) <= 3600  # within the window (a minute or an hour here)
    error: dict[str, Any] = reply.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limited")
    assert error["requestId"] == reply.headers["request-id"]
    return error


def test_a_client_address_is_limited_and_each_instance_counts_alone_in_memory(dev_platform: PlatformHarness) -> None:
    order, other = _order(dev_platform), _order(dev_platform)
    limits = CheckoutRateLimits(per_address="4/minute", per_order="100/minute")
    with _instance(dev_platform, limits) as first, _instance(dev_platform, limits) as second:
        assert [_read(first, order).status_code for _ in range(4)] == [200] * 4
        assert "this address" in _limited(_read(first, other))["message"]
        assert _read(second, order).status_code == 200, "another process's memory knows nothing of it"


def test_a_limit_holds_across_instances_sharing_redis(dev_platform: PlatformHarness) -> None:
    order = _order(dev_platform)
    limits = CheckoutRateLimits(
        per_address="5/minute", per_order="100/minute", redis_url=REDIS_URL, key_prefix=f"test-{uuid.uuid4().hex}"
    )
    with _instance(dev_platform, limits) as first, _instance(dev_platform, limits) as second:
        answers = [_read(origin, order).status_code for origin in (first, second, first, second, first)]
        assert answers == [200] * 5
        _limited(_read(second, order))
        _limited(_read(first, order))


def test_an_order_is_limited_whoever_asks(dev_platform: PlatformHarness) -> None:
    order, other = _order(dev_platform), _order(dev_platform)
    limits = CheckoutRateLimits(
        per_address="100/minute", per_order="3/minute", redis_url=REDIS_URL, key_prefix=f"test-{uuid.uuid4().hex}"
    )
    with _instance(dev_platform, limits) as origin:
        with httpx.Client(timeout=60) as client:
            status = client.post(f"{origin}/checkout/v1/payment-intents/{order}/transfer-status")
            assert status.status_code == 200, status.text
            assert client.get(f"{origin}/x402/pay/pi_{order}").status_code == 402
        assert _read(origin, order).status_code == 200
        assert "this payment" in _limited(_read(origin, order))["message"]
        with httpx.Client(timeout=60) as client:
            _limited(client.get(f"{origin}/x402/pay/pi_{order}"))
        assert _read(origin, other).status_code == 200


def test_opening_payment_links_has_a_budget_of_its_own(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with httpx.Client(base_url=dev_platform.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        link = api.post("/payment-links", json={"name": "Poster", "amount": "3", "currency": "USDC"}).json()
    link_id = link["paymentLink"]["id"]
    limits = CheckoutRateLimits(per_address="100/minute", link_openings="2/hour")
    with _instance(dev_platform, limits) as origin, httpx.Client(timeout=60) as client:
        opened = [client.post(f"{origin}/checkout/v1/payment-links/{link_id}/payment-intents") for _ in range(2)]
        assert [reply.status_code for reply in opened] == [201, 201]
        assert "payment links" in _limited(client.get(f"{origin}/checkout/pl_{link_id}"))["message"]
        # the hosted page of an order is not counted; neither is an order's old /paylink/ address
        page = f"{origin}/checkout/pi_{opened[0].json()['id']}"
        assert [client.get(page).status_code for _ in range(3)] == [200] * 3
        assert client.get(f"{origin}/checkout/paylink/pi_{opened[0].json()['id']}").status_code == 200
    with _api_count(dev_platform, key) as count:
        assert count == 2, "nothing was made past the budget"


@contextlib.contextmanager
def _api_count(harness: PlatformHarness, key: str) -> Iterator[int]:
    with httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        yield len(api.get("/payment-intents", params={"limit": 100}).json()["data"])


def test_without_redis_the_limits_let_requests_through(dev_platform: PlatformHarness) -> None:
    order = _order(dev_platform)
    down = CheckoutRateLimits(per_address="1/minute", redis_url=f"redis://127.0.0.1:{free_port()}/0")
    with _instance(dev_platform, down) as origin:
        assert [_read(origin, order).status_code for _ in range(3)] == [200] * 3


def test_the_default_budgets_leave_the_pages_own_polling_alone(dev_platform: PlatformHarness) -> None:
    order = _order(dev_platform)
    defaults = CheckoutRateLimits()
    polls_a_minute = 60 // POLL_SECONDS
    with _instance(dev_platform, None) as origin, httpx.Client(timeout=60) as client:
        # a minute and a half of one page's polling, at once, plus a reload's reads
        for _ in range(polls_a_minute * 3 // 2):
            status = client.post(f"{origin}/checkout/v1/payment-intents/{order}/transfer-status")
            assert status.status_code == 200, status.text
        assert _read(origin, order).status_code == 200
    assert polls_a_minute * 3 < int(defaults.per_order.split("/")[0])


def test_the_discovery_catalogue_has_a_budget_of_its_own(dev_platform: PlatformHarness) -> None:
    limits = CheckoutRateLimits(per_address="100/minute", discovery="3/minute")
    with _instance(dev_platform, limits) as origin, httpx.Client(timeout=60) as client:
        listed = [client.get(f"{origin}/v1/x402/discovery/resources") for _ in range(2)]
        searched = client.get(f"{origin}/v1/x402/discovery/search", params={"query": "weather"})
        assert [reply.status_code for reply in [*listed, searched]] == [200, 200, 200]
        assert "discovery catalogue" in _limited(client.get(f"{origin}/v1/x402/discovery/resources"))["message"]
        assert client.get(f"{origin}/v1/x402/supported").status_code == 200  # the rest is not counted
