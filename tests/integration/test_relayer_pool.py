"""A pool of relayer accounts (`RelayerPool`) and their leases (`RelayerLeases`), on anvil behind the
busy-node proxy: sends spread over the accounts below their cap, work beyond every cap gets
`RelayerBusy` (nothing sent), a node's full pool is busy and not a refusal; processes share the
accounts through leases in the database (SQLite and PostgreSQL), follow the pool's size, top the
accounts up, and take over the accounts of one that stopped once its leases run out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from eth_account import Account
from sqlalchemy import select

from tests.harness import postgres_database
from tests.rpc_proxy import RpcProxy
from x402mw.cli import main
from x402mw.evm.keys import address_of
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess
from x402mw.platform.chain.devchain import DEV_CHAIN_ID
from x402mw.platform.chain.pool import RelayerPool
from x402mw.platform.chain.relayer import Relayer, RelayerBusy
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.clock import Clock, ManualClock
from x402mw.platform.db import tables
from x402mw.platform.db.engine import create_engine_for, sync_url
from x402mw.platform.db.schema import migrate
from x402mw.platform.services.relayer_leases import RelayerLeases, pool_key, set_pool_size

pytestmark = [pytest.mark.anyio, pytest.mark.anvil]

FUNDER = ANVIL_DEV_KEYS[1]
MAX_PENDING = 4


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def node() -> Iterator[AnvilProcess]:
    with AnvilProcess(args=["--no-mining"]) as anvil:
        yield anvil


@pytest.fixture(scope="module")
def proxy(node: AnvilProcess) -> Iterator[RpcProxy]:
    with RpcProxy(node.url, max_pending=MAX_PENDING) as running:
        yield running


@pytest.fixture
async def rpc(proxy: RpcProxy, anyio_backend: str) -> AsyncIterator[HttpJsonRpc]:
    client = HttpJsonRpc(proxy.url)
    yield client
    await client.request("evm_mine")  # leave nothing pending for the next test
    await client.aclose()


def _funded_keys(count: int) -> list[bytes]:
    return [Account.create().key for _ in range(count)]


async def _fund(rpc: HttpJsonRpc, keys: list[bytes]) -> None:
    for key in keys:
        await rpc.request("anvil_setBalance", [address_of(key), hex(10**19)])


@contextlib.asynccontextmanager
async def _pool(
    rpc: HttpJsonRpc, keys: list[bytes], clock: Clock | None = None, **options: float
) -> AsyncIterator[RelayerPool]:
    pool = RelayerPool(rpc, Relayer(rpc, FUNDER, chain_id=31337), chain_id=31337, clock=clock, **options)  # type: ignore[arg-type]
    try:
        for key in keys:
            await pool.hold(key)
        yield pool
    finally:
        await pool.aclose()


async def test_sends_go_to_the_least_loaded_account_below_its_cap(rpc: HttpJsonRpc) -> None:
    keys = _funded_keys(2)
    await _fund(rpc, keys)
    async with _pool(rpc, keys, cap=MAX_PENDING, wait=0.2) as pool:
        to = Account.create().address
        sent = await asyncio.gather(*(pool.send(to, b"", gas=21_000) for _ in range(2 * MAX_PENDING)))
        assert len(set(sent)) == 2 * MAX_PENDING
        assert [pool.in_flight(address_of(key)) for key in keys] == [MAX_PENDING, MAX_PENDING]
        with pytest.raises(RelayerBusy):  # every account is at its cap: nothing is sent
            await pool.send(to, b"", gas=21_000)
        await rpc.request("evm_mine")
        receipts = await asyncio.gather(*(pool.wait_for_receipt(tx, timeout=10) for tx in sent))
        assert {r.status for r in receipts} == {1}
        assert [pool.in_flight(address_of(key)) for key in keys] == [0, 0]
        # Room again: the next send goes out, from the account that has the least in flight.
        assert await pool.send(to, b"", gas=21_000)


async def test_a_node_that_takes_no_more_from_an_account_is_busy_not_a_refusal(rpc: HttpJsonRpc) -> None:
    keys = _funded_keys(2)
    await _fund(rpc, keys)
    # Our cap is above the node's: the node's refusal sends the work to the other account.
    clock = ManualClock()
    async with _pool(rpc, keys[:1], clock, cap=64, wait=0.2) as pool:
        to = Account.create().address
        sent = [await pool.send(to, b"", gas=21_000) for _ in range(MAX_PENDING)]
        with pytest.raises(RelayerBusy):
            await pool.send(to, b"", gas=21_000)
        await pool.hold(keys[1])
        sent.append(await pool.send(to, b"", gas=21_000))  # the first is held back a while: the other sends
        await rpc.request("evm_mine")
        for tx in sent:
            assert (await pool.wait_for_receipt(tx, timeout=10)).status == 1
        # The refused nonce was given back: the first account's next send is not stuck behind a gap.
        first = address_of(keys[0])
        assert int(await rpc.request("eth_getTransactionCount", [first, "latest"]), 16) == MAX_PENDING
        clock.advance(1.0)  # past the time an account the node called full is left alone
        more = [await pool.send(to, b"", gas=21_000) for _ in range(2)]
        await rpc.request("evm_mine")
        for tx in more:
            assert (await pool.wait_for_receipt(tx, timeout=10)).status == 1


# -- leases ---------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'platform.sqlite3'}"
        migrate(url)
        yield url
        return
    with postgres_database() as url:
        migrate(url)
        yield url


@pytest.fixture
def relayer_key() -> bytes:
    return Account.create().key


@contextlib.asynccontextmanager
async def _process(
    rpc: HttpJsonRpc, database_url: str, relayer_key: bytes, name: str, clock: Clock | None = None
) -> AsyncIterator[RelayerLeases]:
    engine = create_engine_for(database_url)
    pool = RelayerPool(rpc, Relayer(rpc, relayer_key, chain_id=31337), chain_id=31337)
    leases = RelayerLeases(
        engine, pool, chain_id=31337, relayer_key=relayer_key, lease=3.0, gas_floor=10**16, holder=name, clock=clock
    )
    try:
        yield leases
    finally:
        await leases.aclose()
        await pool.aclose()
        await engine.dispose()


async def _holders(database_url: str) -> dict[str, str | None]:
    engine = create_engine_for(database_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(select(tables.relayer_accounts.c.address, tables.relayer_accounts.c.holder))
            return {row.address: row.holder for row in rows}
    finally:
        await engine.dispose()


async def _rounds(*processes: RelayerLeases, times: int = 1) -> None:
    for _ in range(times):
        for process in processes:
            await process.round()
            await asyncio.sleep(0)
        await process.pool.rpc.request("evm_mine")  # the top-ups


def test_the_pool_is_sized_from_the_command_line(database_url: str, tmp_path: Path) -> None:
    def resize(chain_id: int, size: int) -> Any:
        arguments = ["platform", "relayer-pool", "--chain-id", str(chain_id), "--size", str(size)]
        return CliRunner().invoke(
            main, [*arguments, "--data-dir", str(tmp_path)], env={"X402MW_DATABASE_URL": database_url}
        )

    def pools() -> list[Any]:
        with engine.connect() as conn:
            return list(conn.execute(select(tables.relayer_pools.c.chain_id, tables.relayer_pools.c.size)).all())

    engine = sa.create_engine(sync_url(database_url))
    try:
        # a chain the platform has no pool on, and the dev chain: one line each, exit status 1, nothing written
        unknown, dev = resize(8453, 16), resize(DEV_CHAIN_ID, 16)
        assert unknown.exit_code == 1 and unknown.output.count("\n") == 1, unknown.output
        assert "chain 8453 has no relayer pool on this platform (no chain has one)" in unknown.output
        assert dev.exit_code == 1 and dev.output.count("\n") == 1, dev.output
        assert "in-process dev chain" in dev.output
        assert pools() == []
        with engine.begin() as conn:  # as a platform started with a pool on anvil writes it
            conn.execute(sa.insert(tables.relayer_pools).values(chain_id=31337, size=4, updated_at=datetime.now(UTC)))
        result = resize(31337, 12)
        assert result.exit_code == 0, result.output
        assert "has 12 accounts" in result.output
        assert pools() == [(31337, 12)]
        still_unknown = resize(8453, 16)
        assert still_unknown.exit_code == 1 and "(the chains with one: 31337)" in still_unknown.output
    finally:
        engine.dispose()
    refused = CliRunner().invoke(main, ["platform", "relayer-pool", "--chain-id", "31337", "--size", "0"])
    assert refused.exit_code == 2 and "--size" in refused.output


async def test_processes_share_the_pool_through_leases_and_follow_its_size(
    rpc: HttpJsonRpc, database_url: str, relayer_key: bytes
) -> None:
    await _fund(rpc, [relayer_key])
    accounts = [address_of(pool_key(relayer_key, slot)) for slot in range(4)]
    async with _process(rpc, database_url, relayer_key, "a") as a, _process(rpc, database_url, relayer_key, "b") as b:
        await set_pool_size(a.engine, 31337, 4)
        mining = asyncio.create_task(_mine_while(rpc))
        try:
            await a.round()
            assert sorted(a.pool.addresses) == sorted(accounts), "alone, a process takes the whole pool"
            await _rounds(b, a, b)
            held = await _holders(database_url)
            assert sorted(held) == sorted(accounts)
            assert sorted(held.values()) == ["a", "a", "b", "b"], "two processes: two accounts each"
            assert set(a.pool.addresses).isdisjoint(b.pool.addresses)
            for address in accounts:  # topped up from the funding account before any use
                assert int(await rpc.request("eth_getBalance", [address, "latest"]), 16) >= 10**16
            assert a.pool.available and b.pool.available

            await set_pool_size(a.engine, 31337, 2)  # no restart: the next rounds follow
            await _rounds(a, b, a, b)
            assert len(a.pool.addresses) == len(b.pool.addresses) == 1
            assert sorted([*a.pool.addresses, *b.pool.addresses]) == sorted(accounts[:2])
        finally:
            mining.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await mining


async def test_the_accounts_of_a_stopped_process_are_taken_over_once_their_leases_run_out(
    rpc: HttpJsonRpc, database_url: str, relayer_key: bytes
) -> None:
    await _fund(rpc, [relayer_key])
    mining = asyncio.create_task(_mine_while(rpc))
    clock = ManualClock()  # b's: moved past a's leases instead of waiting for them
    try:
        async with _process(rpc, database_url, relayer_key, "b", clock) as b:
            engine = create_engine_for(database_url)
            stopped = RelayerPool(rpc, Relayer(rpc, relayer_key, chain_id=31337), chain_id=31337)
            a = RelayerLeases(engine, stopped, chain_id=31337, relayer_key=relayer_key, lease=3.0, gas_floor=10**16)
            await set_pool_size(engine, 31337, 2)
            await a.round()
            await b.round()
            assert len(stopped.addresses) == 2 and b.pool.addresses == []
            # a sends, then stops without a word: a transaction of it is still waiting to be mined
            await rpc.request("evm_setIntervalMining", [0])
            left = await stopped.send(Account.create().address, b"", gas=21_000)
            await stopped.aclose()
            await engine.dispose()
            await b.round()
            assert b.pool.addresses == [], "the leases have not run out yet"
            clock.advance(3.5)  # a's leases (3 s) have run out
            await b.round()
            assert sorted(b.pool.addresses) == sorted(stopped.addresses or await _addresses(database_url))
            # b read the nonces from the node: its sends come after what a left, and both are mined
            sent = await b.pool.send(Account.create().address, b"", gas=21_000)
            await rpc.request("evm_mine")
            assert (await b.pool.wait_for_receipt(left, timeout=10)).status == 1
            assert (await b.pool.wait_for_receipt(sent, timeout=10)).status == 1
    finally:
        mining.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await mining


async def _addresses(database_url: str) -> list[str]:
    return list(await _holders(database_url))


async def _mine_while(rpc: HttpJsonRpc) -> None:
    """Mine a block every 0.2 s (the node does not mine by itself here), for the top-ups."""
    while True:
        await asyncio.sleep(0.2)
        with contextlib.suppress(Exception):
            await rpc.request("evm_mine")


async def test_an_account_that_cannot_pay_for_gas_gets_no_work_and_the_pool_is_not_ready(
    rpc: HttpJsonRpc, database_url: str, relayer_key: bytes
) -> None:
    account = address_of(pool_key(relayer_key, 0))
    engine = create_engine_for(database_url)
    pool = RelayerPool(rpc, Relayer(rpc, relayer_key, chain_id=31337), chain_id=31337, wait=0.1)
    leases = RelayerLeases(engine, pool, chain_id=31337, relayer_key=relayer_key, gas_floor=0, holder="poor")
    try:
        await set_pool_size(engine, 31337, 1)
        await rpc.request("anvil_setBalance", [account, "0x0"])
        await leases.round()
        assert pool.addresses == [account]
        assert not pool.available, "no held account can pay: /readyz fails for the chain"
        with pytest.raises(RelayerBusy):
            await pool.send(Account.create().address, b"", gas=21_000)
        await rpc.request("anvil_setBalance", [account, hex(10**18)])
        await leases.round()
        assert pool.available
    finally:
        await leases.aclose()
        await pool.aclose()
        await engine.dispose()
