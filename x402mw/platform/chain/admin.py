"""Occasional writes from keys that no relayer owns (deploying contracts, minting, funding): each
is sent, waited for, and checked, one at a time per account.

>>> receipt = await transact(rpc, minter_key, token, calldata)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import weakref

from eth_account import Account

from x402mw.platform.chain.relayer import Relayer
from x402mw.platform.chain.rpc import JsonRpc
from x402mw.platform.chain.transactions import RevertError, TxReceipt

# Administrative writes from one account over one connection run one at a time: see transact().
_write_locks: weakref.WeakKeyDictionary[JsonRpc, dict[str, asyncio.Lock]] = weakref.WeakKeyDictionary()


async def transact(
    rpc: JsonRpc, private_key: bytes, to: str | None, data: bytes, *, gas: int = 120_000, value: int = 0
) -> TxReceipt:
    """Send one transaction from ``private_key``, wait for it, and raise :class:`RevertError` if it
    reverts (with the reason, when a call made beforehand can tell it).

    For occasional writes from keys that no :class:`Relayer` owns (deploying, minting, funding):
    each takes a fresh nonce from the node, under a per-account lock.
    """
    address = Account.from_key(private_key).address
    lock = _write_locks.setdefault(rpc, {}).setdefault(address, asyncio.Lock())
    async with lock:
        chain_id = int(await rpc.request("eth_chainId", []), 16)
        sender = Relayer(rpc, private_key, chain_id=chain_id)
        try:
            await sender.start()
            if to is not None and data:
                await sender.simulate(to, data)
            receipt = await sender.wait_for_receipt(await sender.send(to, data, gas=gas, value=value))
        finally:
            await sender.aclose()
    if receipt.status != 1:
        raise RevertError(f"transaction {receipt.transaction_hash} reverted")
    return receipt
