"""Group commit for hot paths: concurrent writes (or calls) in one process share one round trip.

A `Coalescer` takes items from concurrent callers and hands them to its ``flush`` in lists, one
flush at a time (or ``flushes`` at a time). A lone caller is written on the event loop's next turn,
with whatever else arrived in this one; callers that arrive while a flush runs are written together
by the next one. Under load each flush thus carries everything that queued during
the previous one, and what a write costs apart from its rows (a pooled connection, the round trips,
the transaction) is paid once per batch instead of once per request.

``flush`` must be all or nothing (one statement, or one transaction) and answer one result per
item, in order. When it raises for a batch of several items, they are flushed again one by one, so
a bad item fails its own caller only; unless the database could not be reached (`unreachable`),
when every caller gets the error at once rather than each waiting out its own timeout.

::

    claims = Coalescer(insert_claims)     # async def insert_claims(rows: list[dict]) -> list[bool]
    won = await claims.submit(row)
    pending = claims.enqueue(row)         # queued at once; await the future later
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import httpx
from sqlalchemy import exc as sa_exc

T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[T, R]):
    """``flushes`` bounds the flushes running at once (1: one at a time). Above 1, items that arrive
    while every flush runs wait for the first to finish; use it where the other end serves requests
    in parallel (a node's JSON-RPC server) and a batch's items are answered only when all are done."""

    def __init__(
        self, flush: Callable[[list[T]], Awaitable[list[R]]], *, max_batch: int = 256, flushes: int = 1
    ) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._flushes = flushes
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._drains: set[asyncio.Task[None]] = set()

    async def submit(self, item: T) -> R:
        """Write ``item`` with whatever else is waiting; its result, or the exception of its flush."""
        return await self.enqueue(item)

    def enqueue(self, item: T) -> asyncio.Future[R]:
        """Queue ``item`` now, without waiting for a turn of the event loop; the future of its result.
        A caller that gives up on it cancels the future (the item may be written all the same)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._queue.append((item, future))
        if len(self._drains) < self._flushes:
            self._drains.add(loop.create_task(self._drain_queue()))
        return future

    async def _drain_queue(self) -> None:
        # Started by a submit, it first runs on the loop's next turn: what else was submitted in this
        # turn joins the first batch.
        batch: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._queue:
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                await self._write(batch)
                batch = []
        finally:
            # Leave the set at once (not in a done callback): a submit in between would count this
            # task as still flushing and leave its item waiting for nobody.
            current = asyncio.current_task()
            if current is not None:
                self._drains.discard(current)
            for _item, future in batch:  # left unsettled only if this task was cancelled
                future.cancel()
            if not self._drains:  # no other flush will take what queued meanwhile
                for _item, future in self._queue:
                    future.cancel()
                self._queue.clear()

    async def _write(self, batch: list[tuple[T, asyncio.Future[R]]]) -> Exception | None:
        """Flush ``batch`` and settle its callers; the error that failed it, if any."""
        try:
            results = await self._flush([item for item, _future in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"flush answered {len(results)} results for {len(batch)} items")
        except Exception as exc:
            if len(batch) > 1 and not unreachable(exc):
                for index, one in enumerate(batch):  # nothing of the batch was written: find the bad item
                    failed = await self._write([one])
                    if failed is not None and unreachable(failed):  # the database went away meanwhile
                        for _item, future in batch[index + 1 :]:
                            _settle(future, failed)
                        break
                return exc
            for _item, future in batch:
                _settle(future, exc)
            return exc
        for (_item, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
        return None


def _settle(future: asyncio.Future[R], exc: Exception) -> None:
    if not future.done():
        future.set_exception(exc)


# SQLSTATEs of a server that cannot serve now (class 08, connection exceptions; 53300, too many
# connections; 57P01-57P03, shutting down or starting up), whatever the statement.
_SERVER_UNAVAILABLE = frozenset({"08000", "08001", "08003", "08004", "08006", "53300", "57P01", "57P02", "57P03"})


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database or the node, or the way to it, failed (no connection, a
    pool or network timeout, a dropped connection) rather than something one item caused."""
    if isinstance(exc, sa_exc.DBAPIError) and (
        exc.connection_invalidated or getattr(exc.orig, "sqlstate", None) in _SERVER_UNAVAILABLE
    ):
        return True
    return isinstance(
        exc,
        (
            sa_exc.OperationalError,
            sa_exc.InterfaceError,
            sa_exc.TimeoutError,
            httpx.TransportError,  # a JSON-RPC node
            OSError,
            TimeoutError,
        ),
    )
