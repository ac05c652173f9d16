"""The store behind ``Idempotency-Key`` (`x402mw.platform.api.idempotency` has the semantics).

A key's row is claimed ``in_flight`` when its first request starts and becomes ``done`` with the
response (status, headers, body) that request answered. Claims and stores of concurrent requests
are written in batches (`Coalescer`), each on a connection kept for it (`HeldConnection`).

An endpoint whose work is one write may take the key over (``claimed=False`` on its `KeySlot`):
the key is then not claimed before the endpoint runs; the endpoint inserts it, done with its
response (`KeySlot.done_row`), in the transaction of its own write, and raises `KeyTaken` when
that insert finds the key used already. The request then costs one round trip to the database
instead of three (claim, write, store), and the key is done exactly when the write is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Insert, bindparam, delete, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.batching import Coalescer
from x402mw.platform.db import tables
from x402mw.platform.db.engine import HeldConnection

__all__ = [
    "DONE",
    "IN_FLIGHT",
    "KEEP_FOR",
    "STORE",
    "IdempotencyKeys",
    "KeySlot",
    "KeyTaken",
    "insert_keys",
    "key_rows",
    "purge_idempotency_keys",
]

KEEP_FOR = timedelta(hours=24)
"""How long a key is kept after its first use (`purge_idempotency_keys` deletes older ones)."""

IN_FLIGHT, DONE = "in_flight", "done"

_KEYS = tables.idempotency_keys
STORE = update(_KEYS).where(_KEYS.c.id == bindparam("row_id"))
"""Marks a claimed key done with its response; executed with `KeySlot.answer` rows."""


_NO_RESPONSE = {"response_status": None, "response_headers": None, "response_body": None}


def key_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (claims and done rows alike) with the same columns, as one ``INSERT`` needs."""
    return [{**_NO_RESPONSE, **row} for row in rows]


def insert_keys(engine: AsyncEngine) -> Insert:
    """``INSERT`` of key rows (`key_rows`) that skips keys already used and returns the ids it inserted."""
    insert_for = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
    return insert_for(_KEYS).on_conflict_do_nothing().returning(_KEYS.c.id)


class KeyTaken(Exception):
    """An endpoint that took its request's key over found the key used already (by a concurrent or
    earlier request): nothing was written, and the middleware answers as that first use decides."""


@dataclass
class KeySlot:
    """The key a request holds while it runs (``scope["x402mw.idempotency"]``)."""

    row_id: str
    merchant_id: str
    livemode: bool
    key: str
    fingerprint: str
    created_at: datetime
    claimed: bool = True  # False: not claimed yet; the endpoint writes it with its own write
    stored: bool = False  # set once the response is stored (by the endpoint or the middleware)

    def answer(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> dict[str, Any]:
        """The `STORE` parameters that record this response as the claimed key's answer."""
        return {"row_id": self.row_id, **self._response(status, headers, body)}

    def in_flight_row(self) -> dict[str, Any]:
        """The key's row as its claim inserts it."""
        return {**self._columns(), "status": IN_FLIGHT}

    def done_row(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> dict[str, Any]:
        """The key's whole row, done with this response (for `insert_keys`, when not claimed)."""
        return {**self._columns(), **self._response(status, headers, body)}

    def _columns(self) -> dict[str, Any]:
        return {
            "id": self.row_id,
            "merchant_id": self.merchant_id,
            "livemode": self.livemode,
            "key": self.key,
            "fingerprint": self.fingerprint,
            "created_at": self.created_at,
        }

    @staticmethod
    def _response(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> dict[str, Any]:
        pairs = [[name.decode("latin-1"), value.decode("latin-1")] for name, value in headers]
        return {"status": DONE, "response_status": status, "response_headers": pairs, "response_body": body}


class IdempotencyKeys:
    """The claims and stores of one engine, each written in batches: under load, one round trip
    claims (or stores) the keys of every request that arrived meanwhile."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._insert = insert_keys(engine)
        self._claim_conn, self._store_conn = HeldConnection(engine), HeldConnection(engine)
        self._claims: Coalescer[dict[str, Any], bool] = Coalescer(self._insert_rows)
        self._stores: Coalescer[dict[str, Any], None] = Coalescer(self._write_stores)

    async def claim(self, row: dict[str, Any]) -> bool:
        """Insert the ``idempotency_keys`` row unless its key is used already; whether it was free."""
        return await self._claims.submit(row)

    async def store(self, slot: KeySlot, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        """Record the response as the key's answer; False (nothing stored) when the key was not
        claimed and turns out used by another request, whose answer stands."""
        if slot.claimed:
            await self._stores.submit(slot.answer(status, headers, body))
        elif not await self._claims.submit(slot.done_row(status, headers, body)):
            return False
        slot.stored = True
        return True

    async def _insert_rows(self, rows: list[dict[str, Any]]) -> list[bool]:
        def insert(conn: Connection) -> set[str]:
            return set(conn.execute(self._insert, key_rows(rows)).scalars())

        won = await self._claim_conn.run(insert, atomic=False)  # one statement: atomic by itself
        return [row["id"] in won for row in rows]

    async def _write_stores(self, rows: list[dict[str, Any]]) -> list[None]:
        await self._store_conn.run(lambda conn: conn.execute(STORE, rows), atomic=False)
        return [None] * len(rows)

    async def aclose(self) -> None:
        """Give the held connections back (before the engine is disposed)."""
        await self._claim_conn.aclose()
        await self._store_conn.aclose()


async def purge_idempotency_keys(engine: AsyncEngine, now: datetime) -> int:
    """Delete the keys first used more than `KEEP_FOR` before ``now``; returns how many."""
    table = tables.idempotency_keys
    async with engine.begin() as conn:
        result = await conn.execute(delete(table).where(table.c.created_at < now - KEEP_FOR))
    return int(result.rowcount)
