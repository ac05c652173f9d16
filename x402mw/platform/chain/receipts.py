"""Waiting for receipts: one poller per relayer asks the node for every awaited transaction in a
single batch.

A wait is for a *list* of transaction hashes, any of which may be mined: the relayer replaces a
transaction stuck at a low fee, or sends a call again under a new nonce, and the caller waits on
for whichever of them lands (the list is the relayer's own and grows as it does so). A wait the
relayer gives up on (`ReceiptPoller.fail`) ends with that error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from x402mw.platform.chain.rpc import JsonRpc
from x402mw.platform.chain.transactions import TxReceipt

logger = logging.getLogger(__name__)

_POLL_MIN = 0.01
_POLL_MAX = 1.0
_BATCH_LIMIT = 256


@dataclass(eq=False)
class _Waiter:
    hashes: list[str]  # shared with the relayer's record of the transaction: it may grow
    confirmations: int
    future: asyncio.Future[TxReceipt]


class ReceiptPoller:
    """Resolves waits as their transactions are mined (and confirmed): the head is read on every
    poll, and the receipts of every awaited hash when it moved, else only of waits that are new.
    Polls come quickly after a wait starts and slow down to once a second while nothing changes.
    ``on_mined`` hears of every receipt found."""

    def __init__(
        self, rpc: JsonRpc, *, name: str = "x402mw-receipts", on_mined: Callable[[TxReceipt], None] | None = None
    ) -> None:
        self._rpc = rpc
        self._on_mined = on_mined
        self._name = name
        self._waiters: set[_Waiter] = set()
        self._fresh: set[_Waiter] = set()  # started since the last look at receipts
        self._head = -1
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def wait(self, hashes: list[str], *, confirmations: int = 0, timeout: float = 60.0) -> TxReceipt:
        """The receipt of whichever of ``hashes`` is mined (``confirmations`` blocks deep), whatever
        its status; `TimeoutError` after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(hashes, confirmations, loop.create_future())
        self._waiters.add(waiter)
        self._fresh.add(waiter)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._poll(), name=self._name)
        try:
            async with asyncio.timeout(timeout):
                return await waiter.future
        finally:
            self._waiters.discard(waiter)
            self._fresh.discard(waiter)

    def fail(self, hashes: Iterable[str], error: Exception) -> None:
        """End every wait for ``hashes`` with ``error``."""
        gone = set(hashes)
        for waiter in list(self._waiters):
            if not waiter.future.done() and gone.intersection(waiter.hashes):
                waiter.future.set_exception(error)

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for waiter in self._waiters:
            waiter.future.cancel()
        self._waiters.clear()

    async def _poll(self) -> None:
        interval = _POLL_MIN
        while self._waiters:
            self._wake.clear()
            try:
                await self._poll_once()
            except Exception:
                logger.warning("%s: receipt poll failed", self._name, exc_info=True)
            if not self._waiters:
                break
            try:
                async with asyncio.timeout(interval):
                    await self._wake.wait()
            except TimeoutError:
                interval = min(interval * 1.5, _POLL_MAX)
            else:
                interval = _POLL_MIN

    async def _poll_once(self) -> None:
        head = int(await self._rpc.request("eth_blockNumber", []), 16)
        moved, self._head = head != self._head, head
        looking = list(self._waiters) if moved else [w for w in self._fresh if w in self._waiters]
        self._fresh.clear()  # those still awaited are in looking
        hashes = list(dict.fromkeys(h for waiter in looking for h in waiter.hashes))
        found: dict[str, Any] = {}
        for start in range(0, len(hashes), _BATCH_LIMIT):
            chunk = hashes[start : start + _BATCH_LIMIT]
            answers = await self._rpc.batch([("eth_getTransactionReceipt", [h]) for h in chunk])
            found.update(zip(chunk, answers, strict=True))
        for waiter in looking:
            if waiter.future.done():
                continue
            for tx_hash in waiter.hashes:
                receipt = found.get(tx_hash)
                if not receipt or receipt.get("blockNumber") is None:
                    continue
                mined = TxReceipt.from_json(receipt)
                if self._on_mined is not None:
                    self._on_mined(mined)
                if waiter.confirmations <= 0 or head >= mined.block_number + waiter.confirmations:
                    waiter.future.set_result(mined)
                break
