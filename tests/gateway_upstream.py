"""An upstream API for the gateway's tests, run in its own process: ``python -m tests.gateway_upstream PORT``.

It knows nothing of payments. ``/echo`` answers what it received (method, path, query, headers,
client); ``/usage`` sets ``X-Usage`` to the ``units`` it was asked for; ``/stream`` and ``/events``
send their body in timed pieces; ``/fail`` answers 500, ``/slow`` sleeps ``?seconds``; ``/private``
answers 401 without ``Authorization: Bearer upstream-secret``; ``/upload`` counts the body it read
as it arrived; ``/calls`` counts the requests each path received; ``/openapi.json`` prices
``/weather/{city}`` with ``x-payment-info``.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

CALLS: Counter[str] = Counter()


async def echo(request: Request) -> JSONResponse:
    CALLS[request.url.path] += 1
    body = await request.body()
    return JSONResponse(
        {
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "headers": [[k, v] for k, v in request.headers.items()],
            "body": body.decode("latin-1"),
        },
        headers={"X-Upstream": "yes"},
    )


async def usage(request: Request) -> JSONResponse:
    CALLS[request.url.path] += 1
    units = request.query_params.get("units", "0")
    response = JSONResponse({"units": units}, headers={"X-Usage": units})
    response.set_cookie("a", "1")
    response.set_cookie("b", "2")
    return response


async def stream(request: Request) -> StreamingResponse:
    CALLS[request.url.path] += 1

    async def pieces() -> AsyncIterator[bytes]:
        for index in range(3):
            yield f"piece{index}\n".encode()
            await asyncio.sleep(0.05)

    return StreamingResponse(pieces(), media_type="text/plain")


async def events(request: Request) -> StreamingResponse:
    CALLS[request.url.path] += 1

    async def messages() -> AsyncIterator[bytes]:
        for index in range(3):
            yield f"event: tick\ndata: {index}\n\n".encode()
            await asyncio.sleep(0.3)

    return StreamingResponse(messages(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def fail(request: Request) -> JSONResponse:
    CALLS[request.url.path] += 1
    return JSONResponse({"boom": True}, status_code=500)


async def slow(request: Request) -> JSONResponse:
    CALLS[request.url.path] += 1
    await asyncio.sleep(float(request.query_params.get("seconds", "5")))
    return JSONResponse({"slow": True})


async def private(request: Request) -> JSONResponse:
    CALLS[request.url.path] += 1
    if request.headers.get("authorization") != "Bearer upstream-secret":
        return JSONResponse({"error": "unauthorized"}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
    return JSONResponse({"private": True})


async def upload(request: Request) -> JSONResponse:
    CALLS[request.url.path] += 1
    size = chunks = 0
    async for chunk in request.stream():
        size += len(chunk)
        chunks += 1 if chunk else 0
    return JSONResponse({"size": size, "chunks": chunks})


async def calls(request: Request) -> JSONResponse:
    return JSONResponse(dict(CALLS))


DOCUMENT = {
    "openapi": "3.1.0",
    "info": {"title": "Weather", "version": "1"},
    "paths": {
        "/weather/{city}": {
            "get": {
                "summary": "Today's weather",
                "x-payment-info": {
                    "price": {"mode": "fixed", "currency": "USD", "amount": "0.04"},
                    "protocols": [{"x402": {}}],
                },
                "responses": {"200": {"description": "OK"}},
            }
        },
        "/echo": {"get": {"summary": "free", "responses": {"200": {"description": "OK"}}}},
    },
}


async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(DOCUMENT)


async def missing(request: Request) -> Response:
    CALLS[request.url.path] += 1
    return JSONResponse({"error": "no such thing"}, status_code=404)


app = Starlette(
    routes=[
        Route("/echo", echo, methods=["GET", "POST", "PUT", "DELETE"]),
        Route("/free/{rest:path}", echo, methods=["GET", "POST"]),
        Route("/weather/{city}", echo),
        Route("/usage", usage, methods=["GET", "POST"]),
        Route("/stream", stream),
        Route("/events", events),
        Route("/fail", fail),
        Route("/slow", slow),
        Route("/private", private),
        Route("/upload", upload, methods=["POST"]),
        Route("/calls", calls),
        Route("/gone", missing),
        Route("/openapi.json", openapi),
    ]
)


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
