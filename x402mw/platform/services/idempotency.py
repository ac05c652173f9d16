"""The store behind ``Idempotency-Key`` (`x402mw.platform.api.idempotency` has the semantics).

A key's row is claimed ``in_flight`` when its first request starts and becomes ``done`` with the
response (status, headers, body) that request answered. Claims and stores of concurrent requests
are written in batches (`Coalescer`), each on a connection kept for it (`HeldConnection`).

A claim holds its key for `LEASE` (``locked_until``), and the process renews the leases of its
requests still running every `RENEW_EVERY`, in one statement. A process that stops mid-request
leaves its keys in flight, and their leases run out: a retry with the same key may then take the
key over and run the request, within `LEASE` of the stop rather than never.

An endpoint whose work is one write may take the key over (``claimed=False`` on its `KeySlot`):
the key is then not claimed before the endpoint runs; the endpoint inserts it, done with its
response (`KeySlot.done_row`), in the transaction of its own write, and raises `KeyTaken` when
that insert finds the key used already. The request then costs one round trip to the database
instead of three (claim, write, store), and the key is done exactly when the write is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Insert, and_, bindparam, delete, or_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.batching import Coalescer
from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.engine import HeldConnection

KEEP_FOR = timedelta(hours=24)
"""How long a key is kept after its first use (`purge_idempotency_keys` deletes older ones)."""

LEASE = timedelta(seconds=30)
"""How long a claim holds its key without a renewal."""
RENEW_EVERY = 10.0
"""Seconds between renewals of the leases of a process's requests still running."""
UNLEASED_STALE_AFTER = timedelta(minutes=5)
"""A key claimed in flight without a lease (before leases were kept) may be taken over after this."""

IN_FLIGHT, DONE = "in_flight", "done"

logger = logging.getLogger("x402mw.platform")

_KEYS = tables.idempotency_keys
STORE = update(_KEYS).where(_KEYS.c.id == bindparam("row_id"))
"""Marks a claimed key done with its response; executed with `KeySlot.answer` rows."""
_RELEASE = delete(_KEYS).where(_KEYS.c.id == bindparam("row_id"))


_NO_RESPONSE = {"response_status": None, "response_headers": None, "response_body": None, "locked_until": None}


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
        """The key's row as its claim inserts it, held for `LEASE`."""
        return {**self._columns(), "status": IN_FLIGHT, "locked_until": self.created_at + LEASE}

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

    def __init__(self, engine: AsyncEngine, clock: Clock | None = None) -> None:
        self.engine = engine
        self.clock = clock or Clock()
        self._insert = insert_keys(engine)
        self._claim_conn, self._store_conn = HeldConnection(engine), HeldConnection(engine)
        self._claims: Coalescer[dict[str, Any], bool] = Coalescer(self._insert_rows)
        self._stores: Coalescer[dict[str, Any], None] = Coalescer(self._write_stores)
        self._held: set[str] = set()  # rows claimed by this process's requests still running
        self._renewer: asyncio.Task[None] | None = None

    async def claim(self, slot: KeySlot) -> bool:
        """Insert ``slot``'s key in flight unless it is used already; whether it was free. The
        claim holds the key while the request runs (its lease is renewed until it is stored or released)."""
        if not await self._claims.submit(slot.in_flight_row()):
            return False
        self._hold(slot.row_id)
        return True

    async def take_over(self, row_id: str, now: datetime) -> bool:
        """Take the in-flight row ``row_id`` over when its lease ran out (its request's process
        stopped); whether it was taken."""
        table = _KEYS
        lapsed = or_(
            table.c.locked_until < now,
            and_(table.c.locked_until.is_(None), table.c.created_at < now - UNLEASED_STALE_AFTER),
        )
        async with self.engine.begin() as conn:
            taken = await conn.execute(
                update(table)
                .where(table.c.id == row_id, table.c.status == IN_FLIGHT, lapsed)
                .values(locked_until=now + LEASE)
            )
        if taken.rowcount != 1:
            return False
        self._hold(row_id)
        return True

    async def store(self, slot: KeySlot, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        """Record the response as the key's answer; False (nothing stored) when the key was not
        claimed and turns out used by another request, whose answer stands."""
        if slot.claimed:
            try:
                await self._stores.submit(slot.answer(status, headers, body))
            finally:
                self._held.discard(slot.row_id)
        elif not await self._claims.submit(slot.done_row(status, headers, body)):
            return False
        slot.stored = True
        return True

    async def release(self, row_id: str) -> None:
        """Give up the claim ``row_id`` (its request failed): the key is free for a retry."""
        self._held.discard(row_id)
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")  # one statement, one round trip
            await conn.execute(_RELEASE, {"row_id": row_id})

    def _hold(self, row_id: str) -> None:
        self._held.add(row_id)
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew(), name="x402mw-idempotency-leases")

    async def _renew(self) -> None:
        """Renew the leases of the keys held, every `RENEW_EVERY`, until none is held."""
        while self._held:
            await asyncio.sleep(RENEW_EVERY)
            try:
                await self.renew()
            except Exception:
                logger.warning("could not renew the leases of %d idempotency keys", len(self._held), exc_info=True)

    async def renew(self) -> None:
        """Renew, in one statement, the leases of the keys this process's running requests hold."""
        held = list(self._held)
        if held:
            async with self.engine.begin() as conn:
                await conn.execute(
                    update(_KEYS)
                    .where(_KEYS.c.id.in_(held), _KEYS.c.status == IN_FLIGHT)
                    .values(locked_until=self.clock.now() + LEASE)
                )

    async def _insert_rows(self, rows: list[dict[str, Any]]) -> list[bool]:
        def insert(conn: Connection) -> set[str]:
            return set(conn.execute(self._insert, key_rows(rows)).scalars())

        won = await self._claim_conn.run(insert, atomic=False)  # one statement: atomic by itself
        return [row["id"] in won for row in rows]

    async def _write_stores(self, rows: list[dict[str, Any]]) -> list[None]:
        await self._store_conn.run(lambda conn: conn.execute(STORE, rows), atomic=False)
        return [None] * len(rows)

    async def aclose(self) -> None:
        """Stop renewing leases and give the held connections back (before the engine is disposed)."""
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        await self._claim_conn.aclose()
        await self._store_conn.aclose()


async def purge_idempotency_keys(engine: AsyncEngine, now: datetime) -> int:
    """Delete the keys first used more than `KEEP_FOR` before ``now``; returns how many."""
    table = tables.idempotency_keys
    async with engine.begin() as conn:
        result = await conn.execute(delete(table).where(table.c.created_at < now - KEEP_FOR))
    return int(result.rowcount)
