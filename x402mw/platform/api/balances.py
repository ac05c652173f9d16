"""``GET /balances``: the merchant's money per (chain, currency), available and reserved by refunds."""

from __future__ import annotations

from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.payments import BalanceList
from x402mw.platform.services.ledger import list_balances

__all__ = ["routes"]


async def balances(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    async with platform_of(request).engine.connect() as conn:
        data = await list_balances(conn, caller.merchant_id, caller.livemode)
    return ModelResponse(BalanceList(data=data, has_more=False))


routes = [
    ApiRoute(
        "GET",
        "/balances",
        balances,
        Operation(
            id="listBalances",
            tag="Balances",
            summary="List balances",
            description="One per chain and coin the merchant has been paid in.",
            answer=BalanceList,
        ),
    )
]
