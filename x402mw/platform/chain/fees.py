"""The going fees of a chain, as its node tells them."""

from __future__ import annotations

import asyncio
import time

from x402mw.platform.chain.rpc import JsonRpc, RpcError
from x402mw.platform.chain.transactions import Fees

FEE_TTL = 15.0
"""Seconds a reading of the fees is used before the node is asked again."""


class FeeOracle:
    """Reads the base fee of the latest block and the node's suggested tip, at most every `FEE_TTL`
    seconds. A transaction offers twice the base fee plus the tip: room for the base fee to rise for
    a few blocks (it moves at most 12.5 % a block) before the transaction is priced out."""

    def __init__(self, rpc: JsonRpc, *, ttl: float = FEE_TTL) -> None:
        self._rpc = rpc
        self._ttl = ttl
        self._fees: Fees | None = None
        self._read_at = 0.0
        self._lock = asyncio.Lock()

    async def going(self) -> Fees:
        """The fees to offer now (read from the node when the last reading is stale)."""
        fees = self._fees
        if fees is not None and time.monotonic() - self._read_at <= self._ttl:
            return fees
        return await self.refresh(stale_after=self._ttl)

    async def refresh(self, *, stale_after: float = 0.0) -> Fees:
        """Read the fees from the node (unless another caller did within ``stale_after`` seconds)."""
        async with self._lock:
            if self._fees is not None and time.monotonic() - self._read_at <= stale_after:
                return self._fees
            block, price = await self._rpc.batch([("eth_getBlockByNumber", ["latest", False]), ("eth_gasPrice", [])])
            base_fee = int(block.get("baseFeePerGas") or "0x0", 16)
            try:
                tip = int(await self._rpc.request("eth_maxPriorityFeePerGas", []), 16)
            except RpcError:  # a node without the method: the gas price less the base fee
                tip = max(int(price, 16) - base_fee, 0)
            tip = max(tip, 1)
            self._fees = Fees(2 * base_fee + tip, tip)
            self._read_at = time.monotonic()
            return self._fees
