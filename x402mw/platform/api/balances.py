"""``GET /balances``: the merchant's money per (chain, currency), available and reserved by refunds."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.platform.api.auth import authenticate
from x402mw.platform.services.ledger import list_balances

__all__ = ["routes"]


async def balances(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    async with request.app.state.platform.engine.connect() as conn:
        data = await list_balances(conn, caller.merchant_id, caller.livemode)
    return JSONResponse({"object": "list", "data": data, "hasMore": False})


routes = [Route("/balances", balances, methods=["GET"])]
