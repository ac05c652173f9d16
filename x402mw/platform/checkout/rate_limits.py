"""Rate limits of the public checkout endpoints, which anyone can call without an API key.

Counted per client address and per payment intent, with the ``limits`` library's moving windows:
in this process's memory by default, or in Redis when ``X402MW_REDIS_URL`` is set, so that a limit
holds across every ``serve`` process sharing the load. A request over a budget is answered 429 in
the error envelope (type ``rate_limit_error``, code ``rate_limited``) with ``Retry-After`` seconds.

What is counted (`CheckoutRateLimits` holds the budgets; the defaults are documented in
docs/checkout.md):

- ``/checkout/v1/…`` (the public API) and ``{api_host}/x402/pay/…``: each request against its client
  address and, when it names a payment intent, against that order;
- opening a payment link (its page ``/checkout/pl_…``, ``/checkout/paylink/<slug>``, and
  ``POST /checkout/v1/payment-links/:id/payment-intents``), each of which may make a new order:
  against its client address, on a budget of its own;
- posting a plan's subscribe form (``POST /checkout/su_…``), which may open a subscription, make its
  first order and send an email: against its client address, on a budget of its own;
- the public discovery catalogue (``{base_url}/x402/discovery/…``): against its client address, on a
  budget of its own.

The hosted pages themselves (``/checkout/pi_…``, a subscribe page's ``GET``) are not counted: they only
read, and the payment page's polling of ``transfer-status`` (every 3 seconds) stays far below the
per-order budget. Should the counter
store fail (Redis down), requests are let through and the failure logged: the limits protect the
platform, they must not take checkout down. The connections to Redis are closed as the app's
lifespan ends.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from limits import RateLimitItem, parse
from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import MovingWindowRateLimiter

from x402mw.platform.checkout.orders import parse_payment_id
from x402mw.platform.http.errors import HttpError, error_response
from x402mw.platform.http.state import scope_platform

logger = logging.getLogger("x402mw.platform.checkout")

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]]], Awaitable[None]]

_ORDER_PATH = re.compile(r"^/(?:checkout/v1/payment-intents|x402/pay)/([^/]+)")
_LINK_OPENING = re.compile(r"^/checkout/(?:pl_[^/]*|paylink/[^/]+|v1/payment-links/[^/]+/payment-intents)$")
_PAYLINK_ORDER = re.compile(r"^/checkout/paylink/([^/]+)$")
_SUBSCRIBE = re.compile(r"^/checkout/su_[^/]*$")
_DISCOVERY = re.compile(r"^(?:/v1)?/x402/discovery/")


@dataclass(frozen=True, slots=True)
class CheckoutRateLimits:
    """The budgets, in the ``limits`` notation (``"300/minute"``), and where they are counted:
    ``redis_url`` (``redis://host:port/db``) shares them between processes; None counts in memory
    (or in the platform's ``redis_url`` setting, when the middleware is not given one)."""

    per_address: str = "600/minute"
    per_order: str = "300/minute"
    link_openings: str = "60/hour"
    subscribe_posts: str = "30/hour"
    discovery: str = "120/minute"
    redis_url: str | None = None
    key_prefix: str = "x402mw"


class RateLimitMiddleware:
    """Pure ASGI: counts the public checkout requests (see the module) and answers 429 past a budget."""

    def __init__(self, app: ASGIApp, *, limits: CheckoutRateLimits | None = None) -> None:
        self.app = app
        self.limits = limits
        self._limiter: MovingWindowRateLimiter | None = None
        self._redis: Any = None  # the Redis connection pool, when the limits are counted there
        self._items: dict[str, RateLimitItem] = {}
        self._failing_since = 0.0

    async def __call__(self, scope: Scope, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] == "lifespan":
            try:
                await self.app(scope, receive, send)
            finally:
                await self.aclose()
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        counted = self._counted(scope)
        if counted:
            refused = await self._over(scope, counted)
            if refused is not None:
                await error_response(refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _counted(self, scope: Scope) -> list[tuple[str, str]]:
        """The budgets this request counts against: (budget, identifier)."""
        path: str = scope["path"]
        discovery = _DISCOVERY.match(path) is not None
        if not discovery and not path.startswith(("/checkout/", "/x402/pay/")):
            return []
        client = scope.get("client")
        address = str(client[0]) if client else "unknown"
        if discovery:
            return [("discovery", address)]
        if _SUBSCRIBE.match(path):
            return [("per_address", address), ("subscribe_posts", address)] if scope["method"] == "POST" else []
        if _LINK_OPENING.match(path):
            paylink = _PAYLINK_ORDER.match(path)
            if paylink is None or parse_payment_id(paylink.group(1)) is None:  # not an order's old link
                return [("per_address", address), ("link_openings", address)]
            return []
        if not path.startswith(("/checkout/v1/", "/x402/pay/")):
            return []  # the hosted pages and their static files
        counted = [("per_address", address)]
        found = _ORDER_PATH.match(path)
        if found is not None:
            order = parse_payment_id(found.group(1))
            if order is not None:
                counted.append(("per_order", order))
        return counted

    def _setup(self, scope: Scope) -> MovingWindowRateLimiter:
        if self._limiter is None:
            limits = self.limits
            if limits is None:
                shared = scope_platform(scope).settings.redis_url
                limits = CheckoutRateLimits(redis_url=shared.get_secret_value() if shared is not None else None)
            self.limits = limits
            storage: Storage
            if limits.redis_url:
                from redis.asyncio import ConnectionPool

                # A pool of ours: the storage has no way to close its connections, the pool has.
                self._redis = ConnectionPool.from_url(limits.redis_url.removeprefix("async+"))
                url = "async+" + limits.redis_url.removeprefix("async+")
                storage = RedisStorage(
                    url, implementation="redispy", key_prefix=limits.key_prefix, connection_pool=self._redis
                )
            else:
                storage = MemoryStorage()
            budgets = ("per_address", "per_order", "link_openings", "subscribe_posts", "discovery")
            self._items = {name: parse(getattr(limits, name)) for name in budgets}
            self._limiter = MovingWindowRateLimiter(storage)
        return self._limiter

    async def aclose(self) -> None:
        """Close the connections to Redis (a later request opens new ones)."""
        pool, self._redis = self._redis, None
        self._limiter = None
        if pool is not None:
            await pool.aclose()

    async def _over(self, scope: Scope, counted: list[tuple[str, str]]) -> HttpError | None:
        limiter = self._setup(scope)
        try:
            # One budget after the other: gathering them was measured slower (tasks cost more than the
            # round trip they overlap: 13 against 90 µs a request in memory, 153 against 369 in Redis).
            for budget, identifier in counted:
                item = self._items[budget]
                if not await limiter.hit(item, budget, identifier):
                    stats = await limiter.get_window_stats(item, budget, identifier)
                    wait = max(1, math.ceil(stats.reset_time - time.time()))
                    what = {
                        "per_address": "from this address",
                        "per_order": "for this payment",
                        "subscribe_posts": "subscribing from this address",
                        "discovery": "to the discovery catalogue from this address",
                    }.get(budget, "opening payment links from this address")
                    return HttpError(
                        429,
                        "rate_limited",
                        f"Too many requests {what} (at most {item.amount} per {_period(item)}); retry in {wait} s",
                        headers={"Retry-After": str(wait)},
                    )
        except Exception:
            now = time.monotonic()
            if now - self._failing_since > 60:  # once a minute, not once a request
                logger.warning("checkout rate limits cannot be counted; letting requests through", exc_info=True)
                self._failing_since = now
        return None


def _period(item: RateLimitItem) -> str:
    unit = item.GRANULARITY.name
    return unit if item.multiples == 1 else f"{item.multiples} {unit}s"
