"""The platform's ASGI app.

::

    from x402mw.platform.app import create_app
    app = create_app()                      # PlatformSettings.from_env()
    # or: uvicorn --factory x402mw.platform.app:create_app
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from sqlalchemy import text
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.routing import Mount, Route

from x402mw._version import __version__
from x402mw.platform import checkout, dashboard
from x402mw.platform.api import (
    balances,
    clocks,
    discovery,
    events,
    facilitator,
    payment_intents,
    payment_links,
    refunds,
    sandbox,
    subscription_plans,
    subscriptions,
    webhook_endpoints,
)
from x402mw.platform.api.agents import challenges as agent_challenges
from x402mw.platform.api.agents import endpoints as agent_endpoints
from x402mw.platform.api.agents import settlements as agent_settlements
from x402mw.platform.api.agents import sign_ins as agent_sign_ins
from x402mw.platform.api.idempotency import IdempotencyMiddleware
from x402mw.platform.api.request_log import RequestLogMiddleware
from x402mw.platform.background import start_platform
from x402mw.platform.checkout.rate_limits import CheckoutRateLimits, RateLimitMiddleware
from x402mw.platform.clock import Clock
from x402mw.platform.http.errors import RequestIdMiddleware, exception_handlers, outage_error
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.state import platform_of
from x402mw.platform.metrics import MetricsMiddleware
from x402mw.platform.objects.service import HealthStatus, Reachable, Readiness
from x402mw.platform.openapi import document as openapi
from x402mw.platform.runtime import Platform, settle_heap
from x402mw.platform.settings import PlatformSettings

__all__ = ["create_app"]

READINESS_TIMEOUT = 3.0


async def health(request: Request) -> ModelResponse:
    platform = platform_of(request)
    return ModelResponse(
        HealthStatus(
            version=__version__,
            receipt_signer=platform.receipt_address,
            networks=[c.network.caip2 for c in platform.chains],
        )
    )


async def ready(request: Request) -> ModelResponse:
    """Readiness: 200 when the database answers and every chain's node can be reached, else 503."""
    platform = platform_of(request)
    database: Reachable
    try:
        async with asyncio.timeout(READINESS_TIMEOUT), platform.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        database = "ok"
    except Exception as exc:
        if outage_error(exc) is None and not isinstance(exc, TimeoutError):
            raise
        database = "unavailable"
    chains: dict[str, Reachable] = {
        c.network.caip2: "ok" if c.relayer.available else "unavailable" for c in platform.chains
    }
    ok = database == "ok" and all(state == "ok" for state in chains.values())
    body = Readiness(status="ready" if ok else "not_ready", database=database, chains=chains)
    return ModelResponse(body, status_code=200 if ok else 503, headers=None if ok else {"Retry-After": "2"})


def create_app(
    settings: PlatformSettings | None = None,
    *,
    platform: Platform | None = None,
    clock: Clock | None = None,
    serving_process: bool = False,
    checkout_limits: CheckoutRateLimits | None = None,
    middleware: Sequence[Middleware] = (),
) -> Starlette:
    """Build the app. With ``platform`` given, the caller owns its lifetime; otherwise the app starts
    one from ``settings`` (default: `PlatformSettings.from_env`) and stops it on shutdown.

    ``serving_process``: the app is what this process is for (``x402mw platform serve``), so once
    started it may tune the process's garbage collector (`settle_heap`).

    ``checkout_limits``: the public checkout endpoints' rate limits (default: `CheckoutRateLimits`,
    counted in Redis when the settings name ``redis_url``, else in this app's memory).

    ``middleware``: more ASGI middleware, outside the platform's own (they see every request and
    every answer as the client does; the test suite checks the answers against the OpenAPI
    document with one)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if platform is not None:
            app.state.platform = platform
            yield
            return
        started = await start_platform(settings or PlatformSettings.from_env(), clock=clock)
        app.state.platform = started
        if serving_process:
            settle_heap()
        try:
            yield
        finally:
            await started.aclose()

    v1 = [
        *agent_endpoints.routes,
        *agent_challenges.routes,
        *agent_settlements.routes,
        *agent_sign_ins.routes,
        *facilitator.routes,
        *discovery.routes,
        *payment_intents.routes,
        *payment_links.routes,
        *refunds.routes,
        *balances.routes,
        *sandbox.routes,
        *subscription_plans.routes,
        *subscriptions.routes,
        *clocks.routes,
        *webhook_endpoints.routes,
        *events.routes,
        Route("/health", health),
        *openapi.routes,
    ]
    app = Starlette(
        routes=[
            Mount(
                "/v1",
                routes=v1,
                middleware=[
                    Middleware(RequestLogMiddleware),
                    Middleware(IdempotencyMiddleware, takes_over={"/payment-intents"}),
                ],
            ),
            Mount("/merchant/v1", routes=agent_challenges.legacy_routes),
            Mount("/checkout", routes=checkout.routes),
            Mount("/dashboard", routes=dashboard.routes),
            *checkout.agent_routes,
            Route("/healthz", health),
            Route("/readyz", ready),
        ],
        middleware=[
            *middleware,
            Middleware(MetricsMiddleware),
            Middleware(RequestIdMiddleware),
            Middleware(RateLimitMiddleware, limits=checkout_limits),
        ],
        exception_handlers=exception_handlers,
        lifespan=lifespan,
    )
    if platform is not None:
        app.state.platform = platform
    return app
