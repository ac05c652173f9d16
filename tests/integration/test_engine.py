"""The app's PostgreSQL engine: a pooled connection the server dropped is replaced before use, not
failed; a held one (HeldConnection) likewise after an idle spell, and after one failed write otherwise."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from tests.harness import postgres_database
from x402mw.platform.db import engine as engine_module
from x402mw.platform.db.engine import HeldConnection, create_engine_for

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
                while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (list(before),)).fetchone():
                    await asyncio.sleep(0.01)  # until the server has closed them
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


@contextlib.asynccontextmanager
async def _held_after_a_drop() -> AsyncIterator[tuple[HeldConnection, int]]:
    """A HeldConnection whose connection the server has just terminated, and that connection's pid."""
    with postgres_database() as url:
        engine = create_engine_for(url, pool_size=2)
        held = HeldConnection(engine)
        try:
            async with held.autocommit() as conn:
                first = int(await conn.scalar(text("SELECT pg_backend_pid()")))
            _terminate(url, first)
            yield held, first
        finally:
            await held.aclose()
            await engine.dispose()


async def test_a_held_connection_the_server_dropped_while_idle_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "PING_IDLE_AFTER", 0.0)  # every write comes after an idle spell
    async with _held_after_a_drop() as (held, first):
        async with held.autocommit() as conn:  # handed back to the pool, which pings it first
            second = int(await conn.scalar(text("SELECT pg_backend_pid()")))
        async with held.begin() as conn:
            assert int(await conn.scalar(text("SELECT 1"))) == 1
    assert second != first


async def test_a_held_connection_lost_in_steady_use_fails_one_write_and_the_next_reconnects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine_module, "PING_IDLE_AFTER", 3600.0)  # never idle long enough for a ping
    async with _held_after_a_drop() as (held, first):
        with pytest.raises(DBAPIError):
            async with held.autocommit() as conn:  # used again at once: no ping, the write fails
                await conn.scalar(text("SELECT pg_backend_pid()"))
        async with held.autocommit() as conn:
            second = int(await conn.scalar(text("SELECT pg_backend_pid()")))
    assert second != first
