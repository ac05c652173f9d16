"""Pure ASGI payment middleware.

::

    app = PaymentMiddleware(app, api_key="sk_test_...", routes={"GET /weather": "<endpoint id>"})

On a paid route the middleware answers 402 with ``PAYMENT-REQUIRED``, or settles the payment and
runs the app with the `Settlement` in ``scope["state"]["x402"]``, adding ``PAYMENT-RESPONSE`` to
the response as it starts. On a metered route the payment is held before the app runs,
``scope["state"]["x402"]`` is the `MeteredPayment` the app reports usage to, and the usage is
settled as the response starts. Response bodies stream through untouched; headers are appended, never
rebuilt, so repeated headers such as ``Set-Cookie`` survive. Non-HTTP scopes pass through.

It runs on asyncio and on trio (through anyio). The issued challenges reach the platform in the
background: during the app's lifespan, in a task group around it; when the server runs no lifespan,
after a paid route's response is sent (see `x402mw.seller.drivers`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
import httpx

from x402mw import tracing
from x402mw.adapters._common import GatedApp
from x402mw.protocol.codec import PAYMENT_SIGNATURE, V1_PAYMENT
from x402mw.protocol.sign_in import SIGN_IN_HEADER
from x402mw.seller.answers import internal_error_answer
from x402mw.seller.config import PaidRoute
from x402mw.seller.decisions import Answer, Decision
from x402mw.seller.drivers import AsyncSeller
from x402mw.seller.gate import RequestView
from x402mw.seller.metering import MeteredPayment, ServeMetered
from x402mw.seller.setup import is_well_known

__all__ = ["PaymentMiddleware", "encode_headers", "request_view", "send_answer"]

logger = logging.getLogger("x402mw.seller")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_SIG = PAYMENT_SIGNATURE.lower().encode()
_V1 = V1_PAYMENT.lower().encode()
_SIGN_IN = SIGN_IN_HEADER.lower().encode()


def _url(scope: Scope, host: bytes | None) -> str:
    scheme = scope.get("scheme", "http")
    if host is None:
        server = scope.get("server") or ("localhost", None)
        host_text = server[0] if server[1] in (None, 80, 443) else f"{server[0]}:{server[1]}"
    else:
        host_text = host.decode("latin-1")
    url = f"{scheme}://{host_text}{scope.get('root_path', '')}{scope['path']}"
    query = scope.get("query_string")
    return f"{url}?{query.decode('latin-1')}" if query else url


def request_view(scope: Scope) -> RequestView:
    """Build the gate's view of an HTTP scope (one pass over the headers)."""
    host = payment = v1 = accept = sign_in = None
    for name, value in scope["headers"]:
        if name == b"host":
            host = value
        elif name == b"accept":
            accept = value
        elif name == _SIG:
            payment = value
        elif name == _V1:
            v1 = value
        elif name == _SIGN_IN:
            sign_in = value
    chosen = payment if payment is not None else v1
    traceparent = None
    if tracing.enabled and chosen is not None:
        traceparent = next((v.decode("latin-1") for n, v in scope["headers"] if n == b"traceparent"), None)
    return RequestView(
        scope["method"],
        _url(scope, host),
        None if chosen is None else chosen.decode("latin-1"),
        None if accept is None else accept.decode("latin-1"),
        None if sign_in is None else sign_in.decode("latin-1"),
        traceparent,
    )


_NAMES: dict[str, bytes] = {}
_PAIRS: dict[tuple[str, str], tuple[bytes, bytes]] = {}  # the decisions' constant headers, encoded once


def encode_headers(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """ASGI header pairs (lower-case names, latin-1), with the names' encodings cached."""
    encoded = []
    for name, value in headers:
        if len(value) <= 64:
            pair = _PAIRS.get((name, value))
            if pair is not None:
                encoded.append(pair)
                continue
        raw = _NAMES.get(name)
        if raw is None:  # names come from this package's decisions: a small, fixed set
            raw = _NAMES[name] = name.lower().encode("latin-1")
        pair = (raw, value.encode("latin-1"))
        if name in _CONSTANT and len(_PAIRS) < 256:
            _PAIRS[(name, value)] = pair
        encoded.append(pair)
    return encoded


_CONSTANT = frozenset({"Content-Type", "Cache-Control", "Access-Control-Expose-Headers", "Retry-After", "Vary"})


async def send_answer(answer: Answer, send: Send) -> None:
    await send({"type": "http.response.start", "status": answer.status, "headers": encode_headers(answer.headers)})
    await send({"type": "http.response.body", "body": answer.body})


class PaymentMiddleware(GatedApp[ASGIApp, httpx.AsyncBaseTransport]):
    """Sell the routes named in ``routes`` per request (see `RouteTable` for the key forms).

    ``paywall`` sets what browsers see on the 402 page (`Paywall`); ``well_known=False`` stops
    serving ``/.well-known/x402`` (the list of paid routes for agents). ``origin`` is the app's
    public origin (``https://api.example.com``): the URLs it publishes (402s, ``/.well-known/x402``)
    are under it whatever ``Host`` a request carries (see `x402mw.seller.origins`)."""

    refuse_async = False

    def connect(self, transport: httpx.AsyncBaseTransport | None) -> None:
        self.seller = AsyncSeller(self.gate, transport=transport)
        self.resolved: dict[tuple[Any, ...], PaidRoute | None] = {}  # route lookups cached by subclasses

    def resolve(self, scope: Scope) -> PaidRoute | None:
        """The paid route a request is for, or None. Subclasses add framework route marks."""
        return self.routes.match(scope["method"], scope["path"])

    def paid_routes(self, scope: Scope) -> list[tuple[str, str, PaidRoute]]:
        """Every paid route, for ``/.well-known/x402``. Subclasses add framework route marks."""
        return self.routes.entries()

    def native_request(self, scope: Scope, receive: Receive) -> Any:
        """What amount callbacks receive: the scope here, a framework request in subclasses."""
        return scope

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            async with self.seller.running():  # the background work, for as long as the app lives
                await self.app(scope, self._lifespan_receive(receive), send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self.resolve(scope)
        if route is None:
            if self.well_known and is_well_known(scope["method"], scope["path"]):
                await self._send_well_known(scope, send)
                return
            await self.app(scope, receive, send)
            return
        try:
            view = request_view(scope)
            decision: Decision | ServeMetered | None = self.gate.unpaid_challenge(route, view)
            if decision is None:
                decision = await self.seller.run(
                    # the framework's request only for an amount callback: none is made for a fixed price
                    self.gate.process(route, view, self.native_request(scope, receive) if route.amount else None)
                )
        except Exception:
            logger.exception("payment check failed unexpectedly for %s %s", scope["method"], scope["path"])
            decision = internal_error_answer()
        if isinstance(decision, Answer):
            await send_answer(decision, send)
        elif isinstance(decision, ServeMetered):
            await self._serve_metered(decision.payment, scope, receive, send)
        else:
            scope.setdefault("state", {})["x402"] = decision.settlement
            extra = encode_headers(decision.headers)

            async def send_with_receipt(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message["headers"] = [*message.get("headers", []), *extra]
                await send(message)

            await self.app(scope, receive, send_with_receipt)
        await self.seller.after_response()  # without a lifespan, the background work runs here

    async def _serve_metered(self, payment: MeteredPayment, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app with ``payment`` to report usage to; settle it as the response starts (the
        response is held until then), and answer the settlement's refusal instead of it."""
        scope.setdefault("state", {})["x402"] = payment
        started = replaced = False

        async def settle_then_send(message: Message) -> None:
            nonlocal started, replaced
            if message["type"] == "http.response.start" and not started:
                started = True
                served = int(message.get("status", 200)) < 500  # a 5xx answer is not charged
                finished = await self._finish(payment, served=served)
                if isinstance(finished, Answer):
                    replaced = True
                    await send_answer(finished, send)
                    return
                message["headers"] = [*message.get("headers", []), *encode_headers(finished)]
            elif replaced:
                return  # the body of a response the settlement's refusal replaced
            await send(message)

        try:
            await self.app(scope, receive, settle_then_send)
        finally:
            if not started:  # the app failed before it responded: nothing is charged
                with anyio.CancelScope(shield=True):
                    await self._finish(payment, served=False)

    async def _finish(self, payment: MeteredPayment, *, served: bool) -> list[tuple[str, str]] | Answer:
        try:
            return await self.seller.run(self.gate.finish(payment, served=served))
        except Exception:
            logger.exception("settling a metered request failed unexpectedly (challenge %s)", payment.challenge_id)
            return []

    async def _send_well_known(self, scope: Scope, send: Send) -> None:
        try:
            answer = await self.seller.run(self.gate.well_known(self.paid_routes(scope), request_view(scope).url))
        except Exception:
            logger.exception("the well-known manifest failed unexpectedly")
            answer = internal_error_answer()
        await send_answer(answer, send)

    def _lifespan_receive(self, receive: Receive) -> Receive:
        async def wrapped() -> Message:
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                await self.seller.aclose()
            return message

        return wrapped
