"""The gateway: an ASGI reverse proxy that sells an upstream's routes through the payment gate.

It is `x402mw.adapters.asgi.PaymentMiddleware` (the same gate, background work, ``/.well-known/x402``,
browser paywall, sign-in-with-x and payment identifiers) with the upstream as its app, and one
difference on paid routes: the payment is held before the upstream is called and settled only once
the upstream answered successfully (2xx or 3xx), as paid MCP tools are. Otherwise nothing is charged:

- the upstream fails (5xx): 502 ``upstream_error``; it cannot be reached or resets: 502
  ``upstream_unavailable``; it takes too long: 504 ``upstream_timeout``;
- the upstream refuses the request (4xx): its answer is passed on;
- a metered (``upto``) route: the usage the upstream reports in the route's ``usage_header`` is
  settled (at most the ceiling the agent signed); a failure settles nothing.

With ``unauthorized_to_402`` a route is first passed to the upstream as it came (its own customers
keep their credentials); an upstream ``401`` becomes the route's 402, and a paid request is served
as any paid route is.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import httpx

from x402mw.adapters.asgi import (
    PaymentMiddleware,
    Receive,
    Scope,
    Send,
    encode_headers,
    request_view,
    send_answer,
)
from x402mw.errors import PriceError
from x402mw.gateway.config import GatewayConfig, GatewayRoute
from x402mw.gateway.openapi import LLMS_PATH, OPENAPI_PATH, encoded, llms_txt, published_document
from x402mw.gateway.proxy import BodyTooLarge, Upstream, UpstreamError, declared_length, response_headers
from x402mw.protocol import reasons
from x402mw.seller import Answer, Decision, Held, PaidRoute, Serve, ServeMetered, UsageError, internal_error_answer
from x402mw.seller.answers import error_answer
from x402mw.seller.origins import origin_of
from x402mw.seller.setup import is_well_known

logger = logging.getLogger("x402mw.gateway")


def _succeeded(status: int) -> bool:
    return 200 <= status < 400


def _upstream_failure(exc: UpstreamError) -> Answer:
    if exc.timeout:
        return error_answer(504, "upstream_timeout", "the upstream did not answer in time; nothing was charged")
    return error_answer(502, "upstream_unavailable", "the upstream could not be reached; nothing was charged")


def _upstream_error(status: int) -> Answer:
    return error_answer(502, "upstream_error", f"the upstream answered {status}; nothing was charged")


_ODD_PATH = error_answer(
    400, "invalid_path", "the path has an empty, '.' or '..' segment or a backslash: spell it plainly"
)
_TOO_LARGE = error_answer(413, "request_too_large", "the request body is larger than this gateway accepts")


class GatewayApp(PaymentMiddleware):
    """Sell ``config``'s routes of the upstream at ``upstream_url``; ``endpoints`` maps each
    route's key (`GatewayRoute.key`) to its agent endpoint's id (see
    `x402mw.gateway.endpoints.provision`). Every other route passes through untouched."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        upstream_url: str,
        api_key: str,
        platform_url: str,
        endpoints: Mapping[str, str],
        transport: httpx.AsyncBaseTransport | None = None,
        upstream_transport: httpx.AsyncBaseTransport | None = None,
        settle_timeout: float = 30.0,
        openapi_document: Any = None,
    ) -> None:
        routes: dict[str, PaidRoute | str] = {}
        by_route: dict[int, GatewayRoute] = {}
        for route in config.routes:
            paid = PaidRoute(
                endpoint=endpoints[route.key],
                description=route.description,
                mime_type=route.mime_type,
                discovery=route.discovery,
                sign_in=route.sign_in,
            )
            routes[route.key] = paid
            by_route[id(paid)] = route
        super().__init__(
            self._lifespan,
            api_key=api_key,
            platform_url=platform_url,
            routes=routes,
            settle_timeout=settle_timeout,
            transport=transport,
            origin=config.origin,
        )
        self._by_route = by_route
        self.config = config
        self.upstream = Upstream.create(
            upstream_url, timeout=config.timeout, max_body=config.max_request_body, transport=upstream_transport
        )
        self._openapi = encoded(published_document(config, openapi_document)) if config.publish else None

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.upstream.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await super().__call__(scope, receive, send)
            return
        if scope["type"] == "websocket":  # not proxied: refused at the handshake
            await receive()
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            return
        if not _plain_path(scope["path"]):
            await send_answer(_ODD_PATH, send)
            return
        if self._openapi is not None and scope["method"] in ("GET", "HEAD"):
            if scope["path"] == OPENAPI_PATH:
                await send_answer(Answer(200, [("Content-Type", "application/json")], self._openapi), send)
                return
            if scope["path"] == LLMS_PATH:
                origin = self.config.origin or origin_of(request_view(scope).url)
                text = llms_txt(self.config, origin).encode()
                await send_answer(Answer(200, [("Content-Type", "text/markdown; charset=utf-8")], text), send)
                return
        route = self.resolve(scope)
        if route is None:
            if self.well_known and is_well_known(scope["method"], scope["path"]):
                await self._send_well_known(scope, send)
            else:
                await self._pass_through(scope, receive, send)
            return
        try:
            await self._paid(self._by_route[id(route)], route, scope, receive, send)
        finally:
            await self.seller.after_response()

    async def _pass_through(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            response = await self.upstream.send(scope, receive)
        except BodyTooLarge:
            await send_answer(_TOO_LARGE, send)
            return
        except UpstreamError as exc:
            logger.warning("%s %s: %s", scope["method"], scope["path"], exc)
            await send_answer(_upstream_failure(exc), send)
            return
        await _relay(response, response.status_code, response_headers(response), send)

    async def _decide(self, route: PaidRoute, scope: Scope) -> Decision | Held | ServeMetered:
        view = request_view(scope)
        try:
            if view.payment is None:  # a challenge, or a wallet signed in (sign-in-with-x)
                challenge = self.gate.unpaid_challenge(route, view)
                if challenge is not None:
                    return challenge
                return await self.seller.run(self.gate.process(route, view))
            decision = await self.seller.run(self.gate.hold(route, view))
            if isinstance(decision, Answer) and decision.reason == reasons.NONCE_USED:
                # Used already: by this very payment (its answer was lost, the agent sends it
                # again), the settle path answers its first outcome, never a second charge.
                return await self.seller.run(self.gate.process(route, view))
            return decision
        except Exception:
            logger.exception("payment check failed unexpectedly for %s %s", scope["method"], scope["path"])
            return internal_error_answer()

    async def _paid(self, config: GatewayRoute, route: PaidRoute, scope: Scope, receive: Receive, send: Send) -> None:
        length = declared_length(scope)
        if self.upstream.max_body and length is not None and length > self.upstream.max_body:
            await send_answer(_TOO_LARGE, send)  # before a payment is held for it
            return
        if config.unauthorized_to_402 and not _carries_payment(scope):
            await self._try_unpaid(route, scope, receive, send)
            return
        decision = await self._decide(route, scope)
        if isinstance(decision, Answer):
            await send_answer(decision, send)
        elif isinstance(decision, Held):
            await self._serve_held(config, decision, scope, receive, send)
        elif isinstance(decision, ServeMetered):
            await self._serve_usage(config, decision, scope, receive, send)
        else:  # signed in, or this payment sent again: settled already, nothing more to settle
            await self._serve_settled(decision, scope, receive, send)

    async def _try_unpaid(self, route: PaidRoute, scope: Scope, receive: Receive, send: Send) -> None:
        """``unauthorized_to_402``: the request as it came; the upstream's 401 becomes the 402."""
        response = await self._send_uncharged(scope, receive, send)
        if response is None:
            return
        if response.status_code != 401:
            await _relay(response, response.status_code, response_headers(response), send)
            return
        await response.aclose()
        decision = await self._decide(route, scope)
        if isinstance(decision, Answer):
            await send_answer(decision, send)
        else:  # a signed-in wallet is not let past the upstream's own 401
            await send_answer(error_answer(401, "unauthorized", "the upstream refused the request"), send)

    async def _serve_held(self, config: GatewayRoute, held: Held, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self._send_charged(
            config, scope, receive, send, lambda: self._release(held), "the held payment is released"
        )
        if response is None:
            return
        status = response.status_code
        try:
            with anyio.CancelScope(shield=True):
                settled = await self.seller.run(self.gate.capture(held))
        except Exception:
            logger.exception("capturing held payment %s failed unexpectedly", held.payment_id)
            settled = internal_error_answer()
        if isinstance(settled, Answer):
            await response.aclose()
            await send_answer(settled, send)  # the payment could not be settled: the upstream's answer is not given
            return
        assert isinstance(settled, Serve)
        scope.setdefault("state", {})["x402"] = settled.settlement
        await _relay(response, status, [*response_headers(response), *encode_headers(settled.headers)], send)

    async def _serve_usage(
        self, config: GatewayRoute, decision: ServeMetered, scope: Scope, receive: Receive, send: Send
    ) -> None:
        payment = decision.payment
        response = await self._send_charged(
            config, scope, receive, send, lambda: self._settle_usage(payment, served=False), "nothing is charged"
        )
        if response is None:
            return
        status = response.status_code
        assert config.usage_header is not None
        try:
            payment.charge(config.usage(response.headers.get(config.usage_header)))
        except (PriceError, UsageError) as exc:
            logger.error("%s %s: the upstream's usage header is unusable (%s); nothing is charged", *_where(scope), exc)
        finished = await self._settle_usage(payment, served=True)
        if isinstance(finished, Answer):
            await response.aclose()
            await send_answer(finished, send)
            return
        await _relay(response, status, [*response_headers(response), *encode_headers(finished)], send)

    async def _serve_settled(self, decision: Serve, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self._send_uncharged(scope, receive, send)
        if response is None:
            return
        scope.setdefault("state", {})["x402"] = decision.settlement
        await _relay(
            response, response.status_code, [*response_headers(response), *encode_headers(decision.headers)], send
        )

    async def _send_uncharged(self, scope: Scope, receive: Receive, send: Send) -> httpx.Response | None:
        """The upstream's response to a request that charges nothing, or None once its failure is answered."""
        try:
            return await self.upstream.send(scope, receive)
        except BodyTooLarge:
            await send_answer(_TOO_LARGE, send)
        except UpstreamError as exc:
            await send_answer(_upstream_failure(exc), send)
        return None

    async def _send_charged(
        self,
        config: GatewayRoute,
        scope: Scope,
        receive: Receive,
        send: Send,
        undo: Callable[[], Awaitable[object]],
        undone: str,
    ) -> httpx.Response | None:
        """The upstream's successful response to a paid request, or None once its failure or refusal
        is answered, after ``undo`` (which gives the payment up; ``undone`` says so in the log)."""
        try:
            response = await self.upstream.send(scope, receive, config.upstream_authorization)
        except BaseException as exc:
            await undo()
            if isinstance(exc, BodyTooLarge):
                await send_answer(_TOO_LARGE, send)
            elif isinstance(exc, UpstreamError):
                logger.warning("%s %s: %s; %s", scope["method"], scope["path"], exc, undone)
                await send_answer(_upstream_failure(exc), send)
            else:
                raise
            return None
        if not _succeeded(response.status_code):
            await undo()
            await self._refused(response, send)
            return None
        return response

    async def _refused(self, response: httpx.Response, send: Send) -> None:
        """The upstream's failure (5xx: 502) or refusal (4xx: passed on) of a request charged nothing."""
        if response.status_code >= 500:
            await response.aclose()
            await send_answer(_upstream_error(response.status_code), send)
        else:
            await _relay(response, response.status_code, response_headers(response), send)

    async def _settle_usage(self, payment: Any, *, served: bool) -> list[tuple[str, str]] | Answer:
        finished: list[tuple[str, str]] | Answer = []
        with anyio.CancelScope(shield=True):
            try:
                finished = await self.seller.run(self.gate.finish(payment, served=served))
            except Exception:
                logger.exception("settling metered request failed unexpectedly (challenge %s)", payment.challenge_id)
        return finished

    async def _release(self, held: Held) -> None:
        with anyio.CancelScope(shield=True):  # a request cancelled (its client gone) still gives its hold up
            try:
                await self.seller.run(self.gate.release(held))
            except Exception:
                logger.exception("could not release held payment %s", held.payment_id)


def _plain_path(path: str) -> bool:
    """Whether ``path`` (decoded) names one resource one way. A path with dot segments or empty
    ones would be matched against the priced routes as written and then normalised on the way
    upstream (httpx resolves ``/free/../paid`` to ``/paid``; many servers merge ``//``): a paid
    route reached by a free spelling. Such paths are refused."""
    if "\\" in path or "//" in path:
        return False
    return not any(segment in (".", "..") for segment in path.split("/"))


def _where(scope: Scope) -> tuple[str, str]:
    return scope["method"], scope["path"]


_PAYMENT_NAMES = frozenset({b"payment-signature", b"x-payment", b"sign-in-with-x"})


def _carries_payment(scope: Scope) -> bool:
    return any(name in _PAYMENT_NAMES for name, _ in scope["headers"])


async def _relay(response: httpx.Response, status: int, headers: list[tuple[bytes, bytes]], send: Send) -> None:
    """Send the upstream's response on, its body streamed as it arrives (SSE, chunked), then close it."""
    try:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        async for chunk in response.aiter_raw():
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        await response.aclose()
