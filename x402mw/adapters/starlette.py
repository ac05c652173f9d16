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
``@paid(..., discovery=True)`` on FastAPI derives the route's discovery declaration (query
parameters, body schema, response schema) from the app's own OpenAPI document.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.routing import BaseRoute, Match, Mount, Route

from x402mw.adapters.asgi import PaymentMiddleware as ASGIPaymentMiddleware
from x402mw.adapters.asgi import Receive, Scope
from x402mw.seller.config import PaidRoute
from x402mw.seller.decisions import AmountCallback
from x402mw.seller.discovery import Discovery, discovery_from_openapi
from x402mw.seller.sign_in import SignIn

__all__ = ["PaymentMiddleware", "paid"]

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__x402_route__"
_FROM_OPENAPI = "__x402_openapi__"


def paid(
    endpoint: str,
    *,
    amount: AmountCallback | None = None,
    description: str | None = None,
    mime_type: str | None = None,
    discovery: Discovery | bool | None = None,
    sign_in: SignIn | None = None,
) -> Callable[[F], F]:
    """Mark a Starlette or FastAPI endpoint as sold per request through agent endpoint ``endpoint``.

    ``amount`` (sync or async) receives the `starlette.requests.Request` and returns the price for
    endpoints with dynamic pricing. ``discovery`` declares what the route takes and gives (True:
    derived from the FastAPI app's OpenAPI document); ``sign_in`` lets a wallet that paid back in.
    """
    declared = discovery if isinstance(discovery, Discovery) else None
    route = PaidRoute(
        endpoint=endpoint,
        amount=amount,
        description=description,
        mime_type=mime_type,
        discovery=declared,
        sign_in=sign_in,
    )

    def mark(func: F) -> F:
        setattr(func, _MARK, route)
        if discovery is True:
            setattr(func, _FROM_OPENAPI, True)
        return func

    return mark


def _marked(routes: list[BaseRoute], scope: Scope, prefix: str = "") -> tuple[PaidRoute, str, Any] | None:
    """The paid route a request is for, with its path template and endpoint function."""
    for candidate in routes:
        match, child = candidate.matches(scope)
        if match is Match.NONE:
            continue
        if isinstance(candidate, Mount):
            inner = {**scope, **child}
            return _marked(list(candidate.routes), inner, prefix + candidate.path)
        endpoint = getattr(candidate, "endpoint", None)
        mark = getattr(endpoint, _MARK, None)
        path = getattr(candidate, "path", "")
        return (mark, prefix + path, endpoint) if isinstance(mark, PaidRoute) else None
    return None


def _all_marked(routes: list[BaseRoute], prefix: str = "") -> list[tuple[str, str, PaidRoute]]:
    found = []
    for candidate in routes:
        if isinstance(candidate, Mount):
            found.extend(_all_marked(list(candidate.routes), prefix + candidate.path))
        elif isinstance(candidate, Route):
            mark = getattr(candidate.endpoint, _MARK, None)
            if isinstance(mark, PaidRoute):
                methods = sorted((candidate.methods or {"GET"}) - {"HEAD"}) or ["GET"]
                found.extend((method, prefix + candidate.path, mark) for method in methods)
    return found


def _with_openapi(app: Any, route: PaidRoute, method: str, path: str) -> PaidRoute:
    """``route`` with the discovery declaration derived from ``app``'s OpenAPI document."""
    openapi = getattr(app, "openapi", None)
    if not callable(openapi):
        return route
    derived = discovery_from_openapi(openapi(), method, path)
    return dataclasses.replace(route, discovery=derived) if derived is not None else route


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
        marked = _marked(list(routes), scope) if routes else None
        found = None
        if marked is not None:
            found, path, endpoint = marked
            if getattr(endpoint, _FROM_OPENAPI, False):
                found = _with_openapi(app, found, scope["method"], path)
        if len(cache) >= self._cache_size:
            cache.clear()
        cache[key] = found
        return found

    def paid_routes(self, scope: Scope) -> list[tuple[str, str, PaidRoute]]:
        app = scope.get("app")
        routes = getattr(getattr(app, "router", None), "routes", None)
        marked = _all_marked(list(routes)) if routes else []
        derived = []
        for method, path, route in marked:
            endpoint = next(
                (
                    r.endpoint
                    for r in routes or []
                    if isinstance(r, Route) and getattr(r.endpoint, _MARK, None) is route
                ),
                None,
            )
            if getattr(endpoint, _FROM_OPENAPI, False):
                route = _with_openapi(app, route, method, path)
            derived.append((method, path, route))
        return super().paid_routes(scope) + derived

    def native_request(self, scope: Scope, receive: Receive) -> Any:
        return Request(scope, receive)
