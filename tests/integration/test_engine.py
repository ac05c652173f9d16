"""The app's engines. On PostgreSQL, a pooled connection the server dropped is replaced before use,
not failed; a held one (HeldConnection) likewise after an idle spell, and after one failed write
otherwise. On a SQLite file, batched writes run on the writer's thread (SQLiteWriter), wait for a
write lock the engine's own connection holds, and stop with the engine."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from tests.harness import postgres_database
from tests.waiting import eventually_async
from x402mw.platform.db import engine as engine_module
from x402mw.platform.db.engine import HeldConnection, SQLiteWriter, create_engine_for

pytestmark = pytest.mark.anyio


async def test_connections_the_server_dropped_while_idle_are_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "PING_IDLE_AFTER", 0.0)  # every checkout counts as after an idle spell
    with postgres_database() as url:
        engine = create_engine_for(url, pool_size=3)
        try:

            async def backend_pid() -> int:
                async with engine.connect() as conn:
                    pid = await conn.scalar(text("SELECT pg_backend_pid()"))
                    await asyncio.sleep(0.05)  # held together, so that the pool opens several connections
                    return int(pid)

            before = set(await asyncio.gather(*(backend_pid() for _ in range(3))))
            with psycopg.connect(url, autocommit=True) as admin:
                for pid in before:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                live = "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)"
                await eventually_async(
                    lambda: admin.execute(live, (list(before),)).fetchall(),
                    until=lambda pids: not pids,
                    what="the server to close the connections",
                    interval=0.01,
                )
            after = set(await asyncio.gather(*(backend_pid() for _ in range(3))))
        finally:
            await engine.dispose()
    assert len(before) == 3
    assert after and not after & before


def _terminate(url: str, pid: int) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            pass  # until the server has closed it


def _backend_pid(conn: Connection) -> int:
    return int(conn.scalar(text("SELECT pg_backend_pid()")))


@contextlib.asynccontextmanager
async def _held_after_a_drop() -> AsyncIterator[tuple[HeldConnection, int]]:
    """A HeldConnection whose connection the server has just terminated, and that connection's pid."""
    with postgres_database() as url:
        engine = create_engine_for(url, pool_size=2)
        held = HeldConnection(engine)
        try:
            first = await held.run(_backend_pid, atomic=False)
            _terminate(url, first)
            yield held, first
        finally:
            await held.aclose()
            await engine.dispose()


async def test_a_held_connection_the_server_dropped_while_idle_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "PING_IDLE_AFTER", 0.0)  # every write comes after an idle spell
    async with _held_after_a_drop() as (held, first):
        second = await held.run(_backend_pid, atomic=False)  # handed back to the pool, which pings it first
        assert await held.run(_backend_pid) == second  # and in a transaction, on the same connection
    assert second != first


async def test_a_held_connection_lost_in_steady_use_fails_one_write_and_the_next_reconnects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine_module, "PING_IDLE_AFTER", 3600.0)  # never idle long enough for a ping
    async with _held_after_a_drop() as (held, first):
        with pytest.raises(DBAPIError):
            await held.run(_backend_pid, atomic=False)  # used again at once: no ping, the write fails
        second = await held.run(_backend_pid, atomic=False)
    assert second != first


@contextlib.asynccontextmanager
async def _sqlite_file(path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine_for(f"sqlite:///{path / 'db.sqlite3'}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)"))
    try:
        yield engine
    finally:
        await engine.dispose()


def _insert_note(body: str) -> Callable[[Connection], str]:
    def insert(conn: Connection) -> str:
        conn.execute(text("INSERT INTO notes (body) VALUES (:body)"), {"body": body})
        return threading.current_thread().name

    return insert


async def _notes(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.execute(text("SELECT body FROM notes ORDER BY id"))).scalars())


async def test_sqlite_writes_run_on_the_writer_thread_and_the_engine_sees_them(tmp_path: Path) -> None:
    async with _sqlite_file(tmp_path) as engine:
        claims, records = HeldConnection(engine), HeldConnection(engine)
        first = await claims.run(_insert_note("one"), atomic=False)
        second = await records.run(_insert_note("two"))
        assert first == second and first.startswith("x402mw-sqlite-writer")  # one thread for the process
        assert await _notes(engine) == ["one", "two"]


async def test_a_sqlite_write_that_raises_writes_nothing(tmp_path: Path) -> None:
    def half(conn: Connection) -> None:
        _insert_note("half")(conn)
        raise ValueError("stop")

    async with _sqlite_file(tmp_path) as engine:
        with pytest.raises(ValueError, match="stop"):
            await HeldConnection(engine).run(half)
        assert await _notes(engine) == []


async def test_a_sqlite_write_waits_for_the_lock_the_engine_holds(tmp_path: Path) -> None:
    async with _sqlite_file(tmp_path) as engine:
        held = HeldConnection(engine)
        async with engine.connect() as conn:
            await conn.execute(text("INSERT INTO notes (body) VALUES ('engine')"))  # the write lock, kept
            waiting = asyncio.ensure_future(held.run(_insert_note("writer")))
            await asyncio.sleep(0.2)
            assert not waiting.done()  # polling for the lock
            await conn.commit()
        await waiting
        assert await _notes(engine) == ["engine", "writer"]


async def test_a_sqlite_write_gives_up_on_a_lock_held_too_long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "LOCK_WAIT", 0.1)
    async with _sqlite_file(tmp_path) as engine:
        async with engine.connect() as conn:
            await conn.execute(text("INSERT INTO notes (body) VALUES ('engine')"))
            with pytest.raises(OperationalError, match="locked"):
                await HeldConnection(engine).run(_insert_note("writer"))
            await conn.commit()
        assert await _notes(engine) == ["engine"]


async def test_the_sqlite_writer_stops_with_its_engine_and_starts_again_on_use(tmp_path: Path) -> None:
    async with _sqlite_file(tmp_path) as engine:
        held = HeldConnection(engine)
        await held.run(_insert_note("before"))
        writer = SQLiteWriter.of(engine)
        await engine.dispose()
        assert not any(t.name.startswith("x402mw-sqlite-writer") and t.is_alive() for t in _writer_threads(writer))
        await held.run(_insert_note("after"))  # on a new writer
        assert SQLiteWriter.of(engine) is not writer
        assert await _notes(engine) == ["before", "after"]


def _writer_threads(writer: SQLiteWriter | None) -> list[threading.Thread]:
    assert writer is not None
    return list(writer._thread._threads)


async def test_an_in_memory_sqlite_database_is_written_on_the_engine_itself() -> None:
    engine = create_async_engine("sqlite+aiosqlite://")  # one connection, kept (StaticPool)
    try:
        assert SQLiteWriter.of(engine) is None
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)"))
        await HeldConnection(engine).run(_insert_note("kept"))
        assert await _notes(engine) == ["kept"]
    finally:
        await engine.dispose()


async def test_an_inline_sqlite_write_runs_on_the_event_loop_when_the_writer_is_free(tmp_path: Path) -> None:
    async with _sqlite_file(tmp_path) as engine:
        claims = HeldConnection(engine, inline=True)
        assert await claims.run(_insert_note("inline")) == threading.current_thread().name
        assert await _notes(engine) == ["inline"]


async def test_an_inline_sqlite_write_goes_to_the_writer_thread_when_the_database_is_locked(tmp_path: Path) -> None:
    async with _sqlite_file(tmp_path) as engine:
        claims = HeldConnection(engine, inline=True)
        async with engine.connect() as conn:
            await conn.execute(text("INSERT INTO notes (body) VALUES ('engine')"))  # the write lock, kept
            waiting = asyncio.ensure_future(claims.run(_insert_note("claim")))
            await asyncio.sleep(0.2)
            assert not waiting.done()  # never blocks the loop: the thread polls for the lock
            await conn.commit()
        assert (await waiting).startswith("x402mw-sqlite-writer")
        assert await _notes(engine) == ["engine", "claim"]


@pytest.mark.parametrize("every", [5, 10**9])
async def test_the_sqlite_writer_checkpoints_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    # The writer's connection does not checkpoint as it commits (a write on the event loop must not
    # wait for one): its thread does, every CHECKPOINT_EVERY transactions, so the WAL stays small.
    monkeypatch.setattr(engine_module, "CHECKPOINT_EVERY", every)
    async with _sqlite_file(tmp_path) as engine:
        held = HeldConnection(engine)
        for _ in range(200):
            await held.run(_insert_note("x" * 4000))
        wal = (tmp_path / "db.sqlite3-wal").stat().st_size
        assert len(await _notes(engine)) == 200
    if every == 5:
        assert wal < 200_000  # restarted after each checkpoint
    else:
        assert wal > 800_000  # 200 pages and more, never checkpointed
