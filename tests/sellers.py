"""Real seller apps, one per framework, each selling ``/weather`` through one agent endpoint.

Each factory returns an ASGI app; `asgi_transport` reaches it in-process, running its lifespan as a
server does. The app's payment middleware talks to the real platform over loopback HTTP.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from x402mw.adapters import asgi as asgi_adapter
from x402mw.adapters.starlette import PaymentMiddleware, paid


def _body(settlement: Any) -> dict[str, Any]:
    return {
        "forecast": "sunny",
        "tx": settlement.transaction,
        "payer": settlement.payer,
        "amount": settlement.amount,
    }


def starlette_app(api_key: str, platform_url: str, endpoint_id: str, **options: Any) -> Starlette:
    @paid(endpoint_id, amount=options.pop("amount", None))
    async def weather(request: Request) -> JSONResponse:
        response = JSONResponse(_body(request.state.x402))
        response.set_cookie("a", "1")
        response.set_cookie("b", "2")
        return response

    @paid(endpoint_id)
    async def stream(request: Request) -> StreamingResponse:
        async def chunks() -> Any:
            for index in range(3):
                yield f"chunk{index}\n".encode()

        return StreamingResponse(chunks(), media_type="text/plain")

    async def free(request: Request) -> JSONResponse:
        return JSONResponse({"free": True})

    return Starlette(
        routes=[Route("/weather", weather), Route("/stream", stream), Route("/free", free)],
        middleware=[Middleware(PaymentMiddleware, api_key=api_key, platform_url=platform_url, **options)],
    )


def fastapi_app(
    api_key: str,
    platform_url: str,
    endpoint_id: str,
    *,
    path: str = "/weather",
    respond: Callable[[Any], dict[str, Any]] = _body,
    **options: Any,
) -> Any:
    """FastAPI selling ``path``, answering the JSON ``respond`` makes of the payment."""
    from fastapi import FastAPI

    app = FastAPI()
    app.add_middleware(PaymentMiddleware, api_key=api_key, platform_url=platform_url, **options)

    @app.get(path)
    @paid(endpoint_id)
    async def weather(request: Request) -> dict[str, Any]:
        return respond(request.state.x402)

    return app


def plain_asgi_app(
    api_key: str,
    platform_url: str,
    endpoint_id: str,
    *,
    path: str = "/weather",
    respond: Callable[[Any], dict[str, Any]] = _body,
    **options: Any,
) -> Any:
    """A bare ASGI app behind the ASGI middleware, selling ``path`` as `fastapi_app` does."""

    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        import json

        if scope["type"] == "lifespan":
            while (await receive())["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = json.dumps(respond(scope["state"]["x402"])).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return asgi_adapter.PaymentMiddleware(
        app, api_key=api_key, platform_url=platform_url, routes={f"GET {path}": endpoint_id}, **options
    )


ASYNC_SELLERS: dict[str, Callable[..., Any]] = {
    "starlette": starlette_app,
    "fastapi": fastapi_app,
    "asgi": plain_asgi_app,
}


Message = dict[str, Any]


@contextlib.asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """Run ``app``'s ASGI lifespan as a server does: startup before the block, shutdown after it (the
    payment middleware runs its background work in between, and closes its connections at the end)."""
    to_app, app_receives = anyio.create_memory_object_stream[Message](1)
    app_sends, from_app = anyio.create_memory_object_stream[Message](1)
    async with to_app, app_receives, app_sends, from_app, anyio.create_task_group() as group:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        group.start_soon(app, scope, app_receives.receive, app_sends.send)
        await to_app.send({"type": "lifespan.startup"})
        started = await from_app.receive()
        assert started["type"] == "lifespan.startup.complete", started
        try:
            yield
        finally:
            await to_app.send({"type": "lifespan.shutdown"})
            stopped = await from_app.receive()
            assert stopped["type"] == "lifespan.shutdown.complete", stopped


class _ServedTransport(httpx.ASGITransport):
    """httpx's in-process ASGI transport that runs the app's lifespan while the client is open
    (``async with httpx.AsyncClient(transport=...)``), as a server runs it while it serves."""

    _running: contextlib.AbstractAsyncContextManager[None] | None = None

    async def __aenter__(self) -> _ServedTransport:
        running = lifespan(self.app)
        await running.__aenter__()
        self._running = running
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        running, self._running = self._running, None
        if running is not None:
            await running.__aexit__(exc_type, exc_value, traceback)
        await self.aclose()


def asgi_transport(app: Any) -> httpx.ASGITransport:
    return _ServedTransport(app=app)
