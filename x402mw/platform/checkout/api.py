"""The public checkout API (spec 4.2), under ``/checkout/v1``: no API key, the order's id is the key.

- ``GET  /payment-intents/:paymentId``: what checkout may show of the order;
- ``POST /payment-intents/:paymentId/attempts`` ``{network, currency, method}``: how to pay it;
- ``POST /payment-intents/:paymentId/transfer-status``: look for money at the deposit address now;
- ``POST /payment-intents/:paymentId/sync`` ``{txHash, network}``: the buyer's wallet sent a transfer.

``:paymentId`` is the bare UUID or ``pi_<uuid>``. Errors use the platform's envelope; an unknown id is
404 ``resource_missing``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.routing import Route

from x402mw.platform.api.bodies import parse_body, read_json
from x402mw.platform.api.errors import ApiError
from x402mw.platform.api.responses import ModelResponse
from x402mw.platform.api.state import platform_of
from x402mw.platform.checkout.attempts import prepare_attempt
from x402mw.platform.checkout.orders import find_order, parse_payment_id, payment_options, public_order_of
from x402mw.platform.services.chains import ChainHandle
from x402mw.platform.services.payment_intents import PaymentIntentError

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

__all__ = ["AttemptBody", "SyncBody", "TransferStatusBody", "routes"]

logger = logging.getLogger("x402mw.platform.checkout")
SYNC_WAIT_SECONDS = 10.0  # how long sync waits for the buyer's transaction to be mined


class AttemptBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: str = Field(max_length=64)
    currency: Literal["USDC", "USDT", "EURC"]
    method: Literal["transfer", "wallet"]


class TransferStatusBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SyncBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    txHash: str = Field(pattern=r"^0x[0-9a-fA-F]{64}$")
    network: str = Field(max_length=64)


async def load_order(platform: Platform, raw_id: str) -> Mapping[Any, Any]:
    """The order a checkout path names; 404 ``resource_missing`` for an unknown or malformed id."""
    payment_id = parse_payment_id(raw_id)
    order = None
    if payment_id is not None:
        async with platform.engine.connect() as conn:
            order = await find_order(conn, payment_id)
    if order is None:
        raise ApiError.missing("payment intent", raw_id)
    return order


async def _answer(platform: Platform, payment_id: str) -> ModelResponse:
    order = await load_order(platform, payment_id)
    return ModelResponse(public_order_of(order, platform.chains))


async def retrieve(request: Request) -> ModelResponse:
    return await _answer(platform_of(request), request.path_params["payment_id"])


async def attempt(request: Request) -> ModelResponse:
    platform = platform_of(request)
    order = await load_order(platform, request.path_params["payment_id"])
    body = parse_body(AttemptBody, await read_json(request))
    try:
        answer = await prepare_attempt(
            platform.engine,
            platform.deposit_keys,
            platform.chains,
            order,
            network=body.network,
            currency=body.currency,
            method=body.method,
            now=platform.clock.now(),
        )
    except PaymentIntentError as exc:
        raise ApiError(exc.status, exc.code, exc.message, param=exc.param) from None
    return ModelResponse(answer)


async def look_for_payment(platform: Platform, order: Mapping[Any, Any], chains: list[ChainHandle]) -> None:
    """Run the deposit watcher now for ``chains``: read their new blocks, then confirm what is due.

    A chain that cannot be read is logged and left to the worker, which tries again within seconds:
    the buyer's status check still answers with what the platform knows."""
    if not order["deposit_address"]:
        return  # no address given out yet: nothing can have arrived
    try:
        for chain in chains:
            await platform.watcher.scan(chain)
        await platform.watcher.confirm()
    except Exception:
        logger.exception("checkout: looking for the payment of %s failed", order["id"])


def order_chains(platform: Platform, order: Mapping[Any, Any]) -> list[ChainHandle]:
    """The chains money for ``order`` can arrive on: the one it was paid on, else every one it offers."""
    seen: dict[int, ChainHandle] = {}
    for option in payment_options(platform.chains, order):
        seen.setdefault(option.chain.chain_id, option.chain)
    return list(seen.values())


async def transfer_status(request: Request) -> ModelResponse:
    platform = platform_of(request)
    raw_id = request.path_params["payment_id"]
    order = await load_order(platform, raw_id)
    parse_body(TransferStatusBody, await read_json(request, allow_empty=True))
    await look_for_payment(platform, order, order_chains(platform, order))
    return await _answer(platform, raw_id)


async def sync(request: Request) -> ModelResponse:
    platform = platform_of(request)
    raw_id = request.path_params["payment_id"]
    order = await load_order(platform, raw_id)
    body = parse_body(SyncBody, await read_json(request))
    if platform.chains.by_network(body.network) is None:
        raise ApiError(
            400, "unsupported_chain", f"This platform takes no payments on {body.network[:80]!r}", param="network"
        )
    chain = next((c for c in order_chains(platform, order) if c.network.caip2 == body.network), None)
    if chain is None:  # a network of the platform, but not one this order can be paid on
        raise ApiError(
            409, "unsupported_chain", f"This payment cannot be made on {body.network[:80]!r}", param="network"
        )
    with contextlib.suppress(TimeoutError):  # not mined yet: answer what is known; polling keeps looking
        await chain.relayer.wait_for_receipt(body.txHash.lower(), timeout=SYNC_WAIT_SECONDS)
    await look_for_payment(platform, order, [chain])
    return await _answer(platform, raw_id)


routes = [
    Route("/payment-intents/{payment_id}", retrieve, methods=["GET"], name="checkout-payment-intent"),
    Route("/payment-intents/{payment_id}/attempts", attempt, methods=["POST"], name="checkout-attempts"),
    Route(
        "/payment-intents/{payment_id}/transfer-status",
        transfer_status,
        methods=["POST"],
        name="checkout-transfer-status",
    ),
    Route("/payment-intents/{payment_id}/sync", sync, methods=["POST"], name="checkout-sync"),
]
