"""``/sandbox``: test-mode helpers, refused for live keys. ``POST /sandbox/faucet`` mints test coins on
the dev chain or on a local node whose token minter the platform holds (anvil)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.errors import PriceError
from x402mw.evm.keys import is_address, to_checksum_address
from x402mw.platform.api.auth import authenticate
from x402mw.platform.api.bodies import parse_body, read_json
from x402mw.platform.api.errors import ApiError
from x402mw.platform.chain.token import mint
from x402mw.protocol.prices import to_atomic

__all__ = ["routes"]

MAX_FAUCET_MINOR = 1_000_000 * 10**6


class FaucetBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str
    currency: Literal["USDC", "EURC"]
    address: str
    amount: str

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        if not is_address(value):
            raise ValueError("must be a 0x-prefixed 20-byte EVM address")
        return to_checksum_address(value)


async def faucet(request: Request) -> JSONResponse:
    caller = await authenticate(request)
    if caller.livemode:
        raise ApiError(400, "livemode_not_allowed", "The sandbox is for test keys only")
    body = parse_body(FaucetBody, await read_json(request))
    platform = request.app.state.platform
    chain = platform.chains.by_network(body.network)
    if chain is None or chain.livemode:
        raise ApiError(400, "unsupported_chain", f"no test network {body.network} here", param="network")
    asset = chain.asset(body.currency)
    if asset is None:
        raise ApiError(400, "unsupported_currency", f"{body.currency} is not on {body.network}", param="currency")
    try:
        amount = to_atomic(body.amount, decimals=asset.decimals, symbol=asset.symbol)
    except PriceError as exc:
        raise ApiError(400, "parameter_invalid", f"Invalid amount: {exc.message}", param="amount") from None
    if amount > MAX_FAUCET_MINOR:
        raise ApiError(400, "parameter_invalid", "the faucet gives at most 1,000,000 per call", param="amount")
    if chain.dev is not None:
        tx = await chain.dev.mint(asset.symbol, body.address, amount)
    elif chain.minter_key is not None:
        tx = await mint(chain.rpc, chain.minter_key, asset.address, body.address, amount)
    else:
        raise ApiError(400, "faucet_unavailable", f"the platform cannot mint on {body.network}", param="network")
    return JSONResponse(
        {
            "object": "faucet_transfer",
            "network": body.network,
            "currency": asset.symbol,
            "address": body.address,
            "amount": body.amount,
            "transaction": tx,
        }
    )


routes = [Route("/sandbox/faucet", faucet, methods=["POST"])]
