"""Flask: the `X402` extension and the `require_payment` view decorator.

::

    from flask import Flask, g
    from x402mw.adapters.flask import X402

    app = Flask(__name__)
    app.config["X402_API_KEY"] = "sk_test_..."
    x402 = X402(app)

    @app.get("/weather")
    @x402.require_payment("<endpoint id>")
    def weather():
        return {"forecast": "sunny", "tx": g.x402.transaction}

Paid routes are the views marked with `require_payment` and the routes listed in ``X402_ROUTES``.
A ``before_request`` hook registered by `X402.init_app` checks the payment: it answers 402 with
``PAYMENT-REQUIRED``, or settles the payment, puts the `Settlement` in ``flask.g.x402`` and adds
``PAYMENT-RESPONSE`` to the view's response (streamed responses stream; headers are appended).
On a metered route ``flask.g.x402`` is the `MeteredPayment` the view reports usage to
(``g.x402.charge(amount)``); what it reported is settled as its response is finalized. The same
hook answers ``/.well-known/x402`` with both kinds of paid route, for agents (``X402_WELL_KNOWN =
False`` stops that).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from flask import Flask, Response, after_this_request, current_app, g, request

from x402mw.adapters._common import guard_view, route_template
from x402mw.adapters.wsgi import request_url, well_known_answer
from x402mw.adapters.wsgi import request_view as wsgi_request_view
from x402mw.errors import ConfigurationError
from x402mw.seller.answers import check_failed
from x402mw.seller.config import PaidRoute
from x402mw.seller.decisions import AmountCallback, Answer
from x402mw.seller.discovery import Discovery
from x402mw.seller.drivers import SyncSeller
from x402mw.seller.gate import DEFAULT_PLATFORM_URL, PaymentGate
from x402mw.seller.metering import ServeMetered
from x402mw.seller.paywall import Paywall
from x402mw.seller.routes import RouteTable
from x402mw.seller.setup import ASYNC_AMOUNT_PROBLEM, build_gate, is_async_callable, is_well_known
from x402mw.seller.sign_in import SignIn

__all__ = ["X402", "X402State", "require_payment"]

logger = logging.getLogger("x402mw.seller")
F = TypeVar("F", bound=Callable[..., Any])
EXTENSION = "x402mw"
_MARK = "__x402_route__"


def require_payment(
    endpoint: str,
    *,
    amount: AmountCallback | None = None,
    description: str | None = None,
    mime_type: str | None = None,
    discovery: Discovery | None = None,
    sign_in: SignIn | None = None,
) -> Callable[[F], F]:
    """Sell a view per request through agent endpoint ``endpoint``. Put it under ``@app.route``.

    ``amount`` (for endpoints with dynamic pricing) is a plain function that receives the
    `flask.Request` and returns the price: ``"$0.02"``, ``"0.02 USDC"``, a `Decimal` or atomic
    units as ``int``. The view runs only once the payment is settled, with the settlement in
    ``g.x402``; if the app has no `X402` extension the view raises `ConfigurationError` rather than
    serve for free.
    """
    if is_async_callable(amount):
        raise ConfigurationError(f"require_payment({endpoint!r}): {ASYNC_AMOUNT_PROBLEM}")
    route = PaidRoute(
        endpoint=endpoint,
        amount=amount,
        description=description,
        mime_type=mime_type,
        discovery=discovery,
        sign_in=sign_in,
    )

    def mark(view: F) -> F:
        return guard_view(
            view, route, _MARK, is_async=inspect.iscoroutinefunction(view), ensure=lambda _: _ensure_settled(view)
        )

    return mark


@dataclass(frozen=True, slots=True)
class X402State:
    """What `X402.init_app` keeps in ``app.extensions["x402mw"]``."""

    gate: PaymentGate
    routes: RouteTable
    seller: SyncSeller
    well_known: bool = True

    def close(self) -> None:
        """Register the last issued challenges and close the connection to the platform."""
        self.seller.close()


class X402:
    """The Flask extension. Arguments given here win over the app's ``X402_*`` config keys:
    ``X402_API_KEY``, ``X402_PLATFORM_URL``, ``X402_ROUTES`` (``{"GET /path": "<endpoint id>"}``),
    ``X402_SETTLE_TIMEOUT``, ``X402_PAYWALL`` (a `Paywall`), ``X402_WELL_KNOWN`` (False: no
    ``/.well-known/x402``) and ``X402_ORIGIN`` (the app's public origin, ``https://api.example.com``:
    its published URLs are under it whatever ``Host`` a request carries). `init_app` checks the
    configuration and raises `ConfigurationError` listing every problem."""

    def __init__(
        self,
        app: Flask | None = None,
        *,
        api_key: str | None = None,
        platform_url: str | None = None,
        routes: Mapping[str, PaidRoute | str] | None = None,
        settle_timeout: float | None = None,
        transport: httpx.BaseTransport | None = None,
        paywall: Paywall | None = None,
        well_known: bool | None = None,
        origin: str | None = None,
    ) -> None:
        self._options: dict[str, Any] = {
            "api_key": api_key,
            "platform_url": platform_url,
            "routes": routes,
            "settle_timeout": settle_timeout,
            "paywall": paywall,
            "origin": origin,
        }
        self._well_known = well_known
        self._transport = transport
        if app is not None:
            self.init_app(app)

    def __repr__(self) -> str:
        return "X402(api_key=<hidden>)"

    def init_app(self, app: Flask) -> None:
        defaults = {
            "platform_url": DEFAULT_PLATFORM_URL,
            "routes": None,
            "settle_timeout": 30.0,
            "paywall": None,
            "origin": None,
        }
        config = {
            name: value if value is not None else app.config.get(f"X402_{name.upper()}", defaults.get(name))
            for name, value in self._options.items()
        }
        gate, routes = build_gate(**config, refuse_async=True)
        well_known = self._well_known if self._well_known is not None else app.config.get("X402_WELL_KNOWN", True)
        if EXTENSION not in app.extensions:
            app.before_request(_check_payment)
        seller = SyncSeller(gate, transport=self._transport)
        app.extensions[EXTENSION] = X402State(gate, routes, seller, bool(well_known))

    require_payment = staticmethod(require_payment)


def _ensure_settled(view: Callable[..., Any]) -> None:
    if "x402" not in g:
        raise ConfigurationError(
            f"view {view.__qualname__} requires payment but the app has no X402 extension "
            "(call X402(app) or x402.init_app(app))"
        )


def _route_for_request(state: X402State) -> PaidRoute | None:
    found = state.routes.match(request.method, request.path)
    if found is not None:
        return found
    rule = request.url_rule
    if request.method == "OPTIONS" and getattr(rule, "provide_automatic_options", False):
        return None  # Flask answers preflights itself; the view does not run
    view = current_app.view_functions.get(request.endpoint or "")
    mark = getattr(view, _MARK, None)
    return mark if isinstance(mark, PaidRoute) else None


def _paid_routes(state: X402State) -> list[tuple[str, str, PaidRoute]]:
    """Every paid route of the app, for ``/.well-known/x402``: ``X402_ROUTES``, then the marked
    views' rules (``<int:id>`` becomes ``{id}``)."""
    found = state.routes.entries()
    for rule in current_app.url_map.iter_rules():
        mark = getattr(current_app.view_functions.get(rule.endpoint), _MARK, None)
        if isinstance(mark, PaidRoute):
            path = route_template(rule.rule)
            methods = sorted((rule.methods or {"GET"}) - {"HEAD", "OPTIONS"}) or ["GET"]
            found.extend((method, path, mark) for method in methods)
    return found


def _response(answer: Answer) -> Response:
    return current_app.response_class(answer.body, status=answer.status, headers=answer.headers)


def _check_payment() -> Response | None:
    state = current_app.extensions.get(EXTENSION)
    if not isinstance(state, X402State):
        return None
    route = _route_for_request(state)
    if route is None:
        if state.well_known and is_well_known(request.method, request.path):
            manifest = state.gate.well_known(_paid_routes(state), request_url(request.environ))
            return _response(well_known_answer(state.seller, manifest))
        return None
    view = wsgi_request_view(request.environ)
    try:
        # Callbacks get the request itself: the proxy would be unbound outside this context.
        native = request._get_current_object()  # type: ignore[attr-defined]
        decision = state.seller.run(state.gate.process(route, view, native))
    except Exception:
        return _response(check_failed(view.method, view.url))
    if isinstance(decision, Answer):
        return _response(decision)
    if isinstance(decision, ServeMetered):
        payment = g.x402 = decision.payment

        @after_this_request
        def settle_usage(response: Response) -> Response:
            # A 5xx answer (the view raised, say) is not charged; the authorization is closed.
            served = response.status_code < 500
            try:
                finished = state.seller.run(state.gate.finish(payment, served=served))
            except Exception:
                logger.exception("settling a metered request failed (challenge %s)", payment.challenge_id)
                return response
            if isinstance(finished, Answer):
                response.close()
                return _response(finished)
            for name, value in finished:
                response.headers.add(name, value)
            return response

        return None
    g.x402 = decision.settlement
    headers = decision.headers

    @after_this_request
    def add_receipt(response: Response) -> Response:
        for name, value in headers:
            response.headers.add(name, value)
        return response

    return None
