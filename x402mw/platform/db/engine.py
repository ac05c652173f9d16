"""Engines: the SQLite writer and readers, held PostgreSQL connections (migrations: `schema`).

One URL configures both: ``sqlite:///path`` or ``postgresql://user@host/db`` (driver suffixes are
chosen here: aiosqlite/asyncpg for the app, the sync drivers for Alembic).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DisconnectionError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import QueuePool

T = TypeVar("T")
W = TypeVar("W")

logger = logging.getLogger("x402mw.platform.db")

# A pooled connection left unused this long is pinged before it is handed out (the server may have
# restarted or dropped it meanwhile); one in steady use is not. Pinging on every checkout cost three
# round trips per transaction (asyncpg's ping is BEGIN, a query and ROLLBACK).
PING_IDLE_AFTER = 1.0
# How SQLiteWriter waits for a write lock another connection holds: polls this often, for this long.
LOCK_POLL = 0.0005
LOCK_WAIT = 30.0
CHECKPOINT_EVERY = 200  # SQLiteWriter transactions between two checkpoints of the WAL
CONNECT_TIMEOUT = 5.0  # seconds a new PostgreSQL connection may take


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
    # A server that does not answer fails a connection attempt within seconds (asyncpg's default
    # waits a minute), so that requests get their 503 while it is down instead of hanging.
    engine = create_async_engine(
        full, pool_size=2 * pool_size, max_overflow=0, connect_args={"timeout": CONNECT_TIMEOUT}
    )
    _ping_when_idle(engine, PING_IDLE_AFTER)
    return engine


class HeldConnection:
    """A connection for one sequential writer (a `Coalescer`'s flushes), which hands it each batch
    as a function of a sync `Connection` (`run`).

    On PostgreSQL the connection is kept checked out: each write skips the pool's checkout, reset
    and return, and finds its statements already prepared on the connection (under load that was a
    write's largest cost after the statement itself: three round trips instead of one). A write that
    fails on a broken connection drops it, and the next write opens a new one; a connection idle
    longer than the pool's ping interval goes back to the pool, which checks it before handing it out.

    On SQLite (a database file) every writer of the process shares one thread with a connection of
    its own (`SQLiteWriter`), where a whole batch runs as one call: the driver's thread is not
    crossed once per statement (aiosqlite costs several event-loop turns each), and the write lock is
    held for the time the statements take, not for the turns in between. With ``inline``, for a
    short write a request waits for, a batch runs on the event loop itself whenever the writer and
    the database are free at that moment (`SQLiteWriter.run`).

    >>> claims = HeldConnection(engine)  # doctest: +SKIP
    >>> won = await claims.run(lambda conn: conn.execute(insert_claims, rows).scalars().all())  # doctest: +SKIP
    """

    def __init__(self, engine: AsyncEngine, *, inline: bool = False) -> None:
        self.engine = engine
        self._sqlite = engine.dialect.name == "sqlite"
        self._inline = inline
        self._conn: AsyncConnection | None = None
        self._level = ""  # the held connection's isolation level
        self._default = ""  # the level it came with
        self._lock = asyncio.Lock()
        self._used = 0.0  # time.monotonic() of the last write

    async def run(self, work: Callable[[Connection], T], *, atomic: bool = True) -> T:
        """Run ``work`` and return what it returns: in one transaction, committed when it returns
        and rolled back if it raises, or (``atomic=False``, for a single statement, which is atomic
        by itself) with each statement committed as it runs, saving the BEGIN and COMMIT round trips.

        ``work`` runs in another thread on SQLite, and runs again should it find the database
        locked by another connection: it must do nothing but its statements."""
        if self._sqlite:
            writer = SQLiteWriter.of(self.engine)  # looked up each time: a disposed engine gets a new one
            if writer is not None:
                return await writer.run(work, inline=self._inline)
            async with self.engine.begin() as conn:  # an in-memory database: the pool's one connection
                return await conn.run_sync(work)
        async with self._held(autocommit=not atomic) as conn:
            if not atomic:
                return await conn.run_sync(work)
            async with conn.begin():
                return await conn.run_sync(work)

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


class SQLiteWriter:
    """The thread, with a connection of its own, where a process's batched writes to a SQLite file
    run (`HeldConnection`): one per engine, made on first use and stopped when the engine is
    disposed.

    Each call runs in ``BEGIN IMMEDIATE`` (the write lock taken before the first statement). When
    another connection holds the lock (the engine's own, for the writes not batched), the call waits
    for it in short polls of `LOCK_POLL` rather than SQLite's busy handler, whose sleeps grow to
    100 ms, and gives up after `LOCK_WAIT` with the "database is locked" error. The connection does
    not checkpoint when it commits: the thread does, every `CHECKPOINT_EVERY` transactions, so that
    a write run on the event loop never waits for one."""

    _writers: weakref.WeakKeyDictionary[Engine, SQLiteWriter] = weakref.WeakKeyDictionary()

    def __init__(self, url: str) -> None:
        self._engine = create_engine(
            url, connect_args={"check_same_thread": False}, pool_size=1, max_overflow=0, poolclass=QueuePool
        )
        event.listen(self._engine, "connect", _writer_connection)
        event.listen(self._engine, "begin", _begin_immediate)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="x402mw-sqlite-writer")
        self._busy = threading.Lock()  # held while a call uses the connection, in either thread
        self._commits = 0  # since the last checkpoint

    @classmethod
    def of(cls, engine: AsyncEngine) -> SQLiteWriter | None:
        """The writer of ``engine`` if it is on a SQLite file, else None."""
        return _one_per_engine(cls._writers, engine, cls, cls._stop)

    @classmethod
    def _stop(cls, engine: Engine) -> None:
        """Stop the writer of ``engine`` (it is being disposed); a later write makes a new one."""
        writer = cls._writers.pop(engine, None)
        if writer is not None:
            writer._thread.submit(writer._engine.dispose)
            writer._thread.shutdown(wait=True)

    async def run(self, work: Callable[[Connection], T], *, inline: bool = False) -> T:
        """``work`` in one transaction on the writer's thread. With ``inline``, on the event loop
        instead when neither the thread nor another connection is writing at this moment: a write of
        a few rows takes a fraction of a millisecond there, less than the two hand-overs between
        the loop and the thread cost under load."""
        if inline and self._busy.acquire(blocking=False):
            try:
                result = self._attempt(work)
            finally:
                self._busy.release()
            if not isinstance(result, _Locked):
                return result
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._transact, work)

    def _transact(self, work: Callable[[Connection], T]) -> T:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            with self._busy:
                result = self._attempt(work)
                if self._commits >= CHECKPOINT_EVERY:
                    self._checkpoint()
            if not isinstance(result, _Locked):
                return result
            if time.monotonic() > deadline:
                raise result.error
            time.sleep(LOCK_POLL)

    def _attempt(self, work: Callable[[Connection], T]) -> T | _Locked:
        """Run ``work`` once: its result, or `_Locked` when another connection holds the write lock
        (nothing was written)."""
        try:
            with self._engine.begin() as conn:
                result = work(conn)
        except OperationalError as exc:
            if "locked" not in str(exc.orig):
                raise
            return _Locked(exc)
        self._commits += 1
        return result

    def _checkpoint(self) -> None:
        # Outside any transaction (the driver's own connection, in autocommit); a failure costs a
        # larger WAL until the next one, never the write that came before.
        self._commits = 0
        raw = self._engine.raw_connection()
        try:
            driver = raw.driver_connection
            if driver is not None:
                driver.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            logger.warning("SQLite checkpoint failed; retried after %d more writes", CHECKPOINT_EVERY, exc_info=True)
        finally:
            raw.close()


@dataclass(frozen=True, slots=True)
class _Locked:
    error: OperationalError


async def quick_read(engine: AsyncEngine, work: Callable[[Connection], T]) -> T:
    """Run ``work``, a few indexed reads a request waits for (an API key, a payment by its id), on a
    connection of ``engine``'s database and return what it returns.

    On a SQLite file it runs on the event loop itself, on a connection of its own (`SQLiteReader`):
    a read of one row by an index takes some 50 µs there, where the pool's connection costs about
    800 µs of hand-overs to the driver's thread and back (``bench/bench_keys.py``). Elsewhere, and
    whenever that connection cannot serve it at once, ``work`` runs on a pooled connection. Each
    call reads what was committed when it started, by any process: nothing is cached."""
    reader = SQLiteReader.of(engine)
    if reader is not None:
        result = reader.read(work)
        if not isinstance(result, _Locked):
            return result
    async with engine.connect() as conn:
        return await conn.run_sync(work)


def read_now(engine: AsyncEngine, work: Callable[[Connection], T]) -> tuple[T] | None:
    """``work`` on the event loop, on ``engine``'s `SQLiteReader`: its result (in a 1-tuple), or None
    when the database is not a SQLite file or that connection cannot serve it at this instant. For a
    check too cheap to be worth a trip anywhere (``PRAGMA data_version``)."""
    reader = SQLiteReader.of(engine)
    if reader is None:
        return None
    result = reader.read(work)
    return None if isinstance(result, _Locked) else (result,)


class SQLiteReader:
    """A connection of the process's own to a SQLite file, for `quick_read`: one per engine, made on
    first use and closed when the engine is disposed. It only reads (``query_only``), never waits
    for a lock (``busy_timeout=0``: in WAL mode a reader waits for no writer, and the rare moment it
    would, the read goes to the pool instead), and holds no transaction between reads, so that each
    sees every commit made before it began."""

    _readers: weakref.WeakKeyDictionary[Engine, SQLiteReader] = weakref.WeakKeyDictionary()

    def __init__(self, url: str) -> None:
        self._engine = create_engine(
            url, connect_args={"check_same_thread": False}, pool_size=1, max_overflow=0, poolclass=QueuePool
        )
        event.listen(self._engine, "connect", _reader_connection)
        self._busy = threading.Lock()  # one read at a time: loops of other threads go to the pool meanwhile
        self._conn: Connection | None = None  # kept checked out: the pool's checkout and reset cost more than a read

    @classmethod
    def of(cls, engine: AsyncEngine) -> SQLiteReader | None:
        """The reader of ``engine`` if it is on a SQLite file, else None."""
        return _one_per_engine(cls._readers, engine, cls, cls._stop)

    @classmethod
    def _stop(cls, engine: Engine) -> None:
        reader = cls._readers.pop(engine, None)
        if reader is not None:
            with reader._busy:
                reader._drop()
                reader._engine.dispose()

    def read(self, work: Callable[[Connection], T]) -> T | _Locked:
        """``work`` now, in this thread: its result, or `_Locked` when the connection is in use by
        another thread or the database cannot be read at this instant (nothing was read)."""
        if not self._busy.acquire(blocking=False):
            return _Locked(OperationalError("SQLiteReader.read", {}, sqlite3.OperationalError("reader in use")))
        try:
            if self._conn is None:
                self._conn = self._engine.connect()
            try:
                return work(self._conn)
            finally:
                self._conn.rollback()  # ends SQLAlchemy's transaction; the driver opened none for reads
        except OperationalError as exc:
            if "locked" not in str(exc.orig) and "busy" not in str(exc.orig):
                self._drop()
                raise
            return _Locked(exc)
        finally:
            self._busy.release()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


def _one_per_engine(
    known: weakref.WeakKeyDictionary[Engine, W],
    engine: AsyncEngine,
    make: Callable[[str], W],
    stop: Callable[[Engine], None],
) -> W | None:
    """The one ``W`` of ``engine`` (made from its file's URL on first use, kept in ``known`` until
    ``stop`` runs as the engine is disposed) if it is on a SQLite file, else None."""
    found = known.get(engine.sync_engine)  # every batched write asks: the known case first
    if found is not None:
        return found
    url = _sqlite_file(engine)
    if url is None:
        return None
    found = known[engine.sync_engine] = make(url)
    if not event.contains(engine.sync_engine, "engine_disposed", stop):
        event.listen(engine.sync_engine, "engine_disposed", stop)
    return found


def _sqlite_file(engine: AsyncEngine) -> str | None:
    """The sync URL of ``engine``'s database if it is a SQLite file (not in memory), else None."""
    url = engine.url
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    if url.query.get("mode") == "memory":  # a shared in-memory database (file:…?mode=memory&uri=true)
        return None
    return sync_url(url.render_as_string(hide_password=False))


def _reader_connection(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.execute("PRAGMA query_only=ON")
    dbapi_connection.execute("PRAGMA busy_timeout=0")


def _writer_connection(dbapi_connection: Any, record: Any) -> None:
    _sqlite_pragmas(dbapi_connection, record)
    dbapi_connection.execute("PRAGMA busy_timeout=0")  # the writer polls for the lock itself
    dbapi_connection.execute("PRAGMA wal_autocheckpoint=0")  # SQLiteWriter._checkpoint does it
    dbapi_connection.isolation_level = None  # the driver begins nothing: _begin_immediate does


def _begin_immediate(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


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
