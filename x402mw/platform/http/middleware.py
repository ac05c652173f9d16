"""The base of the platform's pure ASGI middleware that act on HTTP requests only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
App = Callable[..., Awaitable[None]]


class HttpMiddleware:
    """Pure ASGI: an HTTP request goes to `handle`; anything else (lifespan, websockets) passes
    straight to ``app``, untouched."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    async def handle(self, scope: Scope, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        """Answer (or pass on to ``app``) one HTTP request."""
        raise NotImplementedError
