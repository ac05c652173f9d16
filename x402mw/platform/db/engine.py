"""Engines and migrations.

One URL configures both: ``sqlite:///path`` or ``postgresql://user@host/db`` (driver suffixes are
chosen here: aiosqlite/asyncpg for the app, the sync drivers for Alembic).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

__all__ = ["async_url", "create_engine_for", "migrate", "sync_url"]

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
