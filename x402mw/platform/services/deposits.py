"""Deposit addresses and sweeping.

Every order paid by transfer gets its own deposit address, derived (BIP-32) from the platform's
deposit seed at ``m/44'/60'/0'/0/<n>``, where ``n`` is the id of its ``deposit_addresses`` row; an
order carrying ``metadata.fixed_transfer_customer_id`` reuses that customer's address. The address
is given out on first need (checkout, the sandbox), not at creation, so creating orders stays cheap.

Once an order succeeds, its deposit address is swept to the treasury gaslessly: the derived key signs
an EIP-3009 authorization and the relayer submits it. The authorization's nonce is derived from the
order, so sending a sweep twice can never move the money twice.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.evm.eip712 import TransferAuthorization, sign_transfer
from x402mw.evm.hd import DEPOSIT_ACCOUNT_PATH, derive_private_key
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import address_of
from x402mw.platform.chain.token import balance_of, transfer_calldata
from x402mw.platform.chain.transactions import RevertError
from x402mw.platform.db import tables
from x402mw.platform.services.chains import ChainHandle
from x402mw.platform.services.payment_intents import FIXED_TRANSFER_KEY

AUTHORIZATION_LIFETIME = 3600


class DepositKeys:
    """The deposit seed's keys and addresses by child index."""

    def __init__(self, seed: bytes) -> None:
        self._seed = seed

    def __repr__(self) -> str:
        return "DepositKeys(<seed hidden>)"

    @functools.lru_cache(maxsize=4096)  # noqa: B019  (one instance per platform)
    def private_key(self, index: int) -> bytes:
        return derive_private_key(self._seed, f"{DEPOSIT_ACCOUNT_PATH}/{index}")

    def address(self, index: int) -> str:
        return address_of(self.private_key(index))


async def assign_deposit_address(engine: AsyncEngine, keys: DepositKeys, order: Mapping[Any, Any]) -> str:
    """The order's deposit address, giving it one if it has none yet."""
    if order["deposit_address"]:
        return str(order["deposit_address"])
    addresses, intents = tables.deposit_addresses, tables.payment_intents
    customer = (order["order_metadata"] or {}).get(FIXED_TRANSFER_KEY) or None
    scope = (
        (addresses.c.merchant_id == order["merchant_id"])
        & (addresses.c.livemode == order["livemode"])
        & (addresses.c.customer_key == customer)
    )
    address: str | None = None
    for _ in range(2):  # a concurrent first use of the customer's address wins; then take that one
        try:
            async with engine.begin() as conn:
                if customer is not None:
                    address = await conn.scalar(select(addresses.c.address).where(scope))
                if address is None:
                    inserted = await conn.execute(
                        addresses.insert(),
                        dict(
                            merchant_id=order["merchant_id"],
                            livemode=order["livemode"],
                            customer_key=customer,
                            created_at=order["updated_at"],
                        ),
                    )
                    index = int(inserted.inserted_primary_key[0])  # type: ignore[index]
                    address = keys.address(index)
                    await conn.execute(update(addresses).where(addresses.c.id == index).values(address=address))
                await conn.execute(
                    update(intents)
                    .where(intents.c.id == order["id"], intents.c.deposit_address.is_(None))
                    .values(deposit_address=address)
                )
                current = await conn.scalar(select(intents.c.deposit_address).where(intents.c.id == order["id"]))
            return str(current)
        except IntegrityError:
            address = None
    raise RuntimeError("could not assign a deposit address")  # pragma: no cover


def authorization_call(
    chain: ChainHandle, token: str, signer_key: bytes, to: str, value: int, nonce_seed: bytes
) -> tuple[bytes, bytes, int]:
    """Calldata for ``transferWithAuthorization`` of ``value`` from ``signer_key``'s address to ``to``,
    with the nonce ``keccak256(nonce_seed)``: the same seed always gives the same authorization, which
    the token accepts once. Returns (calldata, nonce, validBefore)."""
    domain = chain.domain(token)
    if domain is None:
        raise ValueError(f"{token} is not an EIP-3009 token on chain {chain.chain_id}")
    nonce = keccak256(nonce_seed)
    auth = TransferAuthorization(
        from_address=address_of(signer_key),
        to=to,
        value=value,
        valid_after=0,
        valid_before=int(time.time()) + AUTHORIZATION_LIFETIME,
        nonce=nonce,
    )
    signature = sign_transfer(signer_key, domain, auth)
    return transfer_calldata(auth, signature), nonce, auth.valid_before


_sweeping: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)


async def sweep_order(
    engine: AsyncEngine, chain: ChainHandle, keys: DepositKeys, treasury: str, order: Mapping[Any, Any], now: datetime
) -> bool:
    """Move what the order's deposit address holds of its currency to the treasury; True once swept.

    Sweeps of one order take turns in this process (the watcher's and a refund's); across processes
    the authorization's nonce keeps a duplicate from moving anything, and its sender tries later."""
    asset = chain.asset(str(order["paid_currency"]))
    address = order["deposit_address"]
    if asset is None or not address:
        return False
    lock = _sweeping[str(order["id"])]
    try:
        async with lock:
            return await _sweep(engine, chain, keys, treasury, order, now, asset.address, str(address))
    finally:
        if not lock.locked() and _sweeping.get(str(order["id"])) is lock:
            del _sweeping[str(order["id"])]


async def _sweep(
    engine: AsyncEngine,
    chain: ChainHandle,
    keys: DepositKeys,
    treasury: str,
    order: Mapping[Any, Any],
    now: datetime,
    token: str,
    address: str,
) -> bool:
    intents = tables.payment_intents
    async with engine.connect() as conn:
        if await conn.scalar(select(intents.c.swept_at).where(intents.c.id == order["id"])) is not None:
            return True
    index = await _index_of(engine, address)
    held = await balance_of(chain.rpc, token, address)
    if held:
        seed = b"x402mw sweep:" + str(order["id"]).encode()
        data, _, valid_before = authorization_call(chain, token, keys.private_key(index), treasury, held, seed)
        try:
            await chain.relayer.simulate(token, data)
        except RevertError:
            return False  # another process's sweep of this order is on its way
        tx = await chain.relayer.send(token, data, valid_until=valid_before)
        receipt = await chain.wait_for(tx)
        if receipt.status != 1:
            return False
    async with engine.begin() as conn:
        await conn.execute(update(intents).where(intents.c.id == order["id"]).values(swept_at=now))
    return True


async def _index_of(engine: AsyncEngine, address: str) -> int:
    addresses = tables.deposit_addresses
    async with engine.connect() as conn:
        index = await conn.scalar(select(addresses.c.id).where(addresses.c.address == address))
    if index is None:
        raise LookupError(f"{address} is not a deposit address")
    return int(index)
