"""Shared fixtures: real platforms (uvicorn on loopback) on the in-process dev chain and on anvil,
on SQLite and on PostgreSQL; merchants with API keys and agent endpoints; funded agent wallets."""

from __future__ import annotations

import os

os.environ.setdefault("ETH_HASH_BACKEND", "pysha3")

from collections.abc import Iterator

import pytest

from tests.harness import (
    Deployment,
    PlatformHarness,
    postgres_database,
    start_anvil_platform,
    start_dev_platform,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def dev_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformHarness]:
    with start_dev_platform(tmp_path_factory.mktemp("dev-platform")) as harness:
        yield harness


@pytest.fixture(scope="session")
def anvil_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformHarness]:
    with start_anvil_platform(tmp_path_factory.mktemp("anvil-platform")) as harness:
        yield harness


@pytest.fixture(scope="session")
def postgres_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformHarness]:
    with (
        postgres_database() as url,
        start_dev_platform(tmp_path_factory.mktemp("pg-platform"), database_url=url) as harness,
    ):
        yield harness


@pytest.fixture(params=["dev", "anvil"])
def any_chain_platform(request: pytest.FixtureRequest) -> PlatformHarness:
    name = "dev_platform" if request.param == "dev" else "anvil_platform"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


@pytest.fixture
def deployment(dev_platform: PlatformHarness) -> Deployment:
    """A merchant on the dev-chain platform with a test key, a fixed-price endpoint and a funded agent."""
    return dev_platform.deploy()
