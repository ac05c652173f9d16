"""Django: `PaymentMiddleware` (sync and async) and the `require_payment` view decorator.

::

    # settings.py
    MIDDLEWARE = [..., "x402mw.adapters.django.PaymentMiddleware"]
    X402 = {"API_KEY": "sk_test_...", "PLATFORM_URL": "https://pay.example.com/v1"}

    # views.py
    from x402mw.adapters.django import require_payment

    @require_payment("<endpoint id>")
    def weather(request):
        return JsonResponse({"forecast": "sunny", "tx": request.x402.transaction})

Paid routes are the views marked with `require_payment` and the paths listed in
``X402["ROUTES"]``; the middleware's ``process_view`` checks the payment for both. It answers 402
with ``PAYMENT-REQUIRED``, or settles the payment, sets ``request.x402`` to the `Settlement` and
adds ``PAYMENT-RESPONSE`` to the view's response (streaming responses are not read). The middleware
also answers ``/.well-known/x402`` with both kinds of paid route, for agents (``X402["WELL_KNOWN"]
= False`` stops that).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Generator
from typing import Any, TypeVar

import httpx
from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RoutePattern

from x402mw import tracing
from x402mw.adapters._common import guard_view, route_template
from x402mw.errors import ConfigurationError
from x402mw.seller.answers import check_failed, internal_error_answer
from x402mw.seller.config import PaidRoute
from x402mw.seller.decisions import AmountCallback, Answer, Decision
from x402mw.seller.discovery import Discovery
from x402mw.seller.drivers import AsyncSeller, SyncSeller
from x402mw.seller.gate import DEFAULT_PLATFORM_URL, RequestView
from x402mw.seller.metering import MeteredPayment, ServeMetered
from x402mw.seller.setup import build_gate, is_well_known
from x402mw.seller.sign_in import SignIn

__all__ = ["PaymentMiddleware", "require_payment"]

logger = logging.getLogger("x402mw.seller")
F = TypeVar("F", bound=Callable[..., Any])
SETTING_KEYS = ("API_KEY", "PLATFORM_URL", "ROUTES", "SETTLE_TIMEOUT", "TRANSPORT", "PAYWALL", "WELL_KNOWN", "ORIGIN")
_MARK = "x402_route"
_HEADERS = "_x402mw_headers"
_METERED = "_x402mw_metered"  # the MeteredPayment of a request to a metered route


def require_payment(
    endpoint: str,
    *,
    amount: AmountCallback | None = None,
    description: str | None = None,
    mime_type: str | None = None,
    discovery: Discovery | None = None,
    sign_in: SignIn | None = None,
) -> Callable[[F], F]:
    """Sell a view (sync or async) per request through agent endpoint ``endpoint``.

    ``amount`` (for endpoints with dynamic pricing) receives the `HttpRequest` and returns the
    price: ``"$0.02"``, ``"0.02 USDC"``, a `Decimal` or atomic units as ``int``; it may be async
    when Django serves the request asynchronously. The view runs only once the payment is settled,
    with the settlement in ``request.x402``; without `PaymentMiddleware` in ``MIDDLEWARE`` it
    raises `ImproperlyConfigured` rather than serve for free. Decorate the function given to
    ``path()`` (for a class-based view, ``require_payment(...)(View.as_view())``). ``discovery`` and
    ``sign_in`` are `PaidRoute`'s.
    """
    try:
        route = PaidRoute(
            endpoint=endpoint,
            amount=amount,
            description=description,
            mime_type=mime_type,
            discovery=discovery,
            sign_in=sign_in,
        )
    except ConfigurationError as exc:
        raise ImproperlyConfigured(f"require_payment({endpoint!r}): {exc}") from None

    def mark(view: F) -> F:
        return guard_view(
            view, route, _MARK, is_async=iscoroutinefunction(view), ensure=lambda args: _ensure_settled(args[0], view)
        )

    return mark


def _ensure_settled(request: HttpRequest, view: Callable[..., Any]) -> None:
    if not hasattr(request, "x402"):
        raise ImproperlyConfigured(
            f"view {view.__qualname__} requires payment but no payment was checked: add "
            '"x402mw.adapters.django.PaymentMiddleware" to MIDDLEWARE'
        )


def _problem_list(problems: list[str]) -> str:
    return "settings.X402 is invalid:\n" + "\n".join(f"  - {p}" for p in problems)


def request_view(request: HttpRequest) -> RequestView:
    """Build the gate's view of a request: scheme, Host header, script root, path, query."""
    meta = request.META
    host = meta.get("HTTP_HOST")
    if not host:
        name, port = meta.get("SERVER_NAME", "localhost"), str(meta.get("SERVER_PORT", ""))
        host = name if port in ("", "80", "443") else f"{name}:{port}"
    url = f"{request.scheme}://{host}{request.path}"
    query = meta.get("QUERY_STRING")
    payment = meta.get("HTTP_PAYMENT_SIGNATURE")
    if payment is None:
        payment = meta.get("HTTP_X_PAYMENT")
    return RequestView(
        request.method or "GET",
        f"{url}?{query}" if query else url,
        payment,
        meta.get("HTTP_ACCEPT"),
        meta.get("HTTP_SIGN_IN_WITH_X"),
        meta.get("HTTP_TRACEPARENT") if tracing.enabled and payment is not None else None,
    )


class PaymentMiddleware:
    """Checks payments for paid views; configured from ``settings.X402``.

    Keys: ``API_KEY`` (required), ``PLATFORM_URL``, ``ROUTES`` (``{"GET /path": "<endpoint id>"}``
    matched against ``request.path_info``), ``SETTLE_TIMEOUT`` (seconds), ``PAYWALL`` (a `Paywall`),
    ``WELL_KNOWN`` (False: no ``/.well-known/x402``), ``ORIGIN`` (the site's public origin,
    ``https://api.example.com``: its published URLs are under it whatever ``Host`` a request
    carries) and ``TRANSPORT`` (an ``httpx`` transport, for
    tests). A bad configuration raises `ImproperlyConfigured` listing every
    problem when Django loads the middleware. Serves both WSGI (sync) and ASGI (async) stacks.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)
        config = getattr(settings, "X402", None)
        if not isinstance(config, dict):
            raise ImproperlyConfigured(_problem_list(['X402 must be a dict such as {"API_KEY": "sk_test_..."}']))
        problems = [
            f"unknown key {key!r} (known: {', '.join(SETTING_KEYS)})" for key in config if key not in SETTING_KEYS
        ]
        try:
            self.gate, self.routes = build_gate(
                api_key=config.get("API_KEY"),
                platform_url=config.get("PLATFORM_URL", DEFAULT_PLATFORM_URL),
                routes=config.get("ROUTES"),
                settle_timeout=config.get("SETTLE_TIMEOUT", 30.0),
                refuse_async=not self.is_async,
                paywall=config.get("PAYWALL"),
                origin=config.get("ORIGIN"),
            )
        except ConfigurationError as exc:
            problems.extend(exc.problems)
        if problems:
            raise ImproperlyConfigured(_problem_list(problems))
        self.well_known = bool(config.get("WELL_KNOWN", True))
        self._transport: Any = config.get("TRANSPORT")
        self._sync_seller: SyncSeller | None = None
        self._async_seller: AsyncSeller | None = None
        self._background: asyncio.Task[None] | None = None
        self._lock = threading.Lock()
        # Django adapts process_view to the handler's mode; give it the one matching ours.
        self.process_view = self._process_view_async if self.is_async else self._process_view_sync

    def __repr__(self) -> str:
        return f"PaymentMiddleware(gate={self.gate!r})"

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        if self.well_known and is_well_known(request.method or "GET", request.path_info):
            try:
                answer = self._sync().run(self._manifest(request))
            except Exception:
                logger.exception("the well-known manifest failed unexpectedly")
                answer = internal_error_answer()
            return _answer(answer)
        response = self.get_response(request)
        payment = getattr(request, _METERED, None)
        if payment is not None:
            finished = _finished(
                payment, lambda served: self._sync().run(self.gate.finish(payment, served=served)), response
            )
            return _settled_response(request, response, finished)
        return _add_headers(request, response)

    async def __acall__(self, request: HttpRequest) -> Any:
        if self.well_known and is_well_known(request.method or "GET", request.path_info):
            try:
                answer = await self._async().run(self._manifest(request))
            except Exception:
                logger.exception("the well-known manifest failed unexpectedly")
                answer = internal_error_answer()
            return _answer(answer)
        response = await self.get_response(request)
        payment = getattr(request, _METERED, None)
        if payment is not None:
            try:
                finished = await self._async().run(self.gate.finish(payment, served=response.status_code < 500))
            except Exception:
                logger.exception("settling a metered request failed (challenge %s)", payment.challenge_id)
                finished = []
            return _settled_response(request, response, finished)
        return _add_headers(request, response)

    def _manifest(self, request: HttpRequest) -> Generator[Any, Any, Answer]:
        """The ``/.well-known/x402`` answer: ``ROUTES``, then the marked views of the URLconf."""
        routes = self.routes.entries() + _marked(get_resolver(getattr(request, "urlconf", None)).url_patterns, "/")
        return self.gate.well_known(routes, request_view(request).url)

    def _route(self, request: HttpRequest, view: Callable[..., Any]) -> PaidRoute | None:
        found = self.routes.match(request.method or "GET", request.path_info)
        if found is not None:
            return found
        mark = getattr(view, _MARK, None)
        return mark if isinstance(mark, PaidRoute) else None

    def _process_view_sync(
        self, request: HttpRequest, view: Callable[..., Any], args: Any, kwargs: Any
    ) -> HttpResponse | None:
        route = self._route(request, view)
        if route is None:
            return None
        seen = request_view(request)
        try:
            decision = self._sync().run(self.gate.process(route, seen, request))
        except Exception:
            decision = check_failed(seen.method, seen.url)
        return _apply(request, decision)

    async def _process_view_async(
        self, request: HttpRequest, view: Callable[..., Any], args: Any, kwargs: Any
    ) -> HttpResponse | None:
        route = self._route(request, view)
        if route is None:
            return None
        seen = request_view(request)
        try:
            decision = await self._async().run(self.gate.process(route, seen, request))
        except Exception:
            decision = check_failed(seen.method, seen.url)
        return _apply(request, decision)

    def _sync(self) -> SyncSeller:
        if self._sync_seller is None:
            with self._lock:
                if self._sync_seller is None:
                    transport = self._transport if isinstance(self._transport, httpx.BaseTransport) else None
                    self._sync_seller = SyncSeller(self.gate, transport=transport)
        return self._sync_seller

    def _async(self) -> AsyncSeller:
        if self._async_seller is None:
            transport = self._transport if isinstance(self._transport, httpx.AsyncBaseTransport) else None
            self._async_seller = AsyncSeller(self.gate, transport=transport)
        if self._background is None or self._background.done():
            # Django runs async views on asyncio only, and has no lifespan that outlives requests:
            # the background work is an asyncio task of its own, which the event loop cancels as it
            # shuts down (asyncio.run does), and which then closes the seller's connections.
            self._background = asyncio.get_running_loop().create_task(
                _background(self._async_seller), name="x402mw-seller"
            )
        return self._async_seller


def _marked(patterns: list[Any], prefix: str) -> list[tuple[str, str, PaidRoute]]:
    """The URLconf's views marked with `require_payment`, as ``("*", path template, route)``:
    ``path()`` routes (``<int:id>`` becomes ``{id}``) and ``include()`` of them; ``re_path()``
    routes are left out (list them in ``ROUTES``)."""
    found: list[tuple[str, str, PaidRoute]] = []
    for pattern in patterns:
        if not isinstance(pattern.pattern, RoutePattern):
            continue
        path = prefix + route_template(str(pattern.pattern))
        if isinstance(pattern, URLResolver):
            found.extend(_marked(list(pattern.url_patterns), path))
        elif isinstance(pattern, URLPattern):
            mark = getattr(pattern.callback, _MARK, None)
            if isinstance(mark, PaidRoute):
                found.append(("*", path, mark))
    return found


async def _background(seller: AsyncSeller) -> None:
    try:
        await seller.run_background()
    finally:
        await seller.aclose()


def _answer(answer: Answer) -> HttpResponse:
    response = HttpResponse(answer.body, status=answer.status)
    for name, value in answer.headers:
        response.headers[name] = value
    return response


def _finished(
    payment: MeteredPayment, finish: Callable[[bool], list[tuple[str, str]] | Answer], response: Any
) -> list[tuple[str, str]] | Answer:
    """The settlement of a metered request (a 5xx response is not charged)."""
    try:
        return finish(response.status_code < 500)
    except Exception:
        logger.exception("settling a metered request failed (challenge %s)", payment.challenge_id)
        return []


def _settled_response(request: HttpRequest, response: Any, finished: list[tuple[str, str]] | Answer) -> Any:
    if isinstance(finished, Answer):
        response.close()
        return _answer(finished)
    setattr(request, _HEADERS, finished)
    return _add_headers(request, response)


def _apply(request: HttpRequest, decision: Decision | ServeMetered) -> HttpResponse | None:
    if isinstance(decision, Answer):
        return _answer(decision)
    if isinstance(decision, ServeMetered):
        request.x402 = decision.payment
        setattr(request, _METERED, decision.payment)
        return None
    request.x402 = decision.settlement
    setattr(request, _HEADERS, decision.headers)
    return None


def _add_headers(request: HttpRequest, response: Any) -> Any:
    for name, value in getattr(request, _HEADERS, ()):
        existing = response.headers.get(name)
        # Django keeps one value per header: join list-valued ones (the CORS expose list).
        response.headers[name] = f"{existing}, {value}" if existing else value
    return response
