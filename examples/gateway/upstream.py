"""An existing API that knows nothing of payments, for ``x402mw gateway`` to sell (see gateway.toml).

    python examples/gateway/upstream.py --port 9000

``GET /weather/{city}`` (sold per request by the gateway), ``POST /summarize`` (sold by use: it
reports the words it read in ``X-Usage``), ``GET /ticks`` (server-sent events), ``GET /health``
(free: the gateway passes it through).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route


async def weather(request: Request) -> JSONResponse:
    return JSONResponse({"city": request.path_params["city"], "forecast": "sunny"})


async def summarize(request: Request) -> JSONResponse:
    text = (await request.body()).decode("utf-8", "replace")
    words = text.split()
    return JSONResponse({"summary": " ".join(words[:5])}, headers={"X-Usage": str(len(words))})


async def ticks(request: Request) -> StreamingResponse:
    async def events() -> AsyncIterator[bytes]:
        for index in range(3):
            yield f"data: tick {index}\n\n".encode()
            await asyncio.sleep(0.2)

    return StreamingResponse(events(), media_type="text/event-stream")


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


app = Starlette(
    routes=[
        Route("/weather/{city}", weather),
        Route("/summarize", summarize, methods=["POST"]),
        Route("/ticks", ticks),
        Route("/health", health),
    ]
)

if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=9000)
    uvicorn.run(app, host="127.0.0.1", port=parser.parse_args().port, log_level="warning")
