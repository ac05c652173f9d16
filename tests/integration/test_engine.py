"""The app's PostgreSQL engine: a pooled connection the server dropped is replaced before use, not failed."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from sqlalchemy import text

from tests.harness import postgres_database
from x402mw.platform.db import engine as engine_module
from x402mw.platform.db.engine import create_engine_for

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
