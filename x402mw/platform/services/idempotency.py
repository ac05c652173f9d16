"""The store behind ``Idempotency-Key`` (`x402mw.platform.api.idempotency` has the semantics).

A key's row is claimed ``in_flight`` when its first request starts and becomes ``done`` with the
response (status, headers, body) that request answered. Claims and stores of concurrent requests
are written in batches (`Coalescer`), each on a connection kept for it (`HeldConnection`).

An endpoint that writes in a transaction of its own may store its response in that transaction
(`KeySlot.answer` gives the row to write with `STORE`): the key is then done exactly when the
write is, and the request costs one round trip to the database less.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.batching import Coalescer
from x402mw.platform.db import tables
from x402mw.platform.db.engine import HeldConnection

__all__ = ["DONE", "IN_FLIGHT", "STORE", "IdempotencyKeys", "KeySlot"]

IN_FLIGHT, DONE = "in_flight", "done"

_KEYS = tables.idempotency_keys
STORE = update(_KEYS).where(_KEYS.c.id == bindparam("row_id"))
"""Marks a key done with its response; executed with `KeySlot.answer` rows."""


@dataclass
class KeySlot:
    """The key a request holds while it runs (``scope["x402mw.idempotency"]``)."""

    row_id: str
    stored: bool = False  # set once the response is stored (by the endpoint or the middleware)

    def answer(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> dict[str, Any]:
        """The `STORE` parameters that record this response as the key's answer."""
        pairs = [[name.decode("latin-1"), value.decode("latin-1")] for name, value in headers]
        return {
            "row_id": self.row_id,
            "status": DONE,
            "response_status": status,
            "response_headers": pairs,
            "response_body": body,
        }


class IdempotencyKeys:
    """The claims and stores of one engine, each written in batches: under load, one round trip
    claims (or stores) the keys of every request that arrived meanwhile."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        insert_for = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
        self._claim = insert_for(_KEYS).on_conflict_do_nothing().returning(_KEYS.c.id)
        self._claim_conn, self._store_conn = HeldConnection(engine), HeldConnection(engine)
        self._claims: Coalescer[dict[str, Any], bool] = Coalescer(self._insert_claims)
        self._stores: Coalescer[dict[str, Any], None] = Coalescer(self._write_stores)

    async def claim(self, row: dict[str, Any]) -> bool:
        """Insert the in-flight ``idempotency_keys`` row unless its key is taken; whether it was free."""
        return await self._claims.submit(row)

    async def store(self, slot: KeySlot, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """Record the response as the key's answer."""
        await self._stores.submit(slot.answer(status, headers, body))
        slot.stored = True

    async def _insert_claims(self, rows: list[dict[str, Any]]) -> list[bool]:
        async with self._claim_conn.autocommit() as conn:  # one statement: atomic by itself
            won = set((await conn.execute(self._claim, rows)).scalars())
        return [row["id"] in won for row in rows]

    async def _write_stores(self, rows: list[dict[str, Any]]) -> list[None]:
        async with self._store_conn.autocommit() as conn:
            await conn.execute(STORE, rows)
        return [None] * len(rows)

    async def aclose(self) -> None:
        """Give the held connections back (before the engine is disposed)."""
        await self._claim_conn.aclose()
        await self._store_conn.aclose()
