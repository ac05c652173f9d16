"""`TracingMiddleware`: a server span per HTTP request (pure ASGI), a child of the request's W3C
``traceparent``, made the current span so that what the request does (a settlement, the relayer's
send and receipt) joins the caller's trace. The app has it only while tracing is on
(`x402mw.tracing`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.routing import Route

from x402mw import tracing

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class TracingMiddleware:
    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not tracing.enabled:
            await self.app(scope, receive, send)
            return
        traceparent = next((v.decode("latin-1") for n, v in scope["headers"] if n == b"traceparent"), None)
        method = scope["method"]
        status = 500

        async def send_noting_status(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with tracing.span(method, kind="server", parent=traceparent, method=method, path=scope["path"]) as span:
            try:
                await self.app(scope, receive, send_noting_status)
            finally:
                route = scope.get("route")
                if isinstance(route, Route):
                    span.rename(f"{method} {scope.get('root_path', '')}{route.path}")
                    span.set(route=route.path)
                span.set(status_code=status)
                if status >= 500:
                    span.failed(f"answered {status}")
