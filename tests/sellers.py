"""Real seller apps, one per framework, each selling ``/weather`` through one agent endpoint.

Each factory returns an ``httpx`` transport that reaches the app in-process; the app's payment
middleware talks to the real platform over loopback HTTP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


def fastapi_app(api_key: str, platform_url: str, endpoint_id: str, **options: Any) -> Any:
    from fastapi import FastAPI

    app = FastAPI()
    app.add_middleware(PaymentMiddleware, api_key=api_key, platform_url=platform_url, **options)

    @app.get("/weather")
    @paid(endpoint_id)
    async def weather(request: Request) -> dict[str, Any]:
        return _body(request.state.x402)

    return app


def plain_asgi_app(api_key: str, platform_url: str, endpoint_id: str, **options: Any) -> Any:
    async def app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        import json

        settlement = scope["state"]["x402"]
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": json.dumps(_body(settlement)).encode()})

    return asgi_adapter.PaymentMiddleware(
        app, api_key=api_key, platform_url=platform_url, routes={"GET /weather": endpoint_id}, **options
    )


ASYNC_SELLERS: dict[str, Callable[..., Any]] = {
    "starlette": starlette_app,
    "fastapi": fastapi_app,
    "asgi": plain_asgi_app,
}


def asgi_transport(app: Any) -> httpx.ASGITransport:
    return httpx.ASGITransport(app=app)
