"""A JSON-RPC relay: one more address for a node, to try the platform's RPC failover locally.

``x402mw platform rpc-relay --upstream http://127.0.0.1:8545 --port 8546`` passes every JSON-RPC
POST to the upstream node and its answer back, unchanged. Two addresses of one node are two providers
of one chain to the platform; stopping the relay is a provider going away. ``GET /`` says where it
relays to (and answers only once the relay is up, so a script can wait for it).

``x402mw platform anvil`` serves its node through the same relay, started only once the node has our
token and contracts: its port answering means the chain is ready.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["relay_app"]

_MAX_BODY = 4 * 1024 * 1024  # a batch of signed transactions fits; a runaway body does not


def relay_app(upstream: str) -> Starlette:
    """An ASGI app passing JSON-RPC POSTs to ``upstream`` over one keep-alive client."""
    client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=5.0))

    async def where(request: Request) -> Response:
        return JSONResponse({"relayTo": upstream})

    async def relay(request: Request) -> Response:
        body = await request.body()
        if len(body) > _MAX_BODY:
            return _rpc_error(413, "request too large")
        try:
            answer = await client.post(upstream, content=body, headers={"Content-Type": "application/json"})
        except httpx.HTTPError as exc:
            return _rpc_error(502, f"upstream {upstream} failed: {type(exc).__name__}")
        return Response(answer.content, answer.status_code, media_type="application/json")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with client:
            yield

    routes = [Route("/", where, methods=["GET"]), Route("/", relay, methods=["POST"])]
    return Starlette(routes=routes, lifespan=lifespan)


def _rpc_error(status: int, message: str) -> Response:
    return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": message}}, status)
