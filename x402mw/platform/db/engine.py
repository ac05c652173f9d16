"""Engines and migrations.

One URL configures both: ``sqlite:///path`` or ``postgresql://user@host/db`` (driver suffixes are
chosen here: aiosqlite/asyncpg for the app, the sync drivers for Alembic).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

__all__ = ["HeldConnection", "async_url", "create_engine_for", "migrate", "sync_url"]

MIGRATIONS = Path(__file__).parent / "migrations"
# A pooled connection left unused this long is pinged before it is handed out (the server may have
# restarted or dropped it meanwhile); one in steady use is not. Pinging on every checkout cost three
# round trips per transaction (asyncpg's ping is BEGIN, a query and ROLLBACK).
PING_IDLE_AFTER = 1.0


def _with_driver(url: str, drivers: dict[str, str]) -> str:
    parsed = make_url(url)
    driver = drivers.get(parsed.get_backend_name())
    if driver is None:
        raise ValueError(f"unsupported database URL (use sqlite:/// or postgresql://): {parsed.drivername}")
    return str(parsed.set(drivername=driver).render_as_string(hide_password=False))


def async_url(url: str) -> str:
    """The URL with the app's async driver (aiosqlite, asyncpg)."""
    return _with_driver(url, {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"})


def sync_url(url: str) -> str:
    """The URL with the sync driver Alembic uses (sqlite3, psycopg)."""
    return _with_driver(url, {"sqlite": "sqlite", "postgresql": "postgresql+psycopg"})


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def create_engine_for(url: str, *, pool_size: int = 10) -> AsyncEngine:
    """The app's async engine for ``url``. On PostgreSQL a process holds at most ``2 * pool_size``
    connections (the pool and as many again under bursts): size it so that every process of the
    platform fits in the server's ``max_connections``. Connections opened for a burst are kept rather
    than closed when it ends: under sustained load, closing and reopening them (with their prepared
    statements) cost more than the requests they served."""
    full = async_url(url)
    if full.startswith("sqlite"):
        # SQLite has one writer at a time; several connections in one process only collide and sleep in
        # SQLite's busy handler. One connection serializes the process's statements without those sleeps.
        engine = create_async_engine(full, connect_args={"timeout": 30}, pool_size=1, max_overflow=0, pool_timeout=60)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    engine = create_async_engine(full, pool_size=2 * pool_size, max_overflow=0)
    _ping_when_idle(engine, PING_IDLE_AFTER)
    return engine


class HeldConnection:
    """A connection kept checked out for one sequential writer (a `Coalescer`'s flushes).

    Each write skips the pool's checkout, reset and return, and on PostgreSQL it finds its
    statements already prepared on the connection: under load that was a write's largest cost
    after the statement itself (three round trips instead of one). A write that fails on a broken
    connection drops it, and the next write opens a new one; a connection idle longer than the
    pool's ping interval goes back to the pool, which checks it before handing it out. On SQLite,
    where one pooled connection serves the whole process, nothing is held: each write checks that
    one out.

    >>> claims = HeldConnection(engine)  # doctest: +SKIP
    >>> async with claims.autocommit() as conn:  # one statement, committed by itself  # doctest: +SKIP
    ...     await conn.execute(insert_claims, rows)
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._hold = engine.dialect.name != "sqlite"
        self._conn: AsyncConnection | None = None
        self._level = ""  # the held connection's isolation level
        self._default = ""  # the level it came with
        self._lock = asyncio.Lock()
        self._used = 0.0  # time.monotonic() of the last write

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        """A transaction, committed when the block ends and rolled back if it raises."""
        if not self._hold:
            async with self.engine.begin() as conn:
                yield conn
            return
        async with self._held(autocommit=False) as conn, conn.begin():
            yield conn

    @contextlib.asynccontextmanager
    async def autocommit(self) -> AsyncIterator[AsyncConnection]:
        """Statements committed one by one, as they run (for a write of one statement). On SQLite,
        a transaction around the one statement: switching the connection to autocommit and back
        costs aiosqlite's thread more calls than the BEGIN and COMMIT do."""
        if not self._hold:
            async with self.engine.begin() as conn:
                yield conn
            return
        async with self._held(autocommit=True) as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def _held(self, *, autocommit: bool) -> AsyncIterator[AsyncConnection]:
        async with self._lock:
            now = time.monotonic()
            stale = now - self._used > PING_IDLE_AFTER  # the pool pings such a connection; we get a checked one
            self._used = now
            if self._conn is None or self._conn.closed or self._conn.invalidated or stale:
                await self._drop()  # a connection the pool invalidated goes back to it all the same
                self._conn = await self.engine.connect()
                self._level = self._default = await self._conn.get_isolation_level()
            conn = self._conn
            level = "AUTOCOMMIT" if autocommit else self._default
            if self._level != level:
                conn = self._conn = await conn.execution_options(isolation_level=level)
                self._level = level
            try:
                yield conn
            except BaseException:
                if conn.invalidated or conn.in_transaction():
                    await self._drop()  # broken, or left mid-transaction by a cancellation
                raise

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def aclose(self) -> None:
        """Return the connection to the pool (before the engine is disposed)."""
        async with self._lock:
            await self._drop()


def _ping_when_idle(engine: AsyncEngine, idle: float) -> None:
    """``pool_pre_ping`` for connections idle longer than ``idle`` seconds only. A failed ping makes the
    pool replace the connection; a connection lost while in steady use fails its statement, and that
    disconnect makes SQLAlchemy replace every connection the pool holds."""
    dialect = engine.sync_engine.dialect

    def checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    def checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")  # absent on a connection made for this checkout
        if idle_since is not None and time.monotonic() - idle_since > idle:
            try:
                dialect.do_ping(dbapi_connection)
            except Exception as exc:
                raise DisconnectionError(f"a pooled connection failed its ping: {exc}") from exc

    event.listen(engine.sync_engine.pool, "checkin", checked_in)
    event.listen(engine.sync_engine.pool, "checkout", checked_out)


def migrate(url: str, revision: str = "head") -> None:
    """Bring the schema at ``url`` to ``revision`` with Alembic (the only way the schema is made)."""
    parsed = make_url(sync_url(url))
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed)
    try:
        with engine.begin() as connection:
            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS))
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()
