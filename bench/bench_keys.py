"""(h) What an API request pays for checking its key against the database each time.

Revocation must take effect in every process as soon as it returns (issue 21), so a process may
not answer a key from a cache of its own for a while. Three ways to check a key, measured in the
same run on the same platform, interleaved, best of several rounds:

- ``ttl``: the key ring the platform had before, a 2-second cache of each key's lookup (the
  baseline: what the API path cost when revocations took up to 2 s to be seen elsewhere);
- ``version``: that cache, each hit checked against a shared version row that a revocation would
  bump (read here from the one-row ``alembic_version`` table, the same kind of read);
- ``lookup``: no cache, the key's row read by its hash on each request (what the platform did
  from issue 21 until issue 33);
- ``cache``: the platform's own key ring (`x402mw.platform.services.key_cache`): a key seen before
  served from the process's cache, kept current by ``PRAGMA data_version`` (SQLite) or
  ``LISTEN``/``NOTIFY`` under a lease (PostgreSQL); what the platform does.

Each is timed on the API path, a merchant's ``GET /v1/agent/endpoints`` through the platform's
ASGI app in-process (no sockets), and on the key check alone. Also timed, with the key read each
time: what one seller's revalidation of an endpoint's terms costs the platform (every second per
endpoint and seller process: ``GET /v1/agent/endpoints/:id`` with ``If-None-Match``, answered
``304``). On SQLite and PostgreSQL::

    python -m bench.bench_keys [REQUESTS] [ROUNDS]      # defaults: 300 5
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.app import create_app
from x402mw.platform.runtime import Platform
from x402mw.platform.services.cache import TTLCache
from x402mw.platform.services.merchants import Caller, KeyRing, create_api_key, create_merchant, hash_key, lookup_key
from x402mw.platform.settings import PlatformSettings

ENDPOINT = {
    "name": "Weather",
    "resourceUrl": "http://bench/weather",
    "currency": "USDC",
    "payoutAddress": "0x" + "bb" * 20,
    "amountMinor": "10000",
}
POSTGRES_URL = os.environ.get("X402MW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


class CachedRing(KeyRing):
    """The key ring as it was: each key's lookup kept 2 seconds."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self._cache: TTLCache[str, Caller | None] = TTLCache(2.0)

    async def lookup(self, key: str) -> Caller | None:
        return await self._cache.get(hash_key(key), lambda: lookup_key(self.engine, key))


class VersionedRing(KeyRing):
    """A cache whose every hit is checked against a shared version (one read of a one-row table)."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self._cache: dict[str, tuple[str, Caller | None]] = {}

    async def lookup(self, key: str) -> Caller | None:
        async with self.engine.connect() as conn:
            version = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar_one()
        found = self._cache.get(hash_key(key))
        if found is not None and found[0] == version:
            return found[1]
        caller = await lookup_key(self.engine, key)
        self._cache[hash_key(key)] = (version, caller)
        return caller


@contextlib.contextmanager
def _database(kind: str, workdir: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{workdir / 'platform.sqlite3'}"
        return
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"x402mw_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _measure(kind: str, url: str, workdir: Path, n: int, rounds: int) -> dict[str, tuple[float, float]]:
    """For each key ring, the best time per API request and per key check alone; under
    ``"revalidation"``, the best time per 304 revalidation of an endpoint (in both places)."""
    platform = await Platform.start(PlatformSettings(database_url=url, data_dir=workdir))
    try:
        merchant = await create_merchant(platform.engine, "Bench")
        _, key = await create_api_key(platform.engine, merchant.id)
        app = create_app(platform=platform)
        app.state.platform = platform  # the app's lifespan would set it; ASGITransport runs none
        started = platform.keys  # its cache's listening connection runs (PostgreSQL)
        rings: dict[str, KeyRing] = {
            "ttl": CachedRing(platform.engine),
            "version": VersionedRing(platform.engine),
            "lookup": KeyRing(platform.engine),  # never started: every lookup reads the row
            "cache": started,
        }
        while not started.cache.current():  # the listening connection's first beat
            await asyncio.sleep(0.01)
        best = {name: (float("inf"), float("inf")) for name in rings}
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://bench/v1") as client:
            chain_id = next(iter(platform.chains)).chain_id
            endpoint = await client.post("/agent/endpoints", headers=headers, json=ENDPOINT | {"chainId": chain_id})
            assert endpoint.status_code == 201, endpoint.text
            path = f"/agent/endpoints/{endpoint.json()['endpoint']['id']}"
            etag = (await client.get(path, headers=headers)).headers["ETag"]
            conditional = headers | {"If-None-Match": etag}
            revalidation = float("inf")
            for _ in range(rounds + 1):  # the first round warms up
                for name, ring in rings.items():
                    platform.keys = ring
                    start = time.perf_counter()
                    for _ in range(n):
                        reply = await client.get("/agent/endpoints", headers=headers)
                        assert reply.status_code == 200, reply.text
                    api = (time.perf_counter() - start) / n
                    start = time.perf_counter()
                    for _ in range(n):
                        assert await ring.lookup(key) is not None
                    check = (time.perf_counter() - start) / n
                    best[name] = (min(best[name][0], api), min(best[name][1], check))
                platform.keys = rings["lookup"]
                start = time.perf_counter()
                for _ in range(n):
                    assert (await client.get(path, headers=conditional)).status_code == 304
                revalidation = min(revalidation, (time.perf_counter() - start) / n)
        platform.keys = started
        return best | {"revalidation": (revalidation, revalidation)}
    finally:
        await platform.aclose()


def run(n: int = 300, rounds: int = 5) -> dict[str, dict[str, tuple[float, float]]]:
    results = {}
    for kind in ("sqlite", "postgresql"):
        with tempfile.TemporaryDirectory() as tmp, _database(kind, Path(tmp)) as url:
            best = asyncio.run(_measure(kind, url, Path(tmp), n, rounds))
        results[kind] = best
        revalidation, _ = best.pop("revalidation")
        base_api, base_check = best["ttl"]
        for name, (api, check) in best.items():
            print(
                f"API key check on {kind}, {name:>7}: GET /v1/agent/endpoints {api * 1e6:7.0f} µs/req "
                f"({api / base_api:.2f}x the 2 s cache), the check alone {check * 1e6:6.0f} µs "
                f"(+{(check - base_check) * 1e6:.0f} µs)"
            )
        print(
            f"a seller's revalidation of an endpoint on {kind} (GET /v1/agent/endpoints/:id with If-None-Match, "
            f"304): {revalidation * 1e6:.0f} µs, {revalidation / base_api:.2f}x a list request with the 2 s cache"
        )
    return results


if __name__ == "__main__":
    run(*(int(arg) for arg in sys.argv[1:3]))
