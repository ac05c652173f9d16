"""The process's cache of API key lookups: a request pays no database round trip for its key, and a
revocation still holds in every process from the moment it returns.

A lookup found is kept (valid keys only) and served only while the cache is *current*; every
revocation announces itself in its own transaction (`announce_key_change`), and:

- On a SQLite file each request asks the process's own reader connection (`read_now`, on the event
  loop, microseconds) for ``PRAGMA data_version``, which changes whenever another connection has
  committed. When it has changed, the row of ``api_key_revisions`` (bumped by every revocation) is
  read; a new number flushes the cache. The check sees every commit made before it, so a key revoked
  before a request starts is refused by it. When that connection cannot serve at once, the request
  reads the key's row instead.
- On PostgreSQL a connection of the process's own (`KeyCache.start`) LISTENs on `CHANNEL`, where a
  revocation NOTIFYs at commit; a notification flushes the cache. Delivery is asynchronous, so the
  cache is served only under a *lease*: every `BEAT` seconds the connection NOTIFYs itself, and when
  that beat comes back, every notification queued before it has been handled (PostgreSQL delivers a
  session's notifications in queue order), so the entries may be served until `LEASE` seconds after
  the beat was sent. A revocation returns `LEASE` seconds after its commit (`await_key_change_seen`):
  by then a process has either handled its notification or stopped serving from its cache, whether
  its connection is up, lost or its loop stalled. A lost connection stops the cache at once; the new
  one flushes it before its first beat. Lookups read the database meanwhile.

A lookup that misses reads the row and keeps it only if no flush happened while it read (`epoch`),
so that a revocation committed during that read cannot leave a stale entry behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sqlalchemy import update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.db.engine import CONNECT_TIMEOUT, read_now

if TYPE_CHECKING:
    import asyncpg

logger = logging.getLogger("x402mw.platform")

CHANNEL = "x402mw_api_keys"  # a revocation NOTIFYs here, at its commit
LISTENER_NAME = "x402mw key cache"  # the listening connections' application_name
BEAT = 0.2  # seconds between two beats of a listening connection
LEASE = 0.9  # seconds after a beat was sent during which the entries may be served
LEASE_MARGIN = 0.01  # added to a revocation's wait: clocks of other hosts may run slightly slower
RETRY = 0.5  # seconds before a lost listening connection is opened again
SILENT = 10.0  # seconds a beat may take before its connection is taken for dead (its lease ran out long before)
MAX_ENTRIES = 10_000  # a full cache is emptied rather than grown

V = TypeVar("V")

_revisions = tables.api_key_revisions
_BUMP = update(_revisions).where(_revisions.c.id == 1).values(revision=_revisions.c.revision + 1)
_REVISION = "SELECT revision FROM api_key_revisions WHERE id = 1"


async def announce_key_change(conn: AsyncConnection) -> None:
    """Tell every process's cache that a key changed, in the transaction of the change (``conn``):
    the revision bumped (SQLite's check), a notification on `CHANNEL` sent at commit (PostgreSQL)."""
    await conn.execute(_BUMP)
    if conn.dialect.name == "postgresql":
        await conn.exec_driver_sql(f"NOTIFY {CHANNEL}")


async def await_key_change_seen(engine: AsyncEngine) -> None:
    """After the commit of a change `announce_key_change` announced: return once no process serves
    a cached lookup from before it. On PostgreSQL that is when every lease granted before the
    commit has run out; on SQLite at once (each request checks for itself)."""
    if engine.dialect.name == "postgresql":
        await asyncio.sleep(LEASE + LEASE_MARGIN)


class KeyCache(Generic[V]):
    """Lookups by key hash, served while `current`. Not thread-safe beyond what dict operations
    give; meant for the event loop(s) of one process."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.epoch = 0  # bumped by every flush
        self._entries: dict[str, V] = {}
        self._dialect = engine.dialect.name
        self._trusted_until = 0.0  # PostgreSQL: time.monotonic() until which the entries may be served
        self._driver: object = None  # SQLite: the reader's connection whose data_version is known
        self._data_version: int | None = None
        self._revision: int | None = None
        self._task: asyncio.Task[None] | None = None

    def current(self) -> bool:
        """Whether the entries may be served to a request starting now."""
        if self._dialect == "sqlite":
            checked = read_now(self.engine, self._check_sqlite)
            return checked is not None and checked[0]
        return time.monotonic() < self._trusted_until

    def get(self, key_hash: str) -> V | None:
        return self._entries.get(key_hash)

    def put(self, key_hash: str, value: V, epoch: int) -> None:
        """Keep ``value``, read from the database after the flush numbered ``epoch``, unless another
        flush came meanwhile."""
        if epoch != self.epoch or (self._dialect != "sqlite" and self._task is None):
            return  # stale, or no channel to say when it goes stale (PostgreSQL without `start`)
        if len(self._entries) >= MAX_ENTRIES:
            self._entries.clear()
        self._entries[key_hash] = value

    def flush(self) -> None:
        self._entries.clear()
        self.epoch += 1

    def _check_sqlite(self, conn: Connection) -> bool:
        driver = conn.connection.driver_connection
        if not isinstance(driver, sqlite3.Connection):
            return False
        try:
            version = driver.execute("PRAGMA data_version").fetchone()[0]
            if driver is self._driver and version == self._data_version:
                return True  # nothing committed by anyone since the last check
            row = driver.execute(_REVISION).fetchone()
        except sqlite3.Error:
            return False
        if row is None:
            return False
        if row[0] != self._revision:
            self.flush()
            self._revision = row[0]
        # the version is read before the revision: a revocation committed between the two reads is
        # seen now or, the version having changed again, by the next check
        self._driver, self._data_version = driver, version
        return True

    def start(self) -> None:
        """On PostgreSQL, open the listening connection in the background (on the running loop);
        until then, and whenever it is down, nothing is served from the cache."""
        if self._dialect == "postgresql" and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen())

    async def aclose(self) -> None:
        task, self._task = self._task, None
        self._trusted_until = 0.0
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _listen(self) -> None:
        import asyncpg

        dsn = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(
                    dsn,
                    timeout=CONNECT_TIMEOUT,
                    # a beat is a transaction of its own: it need not wait for the WAL's flush
                    server_settings={"application_name": LISTENER_NAME, "synchronous_commit": "off"},
                )
                await self._beat(conn)
            except Exception as exc:  # whatever broke it: keys are read meanwhile, and it is opened again
                logger.warning("the key cache's listening connection failed (%s); reading keys meanwhile", exc)
            finally:
                self._trusted_until = 0.0
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(conn.close(timeout=1))
            await asyncio.sleep(RETRY)

    async def _beat(self, conn: asyncpg.Connection) -> None:
        beat_channel = f"{CHANNEL}_beat_{conn.get_server_pid()}"
        sent: dict[str, float] = {}
        came_back = asyncio.Event()

        def changed(*_: Any) -> None:
            self.flush()

        def beat(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
            started = sent.pop(payload, None)
            if started is not None:
                self._trusted_until = max(self._trusted_until, started + LEASE)
                came_back.set()

        def lost(_conn: Any) -> None:
            self._trusted_until = 0.0

        conn.add_termination_listener(lost)
        await conn.add_listener(CHANNEL, changed)
        await conn.add_listener(beat_channel, beat)
        self.flush()  # what was kept before LISTEN took effect (or while the connection was down) may be stale
        number = 0
        while True:
            number += 1
            came_back.clear()
            sent[str(number)] = time.monotonic()
            await conn.execute("SELECT pg_notify($1, $2)", beat_channel, str(number))
            async with asyncio.timeout(SILENT):  # a slow beat only lets the lease lapse meanwhile
                await came_back.wait()
            await asyncio.sleep(BEAT)
