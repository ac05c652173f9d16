"""Forwarding one ASGI request to the upstream and its answer back, streamed both ways.

Hop-by-hop headers (RFC 9110 7.6.1: ``Connection`` and the names it lists, ``Keep-Alive``,
``Transfer-Encoding``, ``TE``, ``Trailer``, ``Upgrade``, ``Proxy-*``) are dropped in both
directions. ``X-Forwarded-For``, ``-Proto`` and ``-Host`` are set from the connection (what a client
sent under those names, and ``Forwarded``, is replaced, never trusted). The payment headers a client
sends to the gateway (``PAYMENT-SIGNATURE``, ``X-PAYMENT``, ``SIGN-IN-WITH-X``) never reach the
upstream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import httpx

from x402mw.protocol.codec import PAYMENT_SIGNATURE, V1_PAYMENT
from x402mw.protocol.sign_in import SIGN_IN_HEADER

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_NOT_FORWARDED = HOP_BY_HOP | {
    b"host",
    b"forwarded",
    b"x-forwarded-for",
    b"x-forwarded-proto",
    b"x-forwarded-host",
    PAYMENT_SIGNATURE.lower().encode(),
    V1_PAYMENT.lower().encode(),
    SIGN_IN_HEADER.lower().encode(),
}


class BodyTooLarge(Exception):
    """The request's body is over the configured limit (answered 413)."""


class UpstreamError(Exception):
    """The upstream could not be reached, reset the connection, or took too long (answered 502/504)."""

    def __init__(self, message: str, *, timeout: bool) -> None:
        super().__init__(message)
        self.timeout = timeout


def _listed_in_connection(headers: list[tuple[bytes, bytes]]) -> set[bytes]:
    named: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            named.update(token.strip().lower() for token in value.split(b",") if token.strip())
    return named


def request_headers(scope: Scope, authorization: str | None = None) -> list[tuple[bytes, bytes]]:
    """The headers to send upstream: the client's, less hop-by-hop, payment and forwarding ones,
    plus ``X-Forwarded-*`` from the connection; ``authorization`` replaces the client's."""
    raw: list[tuple[bytes, bytes]] = scope["headers"]
    dropped = _NOT_FORWARDED | _listed_in_connection(raw)
    if authorization is not None:
        dropped |= {b"authorization"}
    host = b""
    kept = []
    for name, value in raw:
        lower = name.lower()
        if lower == b"host":
            host = value
        if lower not in dropped:
            kept.append((lower, value))
    client = scope.get("client")
    if client:
        kept.append((b"x-forwarded-for", str(client[0]).encode("latin-1")))
    kept.append((b"x-forwarded-proto", str(scope.get("scheme", "http")).encode("latin-1")))
    if host:
        kept.append((b"x-forwarded-host", host))
    if authorization is not None:
        kept.append((b"authorization", authorization.encode("latin-1")))
    return kept


def response_headers(response: httpx.Response) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers to send on, less hop-by-hop ones (repeated headers kept)."""
    raw = response.headers.raw
    dropped = HOP_BY_HOP | _listed_in_connection(raw)
    return [(name.lower(), value) for name, value in raw if name.lower() not in dropped]


def declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


@dataclass
class Upstream:
    """The upstream and a kept-alive pool of connections to it.

    Requests go straight to httpx's connection pool (`httpx.AsyncHTTPTransport`), not through an
    `httpx.AsyncClient`: a client would keep the upstream's cookies in its jar and send them with
    the next client's requests, and add its own default headers (``User-Agent``,
    ``Accept-Encoding``...) to requests that had none. A proxy sends what it was sent."""

    url: str
    transport: httpx.AsyncBaseTransport
    timeout: dict[str, float | None]
    max_body: int

    @classmethod
    def create(
        cls, url: str, *, timeout: float, max_body: int, transport: httpx.AsyncBaseTransport | None = None
    ) -> Upstream:
        pool = transport or httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=30),
            retries=0,
        )
        limits = httpx.Timeout(timeout, connect=min(timeout, 10.0)).as_dict()
        return cls(url.rstrip("/"), pool, limits, max_body)

    async def aclose(self) -> None:
        await self.transport.aclose()

    def _body(self, receive: Receive) -> AsyncIterator[bytes]:
        limit = self.max_body

        async def chunks() -> AsyncIterator[bytes]:
            seen = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise UpstreamError("the client went away while sending its body", timeout=False)
                body = message.get("body", b"")
                seen += len(body)
                if limit and seen > limit:
                    raise BodyTooLarge()
                if body:
                    yield body
                if not message.get("more_body", False):
                    return

        return chunks()

    async def send(self, scope: Scope, receive: Receive, authorization: str | None = None) -> httpx.Response:
        """Send the request of ``scope`` upstream (its body streamed from ``receive``) and return the
        response with its body not read yet (close it). Raises `BodyTooLarge` or `UpstreamError`."""
        length = declared_length(scope)
        if self.max_body and length is not None and length > self.max_body:
            raise BodyTooLarge()
        path = scope.get("raw_path") or scope["path"].encode()
        url = self.url + path.decode("latin-1")
        query = scope.get("query_string")
        if query:
            url += "?" + query.decode("latin-1")
        content = self._body(receive) if _has_body(scope) else None
        request = httpx.Request(
            scope["method"],
            url,
            headers=request_headers(scope, authorization),
            content=content,
            extensions={"timeout": self.timeout},
        )
        try:
            return await self.transport.handle_async_request(request)
        except httpx.TimeoutException as exc:
            raise UpstreamError(f"the upstream did not answer in time ({type(exc).__name__})", timeout=True) from None
        except httpx.HTTPError as exc:
            cause = exc.__context__
            if isinstance(cause, BodyTooLarge):
                raise cause from None
            raise UpstreamError(f"the upstream failed: {type(exc).__name__}: {exc}", timeout=False) from None
