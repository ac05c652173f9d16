"""Shared fixtures: real platforms (uvicorn on loopback) on the in-process dev chain and on anvil,
each on SQLite and on PostgreSQL; merchants with API keys and agent endpoints; funded agent wallets.

Every test that uses a platform fixture (``dev_platform``, ``anvil_platform``, ``any_chain_platform``,
``deployment``) runs once per database: its ids end in ``sqlite`` and ``postgresql``. PostgreSQL is
found at ``X402MW_TEST_POSTGRES_URL`` (``make test`` starts a throwaway cluster where none answers:
see ``tests/pg_cluster.py``); each platform gets a fresh database there, dropped at the end.
"""

from __future__ import annotations

import os

os.environ.setdefault("ETH_HASH_BACKEND", "pysha3")

import contextlib
from collections.abc import Iterator

import pytest

from tests.harness import (
    DATABASES,
    Deployment,
    PlatformHarness,
    postgres_database,
    start_anvil_platform,
    start_dev_platform,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Platforms:
    """Platforms started on first use and kept until the session ends, one per (chain, database).

    xdist hands a worker tests of both databases in turn; keeping both platforms alive means a switch
    of the ``database`` parameter costs nothing instead of a platform restart."""

    def __init__(self, stack: contextlib.ExitStack, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._stack = stack
        self._tmp = tmp_path_factory
        self._started: dict[tuple[str, str], PlatformHarness] = {}

    def get(self, chain: str, database: str) -> PlatformHarness:
        """``chain`` is ``dev``, ``anvil`` or ``dev-without-worker`` (no background duties)."""
        if (chain, database) not in self._started:
            workdir = self._tmp.mktemp(f"{chain}-{database}-platform")
            url = self._stack.enter_context(postgres_database()) if database == "postgresql" else None
            if chain == "anvil":
                started = start_anvil_platform(workdir, database_url=url)
            else:
                started = start_dev_platform(workdir, database_url=url, run_worker=chain == "dev")
            self._started[chain, database] = self._stack.enter_context(started)
        return self._started[chain, database]


@pytest.fixture(scope="session")
def _platforms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Platforms]:
    with contextlib.ExitStack() as stack:
        yield _Platforms(stack, tmp_path_factory)


@pytest.fixture(scope="session", params=DATABASES)
def database(request: pytest.FixtureRequest) -> str:
    """The database under the platform fixtures: ``sqlite`` or ``postgresql``. Pin a test that never
    reaches the database to one with `tests.harness.sqlite_only`."""
    return str(request.param)


@pytest.fixture(scope="session")
def dev_platform(database: str, _platforms: _Platforms) -> PlatformHarness:
    """The platform on the in-process dev chain, on ``database``."""
    return _platforms.get("dev", database)


@pytest.fixture(scope="session")
def quiet_dev_platform(database: str, _platforms: _Platforms) -> PlatformHarness:
    """The platform on its own dev chain, without the background worker: for tests that run the
    worker's duties by hand (the deposit watcher), with nothing racing them, and that may rewind
    the chain (``evm_revert``) without disturbing other tests."""
    return _platforms.get("dev-without-worker", database)


@pytest.fixture(scope="session")
def anvil_platform(database: str, _platforms: _Platforms) -> PlatformHarness:
    """The platform on anvil, on ``database``."""
    return _platforms.get("anvil", database)


@pytest.fixture(params=["dev", "anvil"])
def any_chain_platform(request: pytest.FixtureRequest, database: str, _platforms: _Platforms) -> PlatformHarness:
    return _platforms.get(str(request.param), database)


@pytest.fixture
def deployment(dev_platform: PlatformHarness) -> Deployment:
    """A merchant on the dev-chain platform with a test key, a fixed-price endpoint and a funded agent."""
    return dev_platform.deploy()
