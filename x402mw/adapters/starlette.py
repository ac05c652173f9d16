"""Starlette and FastAPI: a pure ASGI middleware plus a route decorator.

::

    from x402mw.adapters.starlette import PaymentMiddleware, paid

    @paid("<endpoint id>")
    async def weather(request):
        settlement = request.state.x402          # transaction, payer, amount, receipt
        return JSONResponse({"forecast": "sunny"})

    app = Starlette(routes=[Route("/weather", weather)],
                    middleware=[Middleware(PaymentMiddleware, api_key="sk_test_...")])

In FastAPI put ``@paid(...)`` under ``@app.get(...)``; the function is returned unchanged, so
FastAPI's signature inspection is not disturbed. Routes can also be listed in ``routes=``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.routing import BaseRoute, Match, Mount

from x402mw.adapters.asgi import PaymentMiddleware as ASGIPaymentMiddleware
from x402mw.adapters.asgi import Receive, Scope
from x402mw.seller.config import AmountCallback, PaidRoute

__all__ = ["PaymentMiddleware", "paid"]

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__x402_route__"


def paid(
    endpoint: str,
    *,
    amount: AmountCallback | None = None,
    description: str | None = None,
    mime_type: str | None = None,
) -> Callable[[F], F]:
    """Mark a Starlette or FastAPI endpoint as sold per request through agent endpoint ``endpoint``.

    ``amount`` (sync or async) receives the `starlette.requests.Request` and returns the price for
    endpoints with dynamic pricing.
    """
    route = PaidRoute(endpoint=endpoint, amount=amount, description=description, mime_type=mime_type)

    def mark(func: F) -> F:
        setattr(func, _MARK, route)
        return func

    return mark


def _marked(routes: list[BaseRoute], scope: Scope) -> PaidRoute | None:
    for candidate in routes:
        match, child = candidate.matches(scope)
        if match is Match.NONE:
            continue
        if isinstance(candidate, Mount):
            inner = {**scope, **child}
            return _marked(list(candidate.routes), inner)
        mark = getattr(getattr(candidate, "endpoint", None), _MARK, None)
        return mark if isinstance(mark, PaidRoute) else None
    return None


class PaymentMiddleware(ASGIPaymentMiddleware):
    """`x402mw.adapters.asgi.PaymentMiddleware` that also honours `paid` marks on routes and gives
    amount callbacks a Starlette `Request`. The settlement is ``request.state.x402``."""

    _cache_size = 4096

    def resolve(self, scope: Scope) -> PaidRoute | None:
        found = super().resolve(scope)
        if found is not None:
            return found
        app = scope.get("app")
        key = (id(app), scope["method"], scope.get("root_path", ""), scope["path"])
        cache = self.resolved
        if key in cache:
            return cache[key]
        router = getattr(app, "router", None)
        routes = getattr(router, "routes", None)
        found = _marked(list(routes), scope) if routes else None
        if len(cache) >= self._cache_size:
            cache.clear()
        cache[key] = found
        return found

    def native_request(self, scope: Scope, receive: Receive) -> Any:
        return Request(scope, receive)
