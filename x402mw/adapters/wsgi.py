"""WSGI payment middleware; Flask reuses its request view.

::

    app = PaymentMiddleware(app, api_key="sk_test_...", routes={"GET /weather": "<endpoint id>"})

On a paid route the middleware answers 402 with ``PAYMENT-REQUIRED``, or settles the payment and
runs the app with the `Settlement` in ``environ["x402mw.settlement"]``, appending
``PAYMENT-RESPONSE`` to the headers the app passes to ``start_response``. The app's body iterable
is returned as it is, so it streams and its ``close()`` is called by the server. It also answers
``/.well-known/x402``, the list of its paid routes for agents (``well_known=False`` stops that).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable, Iterator
from http import HTTPStatus
from types import TracebackType
from typing import Any
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import httpx

from x402mw import tracing
from x402mw.adapters._common import GatedApp
from x402mw.seller.answers import check_failed, internal_error_answer
from x402mw.seller.decisions import Answer
from x402mw.seller.drivers import SyncSeller
from x402mw.seller.gate import RequestView
from x402mw.seller.metering import MeteredPayment, ServeMetered
from x402mw.seller.setup import is_well_known

__all__ = ["SETTLEMENT_KEY", "PaymentMiddleware", "request_view", "well_known_answer"]

logger = logging.getLogger("x402mw.seller")

SETTLEMENT_KEY = "x402mw.settlement"
_ExcInfo = tuple[type[BaseException], BaseException, TracebackType] | tuple[None, None, None]


def _text(value: str) -> str:
    # PEP 3333 carries bytes as latin-1 strings; paths are UTF-8 underneath.
    return value.encode("latin-1").decode("utf-8", "replace")


def request_path(environ: WSGIEnvironment) -> str:
    return _text(environ.get("PATH_INFO", "")) or "/"


def request_url(environ: WSGIEnvironment) -> str:
    """The absolute URL of a request: scheme, Host header, script root, path, query."""
    scheme = environ.get("wsgi.url_scheme", "http")
    host = environ.get("HTTP_HOST")
    if not host:
        name, port = environ.get("SERVER_NAME", "localhost"), str(environ.get("SERVER_PORT", ""))
        host = name if port in ("", "80", "443") else f"{name}:{port}"
    url = f"{scheme}://{host}{_text(environ.get('SCRIPT_NAME', ''))}{request_path(environ)}"
    query = environ.get("QUERY_STRING")
    return f"{url}?{query}" if query else url


def request_view(environ: WSGIEnvironment) -> RequestView:
    """Build the gate's view of a WSGI request."""
    payment = environ.get("HTTP_PAYMENT_SIGNATURE")
    if payment is None:
        payment = environ.get("HTTP_X_PAYMENT")
    return RequestView(
        environ.get("REQUEST_METHOD", "GET"),
        request_url(environ),
        payment,
        environ.get("HTTP_ACCEPT"),
        environ.get("HTTP_SIGN_IN_WITH_X"),
        environ.get("HTTP_TRACEPARENT") if tracing.enabled and payment is not None else None,
    )


def status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def well_known_answer(seller: SyncSeller, manifest: Generator[Any, Any, Answer]) -> Answer:
    """The ``/.well-known/x402`` answer ``manifest`` (the gate's `PaymentGate.well_known`) gives,
    or a logged 500."""
    try:
        return seller.run(manifest)
    except Exception:
        logger.exception("the well-known manifest failed unexpectedly")
        return internal_error_answer()


class PaymentMiddleware(GatedApp[WSGIApplication, httpx.BaseTransport]):
    """Sell the routes named in ``routes`` per request (see `RouteTable` for the key forms).

    Amount callbacks receive the WSGI ``environ`` and must be plain functions. ``paywall`` sets what
    browsers see on the 402 page (`Paywall`); ``well_known=False`` stops serving
    ``/.well-known/x402``; ``origin`` is the app's public origin (``https://api.example.com``), under
    which it publishes its URLs whatever ``Host`` a request carries (see `x402mw.seller.origins`).
    Configuration is checked here: `ConfigurationError` lists every problem.
    """

    refuse_async = True

    def connect(self, transport: httpx.BaseTransport | None) -> None:
        self.seller = SyncSeller(self.gate, transport=transport)

    def __repr__(self) -> str:
        return f"PaymentMiddleware({self.app!r}, gate={self.gate!r})"

    def close(self) -> None:
        """Register the last issued challenges and close the connection to the platform."""
        self.seller.close()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method, path = environ.get("REQUEST_METHOD", "GET"), request_path(environ)
        route = self.routes.match(method, path)
        if route is None:
            if self.well_known and is_well_known(method, path):
                manifest = self.gate.well_known(self.routes.entries(), request_url(environ))
                answer = well_known_answer(self.seller, manifest)
                start_response(status_line(answer.status), list(answer.headers))
                return [answer.body]
            return self.app(environ, start_response)
        view = request_view(environ)
        try:
            decision = self.seller.run(self.gate.process(route, view, environ))
        except Exception:
            decision = check_failed(view.method, view.url)
        if isinstance(decision, Answer):
            start_response(status_line(decision.status), list(decision.headers))
            return [decision.body]
        if isinstance(decision, ServeMetered):
            return self._serve_metered(decision.payment, environ, start_response)
        environ[SETTLEMENT_KEY] = decision.settlement
        extra = list(decision.headers)

        def start_with_receipt(
            status: str, headers: list[tuple[str, str]], exc_info: _ExcInfo | None = None
        ) -> Callable[[bytes], object]:
            return start_response(status, [*headers, *extra], exc_info)

        return self.app(environ, start_with_receipt)

    def _serve_metered(
        self, payment: MeteredPayment, environ: WSGIEnvironment, start_response: StartResponse
    ) -> Iterable[bytes]:
        """Run the app with ``payment`` to report usage to; settle it when the app starts its
        response, and answer the settlement's refusal instead of the app's response."""
        environ[SETTLEMENT_KEY] = payment
        state: dict[str, Answer | None] = {}

        def start_after_settling(
            status: str, headers: list[tuple[str, str]], exc_info: _ExcInfo | None = None
        ) -> Callable[[bytes], object]:
            if "outcome" not in state:
                served = not status.startswith("5")  # a 5xx answer is not charged
                finished = self._finish(payment, served)
                state["outcome"] = finished if isinstance(finished, Answer) else None
                if isinstance(finished, Answer):
                    return start_response(status_line(finished.status), list(finished.headers), exc_info)
                headers = [*headers, *finished]
            return start_response(status, headers, exc_info)

        try:
            body = self.app(environ, start_after_settling)
        except BaseException:
            if "outcome" not in state:
                self._finish(payment, False)
            raise
        return _MeteredBody(body, state)

    def _finish(self, payment: MeteredPayment, served: bool) -> list[tuple[str, str]] | Answer:
        try:
            return self.seller.run(self.gate.finish(payment, served=served))
        except Exception:
            logger.exception("settling a metered request failed (challenge %s)", payment.challenge_id)
            return []


class _MeteredBody:
    """The app's body, or, when the settlement's refusal replaced the response, that refusal's."""

    def __init__(self, body: Iterable[bytes], state: dict[str, Answer | None]) -> None:
        self._body = body
        self._state = state

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._body:
            answer = self._state.get("outcome")
            if answer is not None:
                yield answer.body
                return
            yield chunk
        answer = self._state.get("outcome")
        if answer is not None and not self._state.get("sent"):
            self._state["sent"] = answer
            yield answer.body

    def close(self) -> None:
        close = getattr(self._body, "close", None)
        if close is not None:
            close()
