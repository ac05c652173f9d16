"""Several RPC providers of one chain (`FailoverJsonRpc`): reads fail over and are hedged, a signed
transaction goes to every provider, a provider that stops answering or lags is taken out and put
back once it answers again. Two busy-node proxies (`tests.rpc_proxy`) in front of one anvil are two
providers of one chain; a platform paying through them keeps paying while one is killed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account

from tests.harness import PlatformHarness, platform_server
from tests.rpc_proxy import RpcProxy
from tests.sellers import asgi_transport, starlette_app
from tests.waiting import eventually_async
from x402mw.client import X402Auth
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.providers import FailoverJsonRpc
from x402mw.platform.chain.rpc import HttpJsonRpc, RpcError
from x402mw.platform.chain.transactions import Fees, TransactionSigner
from x402mw.platform.settings import ChainSettings, PlatformSettings

pytestmark = [pytest.mark.anyio, pytest.mark.anvil]

RELAYER = ANVIL_DEV_KEYS[1]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def node() -> Iterator[AnvilProcess]:
    with AnvilProcess() as anvil:
        yield anvil


@pytest.fixture
def proxies(node: AnvilProcess) -> Iterator[tuple[RpcProxy, RpcProxy]]:
    with RpcProxy(node.url, max_pending=64) as first, RpcProxy(node.url, max_pending=64) as second:
        yield first, second


@contextlib.asynccontextmanager
async def failover(*urls: str, **options: Any) -> AsyncIterator[FailoverJsonRpc]:
    rpc = FailoverJsonRpc([HttpJsonRpc(url, timeout=5) for url in urls], network="eip155:31337", **options)
    try:
        yield rpc
    finally:
        await rpc.aclose()


def _transfer(nonce: int) -> str:
    signer = TransactionSigner(RELAYER, chain_id=31337)
    return signer.sign_now(
        nonce, Account.from_key(RELAYER).address, b"", gas=21_000, value=0, fees=Fees(10**11, 10**9)
    ).raw


async def test_reads_go_on_to_the_next_provider_when_one_is_gone(proxies: tuple[RpcProxy, RpcProxy]) -> None:
    first, second = proxies
    async with failover(first.url, second.url, check_interval=3600) as rpc:
        assert await rpc.request("eth_chainId") == "0x7a69"
        first.kill()
        assert await rpc.request("eth_chainId") == "0x7a69"
        assert await rpc.batch([("eth_chainId", []), ("net_version", [])]) == ["0x7a69", "31337"]
        assert rpc.up == {"provider-0": False, "provider-1": True}
        with pytest.raises(RpcError):  # a node's refusal is an answer, not a fault of the provider
            await rpc.request("eth_no_such_method")
        assert rpc.up == {"provider-0": False, "provider-1": True}
        first.start()
        await rpc.check()
        assert rpc.up == {"provider-0": True, "provider-1": True}


async def test_a_slow_provider_is_hedged_by_the_next(node: AnvilProcess) -> None:
    # A provider that takes the connection and never answers: the read is asked of the next one.
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.read()  # until the client gives up and closes the connection
        finally:
            writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with failover(f"http://127.0.0.1:{port}", node.url, hedge_after=0.05, check_interval=3600) as rpc:
            assert await asyncio.wait_for(rpc.request("eth_chainId"), 3) == "0x7a69"
    finally:
        server.close()
        await server.wait_closed()


async def test_a_signed_transaction_goes_to_every_provider_once_by_hash(proxies: tuple[RpcProxy, RpcProxy]) -> None:
    first, second = proxies
    address = Account.from_key(RELAYER).address
    async with failover(first.url, second.url, check_interval=3600) as rpc:
        nonce = int(await rpc.request("eth_getTransactionCount", [address, "pending"]), 16)
        raw = _transfer(nonce)
        await rpc.request("evm_setAutomine", [False])
        try:
            # Both providers reach one node: one of them takes it, the other finds it known; a
            # success, and so is sending it again.
            sent = await rpc.request("eth_sendRawTransaction", [raw])
            assert await rpc.request("eth_sendRawTransaction", [raw]) == sent
            await rpc.request("evm_mine")
        finally:
            await rpc.request("evm_setAutomine", [True])
        first.kill()
        raw = _transfer(nonce + 1)
        (sent,) = await rpc.batch([("eth_sendRawTransaction", [raw])])
        assert (await rpc.request("eth_getTransactionByHash", [sent]))["nonce"] == hex(nonce + 1)
        assert int(await rpc.request("eth_getTransactionCount", [address, "latest"]), 16) == nonce + 2
        first.start()


async def test_a_provider_whose_head_lags_is_taken_out_until_it_catches_up() -> None:
    with AnvilProcess() as ahead, AnvilProcess() as behind:
        async with failover(ahead.url, behind.url, max_lag=3, check_interval=3600) as rpc:
            await rpc.check()
            assert rpc.up == {"provider-0": True, "provider-1": True}
            for _ in range(4):
                await rpc.request("evm_mine")  # reads go to the first provider: only it mines
            await rpc.check()
            assert rpc.up == {"provider-0": True, "provider-1": False}
            behind_rpc = HttpJsonRpc(behind.url)
            try:
                await behind_rpc.request("anvil_mine", ["0x4"])
            finally:
                await behind_rpc.aclose()
            await rpc.check()
            assert rpc.up == {"provider-0": True, "provider-1": True}


# -- a platform with two providers ---------------------------------------------------------------


@pytest.fixture
def two_provider_platform(
    node: AnvilProcess, proxies: tuple[RpcProxy, RpcProxy], tmp_path: Path
) -> Iterator[PlatformHarness]:
    async def deploy() -> dict[str, str]:
        rpc = HttpJsonRpc(node.url)
        try:
            return await deploy_test_tokens(rpc, ANVIL_DEV_KEYS[0])
        finally:
            await rpc.aclose()

    tokens = asyncio.run(deploy())
    settings = PlatformSettings(
        database_url=f"sqlite:///{tmp_path / 'platform.sqlite3'}",
        data_dir=tmp_path,
        chains=[
            ChainSettings.model_validate(
                {"rpc_url": [p.url for p in proxies], "tokens": tokens, "minter_key": ANVIL_DEV_KEYS[0].hex()}
            )
        ],
        relayer_key=RELAYER.hex(),
    )
    with platform_server(settings) as server:
        yield PlatformHarness(server)


async def test_payments_go_on_while_one_provider_is_killed_and_it_is_put_back(
    two_provider_platform: PlatformHarness, proxies: tuple[RpcProxy, RpcProxy]
) -> None:
    harness = two_provider_platform
    rpc = harness.chain.rpc
    assert isinstance(rpc, FailoverJsonRpc)
    deployment = await asyncio.to_thread(harness.deploy)
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    auth = X402Auth(deployment.agent, receipt_signer=harness.platform.receipt_address)
    relayer = Account.from_key(RELAYER).address

    def nonce() -> int:
        return int(harness.server.call(lambda p: rpc.request("eth_getTransactionCount", [relayer, "latest"])), 16)

    before = await asyncio.to_thread(nonce)
    statuses: list[int] = []
    killed = asyncio.Event()

    async def agent() -> None:
        async with httpx.AsyncClient(
            transport=asgi_transport(app), base_url="http://testserver", auth=auth, timeout=60
        ) as client:
            for _ in range(10):
                statuses.append((await client.get("/weather")).status_code)
                if len(statuses) == 12:
                    await asyncio.to_thread(proxies[0].kill)
                    killed.set()

    await asyncio.gather(*(agent() for _ in range(4)))
    assert killed.is_set()
    assert statuses == [200] * 40
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 40 * 10_000
    assert await asyncio.to_thread(nonce) - before == 40, "one transaction per payment, none sent twice"
    assert rpc.up == {
        "0:http://127.0.0.1:" + str(proxies[0].port): False,
        "1:http://127.0.0.1:" + str(proxies[1].port): True,
    }

    await asyncio.to_thread(proxies[0].start)
    # the provider is probed back in once it answers
    await eventually_async(lambda: rpc.up, until=lambda up: all(up.values()), what="both providers up")
