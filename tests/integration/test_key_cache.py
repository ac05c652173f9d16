"""A key seen before is answered from the process's key cache, without reading its row, and the
cache never outlives a revocation: not even one made while its PostgreSQL listening connection was
down (`x402mw.platform.services.key_cache`). The revocation made elsewhere, answered at once, is
tests/integration/test_key_revocation.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from tests.harness import PlatformHarness
from x402mw.platform.db.engine import create_engine_for
from x402mw.platform.services.key_cache import LISTENER_NAME
from x402mw.platform.services.merchants import KeyRing

pytestmark = pytest.mark.both_databases  # the key cache follows revocations through PostgreSQL's LISTEN/NOTIFY


def _status(harness: PlatformHarness, key: str) -> int:
    return httpx.get(f"{harness.url}/agent/endpoints", headers={"x-api-key": key}, timeout=30).status_code


@contextmanager
def _key_reads() -> Iterator[list[str]]:
    """The statements that read an API key's row by its hash, by any engine of this process."""
    seen: list[str] = []

    def noted(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "FROM api_keys" in statement and "api_keys.key_hash =" in statement:
            seen.append(statement)

    event.listen(Engine, "before_cursor_execute", noted)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", noted)


def _answered_from_the_cache(harness: PlatformHarness, key: str) -> bool:
    """Whether a request with ``key`` (seen before) is answered 200 without reading its row. On
    PostgreSQL the listening connection may still be coming up: asked for a few seconds."""
    deadline = time.monotonic() + 10
    while True:
        with _key_reads() as reads:
            assert _status(harness, key) == 200
        if not reads or time.monotonic() > deadline:
            return not reads
        time.sleep(0.05)


def _revoke_in_another_instance(harness: PlatformHarness, key_id: str) -> None:
    async def revoke() -> bool:
        engine = create_engine_for(harness.server.settings.database_url.get_secret_value())
        try:
            return await KeyRing(engine).revoke(key_id)
        finally:
            await engine.dispose()

    assert asyncio.run(revoke())


def test_a_key_seen_before_is_answered_without_reading_its_row(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    assert _answered_from_the_cache(dev_platform, key)
    with _key_reads() as reads:
        for _ in range(5):
            assert _status(dev_platform, key) == 200
        created = httpx.post(
            f"{dev_platform.url}/payment-intents",
            headers={"x-api-key": key, "Idempotency-Key": f"key-cache-{key[-8:]}"},
            json={"orderId": f"order-{key[-12:]}", "amount": "1.00", "currency": "USDC"},
            timeout=30,
        )
    assert created.status_code == 201, created.text
    assert reads == []


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
def test_a_key_revoked_while_the_listening_connection_is_down_is_refused(dev_platform: PlatformHarness) -> None:
    _, key, key_id = dev_platform.merchant()
    _, other_key, _ = dev_platform.merchant()
    assert _answered_from_the_cache(dev_platform, key)
    url = dev_platform.server.settings.database_url.get_secret_value()
    with psycopg.connect(url, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = current_database()",
            (LISTENER_NAME,),
        ).fetchall()
        assert ended and all(row[0] for row in ended)  # the platform's listening connection is gone
        _revoke_in_another_instance(dev_platform, key_id)  # no notification can reach the platform
        assert _status(dev_platform, key) == 401  # the very next request
        # the connection comes back, and with it the cache, flushed
        assert _answered_from_the_cache(dev_platform, other_key)
        assert _status(dev_platform, key) == 401
