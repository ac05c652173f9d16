"""The platform on the embedded defaults keeps its dev chain in the data dir, records which chain its
database belongs to, and refuses to pair its records with any other chain (or with none)."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, insert, select

from x402mw.errors import ConfigurationError
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.devchain import DEV_CHAIN_ID
from x402mw.platform.chain.token import balance_of
from x402mw.platform.db import tables
from x402mw.platform.db.engine import sync_url
from x402mw.platform.db.schema import migrate
from x402mw.platform.runtime import Platform
from x402mw.platform.settings import PlatformSettings

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _settings(data_dir: Path, database: Path | None = None) -> PlatformSettings:
    database = database or data_dir / "platform.sqlite3"
    return PlatformSettings(database_url=f"sqlite:///{database}", data_dir=data_dir, run_worker=False)


def _recorded(settings: PlatformSettings) -> list[tuple[int, str, dict[str, str]]]:
    engine = create_engine(sync_url(settings.database_url.get_secret_value()))
    try:
        with engine.connect() as conn:
            chains = tables.embedded_chains
            rows = conn.execute(select(chains.c.chain_id, chains.c.genesis_hash, chains.c.tokens)).all()
    finally:
        engine.dispose()
    return [(row[0], row[1], row[2]) for row in rows]


async def _first_start(settings: PlatformSettings) -> tuple[str, str]:
    """Start, mint some coins to a new address, stop; the chain's genesis hash and that address."""
    platform = await Platform.start(settings)
    try:
        chain = next(iter(platform.chains))
        assert chain.dev is not None
        holder = address_of(new_private_key())
        await chain.dev.mint("USDC", holder, 1234)
        return chain.dev.genesis_hash, holder
    finally:
        await platform.aclose()


async def test_the_chain_is_recorded_at_its_first_start_and_comes_back_at_the_next(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    genesis, holder = await _first_start(settings)
    [(chain_id, recorded, tokens)] = _recorded(settings)
    assert (chain_id, recorded) == (DEV_CHAIN_ID, genesis)

    platform = await Platform.start(settings)
    try:
        chain = next(iter(platform.chains))
        assert chain.dev is not None and chain.dev.genesis_hash == genesis
        assert chain.dev.tokens == tokens
        assert await balance_of(chain.rpc, tokens["USDC"], holder) == 1234
        await chain.dev.mint("USDC", holder, 1)  # the faucet's minter carries on from its nonce
        assert await balance_of(chain.rpc, tokens["USDC"], holder) == 1235
    finally:
        await platform.aclose()


async def test_records_without_their_chain_are_refused(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    genesis, _ = await _first_start(settings)
    shutil.rmtree(tmp_path / "devchain")
    with pytest.raises(ConfigurationError) as refused:
        await Platform.start(settings)
    message = str(refused.value)
    assert f"belong to the dev chain with genesis {genesis}" in message
    assert f"{tmp_path / 'devchain'} is not there" in message
    assert f"delete the data dir ({tmp_path})" in message
    assert not (tmp_path / "devchain").exists()  # nothing made in its place
    # and nothing made by the refusal lets a later start pass
    with pytest.raises(ConfigurationError, match="is not there"):
        await Platform.start(settings)


async def test_records_and_another_chain_are_refused(tmp_path: Path) -> None:
    ours, theirs = _settings(tmp_path / "ours"), _settings(tmp_path / "theirs")
    await _first_start(ours)
    other_genesis, _ = await _first_start(theirs)
    shutil.rmtree(tmp_path / "ours" / "devchain")
    shutil.copytree(tmp_path / "theirs" / "devchain", tmp_path / "ours" / "devchain")
    with pytest.raises(ConfigurationError, match=f"genesis {other_genesis}\\) is not the chain the database's records"):
        await Platform.start(ours)


async def test_a_new_database_adopts_a_kept_chain(tmp_path: Path) -> None:
    genesis, holder = await _first_start(_settings(tmp_path))
    fresh = _settings(tmp_path, tmp_path / "another.sqlite3")
    platform = await Platform.start(fresh)
    try:
        chain = next(iter(platform.chains))
        assert chain.dev is not None and chain.dev.genesis_hash == genesis
        assert await balance_of(chain.rpc, chain.dev.tokens["USDC"], holder) == 1234
    finally:
        await platform.aclose()
    assert [row[1] for row in _recorded(fresh)] == [genesis]


async def test_records_from_before_the_chain_was_kept_are_refused(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    migrate(settings.database_url.get_secret_value())
    engine = create_engine(sync_url(settings.database_url.get_secret_value()))
    with engine.begin() as conn:  # the deposit watcher had read the old chain up to block 40
        conn.execute(
            insert(tables.chain_cursors).values(
                chain_id=DEV_CHAIN_ID, block_number=40, block_hash="0x" + "11" * 32, updated_at=datetime.now(UTC)
            )
        )
    engine.dispose()
    with pytest.raises(ConfigurationError, match="from an x402mw that did not keep the dev chain"):
        await Platform.start(settings)
    assert not (tmp_path / "devchain").exists()


async def test_a_second_process_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    platform = await Platform.start(settings)
    try:
        with pytest.raises(ConfigurationError, match="in use by another process"):
            await Platform.start(settings.model_copy())
    finally:
        await platform.aclose()
