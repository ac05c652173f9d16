"""The platform's ASGI app.

::

    from x402mw.platform.app import create_app
    app = create_app()                      # PlatformSettings.from_env()
    # or: uvicorn --factory x402mw.platform.app:create_app
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware

from x402mw import tracing
from x402mw.platform.background import start_platform
from x402mw.platform.checkout.rate_limits import CheckoutRateLimits, RateLimitMiddleware
from x402mw.platform.clock import Clock
from x402mw.platform.http.errors import RequestIdMiddleware, exception_handlers
from x402mw.platform.http.traces import TracingMiddleware
from x402mw.platform.metrics import MetricsMiddleware
from x402mw.platform.openapi.document import document_routes
from x402mw.platform.routes import platform_routes
from x402mw.platform.runtime import Platform, settle_heap
from x402mw.platform.settings import PlatformSettings

__all__ = ["create_app"]


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

    app = Starlette(
        routes=platform_routes(*document_routes()),
        middleware=[
            *middleware,
            *([Middleware(TracingMiddleware)] if tracing.enabled else []),
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
