"""Finding the order a checkout request names, and looking for its payment on the chains now."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from x402mw.platform.checkout.orders import find_order, parse_payment_id, payment_options
from x402mw.platform.http.errors import HttpError
from x402mw.platform.services.chains import ChainHandle

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

logger = logging.getLogger("x402mw.platform.checkout")


async def load_order(platform: Platform, raw_id: str) -> Mapping[Any, Any]:
    """The order a checkout path names; 404 ``resource_missing`` for an unknown or malformed id."""
    payment_id = parse_payment_id(raw_id)
    order = None
    if payment_id is not None:
        async with platform.engine.connect() as conn:
            order = await find_order(conn, payment_id)
    if order is None:
        raise HttpError.missing("payment intent", raw_id)
    return order


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
