"""The busy-node proxy the pool tests and benchmarks run against (`tests.rpc_proxy`): it refuses a
sender's transactions past its pending limit with geth's error, passes everything else through,
and can be killed and started again on the same port."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from eth_account import Account

from tests.rpc_proxy import POOL_FULL, RpcProxy, sender_and_nonce
from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess
from x402mw.platform.chain.rpc import HttpJsonRpc, RpcError
from x402mw.platform.chain.transactions import Fees, TransactionSigner

pytestmark = [pytest.mark.anyio, pytest.mark.anvil]

SENDER, OTHER = ANVIL_DEV_KEYS[1], ANVIL_DEV_KEYS[2]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def node() -> Iterator[AnvilProcess]:
    with AnvilProcess(args=["--no-mining"]) as anvil:
        yield anvil


def _transfers(key: bytes, first: int, count: int) -> list[str]:
    signer = TransactionSigner(key, chain_id=31337)
    to = Account.from_key(key).address
    fees = Fees(10**10, 10**9)
    return [
        signer.sign_now(nonce, to, b"", gas=21_000, value=0, fees=fees).raw for nonce in range(first, first + count)
    ]


def test_a_transaction_names_its_sender_and_nonce() -> None:
    raw = _transfers(SENDER, 7, 1)[0]
    assert sender_and_nonce(raw) == (Account.from_key(SENDER).address, 7)


async def test_a_sender_past_its_limit_is_refused_as_a_full_pool(node: AnvilProcess) -> None:
    with RpcProxy(node.url, max_pending=4) as proxy:
        rpc = HttpJsonRpc(proxy.url)
        try:
            mined = int(await rpc.request("eth_getTransactionCount", [Account.from_key(SENDER).address, "latest"]), 16)
            raws = _transfers(SENDER, mined, 5)
            for raw in raws[:4]:
                await rpc.request("eth_sendRawTransaction", [raw])
            with pytest.raises(RpcError) as refused:
                await rpc.request("eth_sendRawTransaction", [raws[4]])
            assert (refused.value.code, refused.value.message) == (POOL_FULL["code"], POOL_FULL["message"])
            # Another sender is not held back by this one's transactions; in a batch, only the
            # refused call gets the error, the others their results, in order.
            other = Account.from_key(OTHER).address
            other_mined = int(await rpc.request("eth_getTransactionCount", [other, "latest"]), 16)
            mixed = [("eth_sendRawTransaction", [_transfers(OTHER, other_mined, 1)[0]]), ("eth_blockNumber", [])]
            sent, head = await rpc.batch(mixed)
            assert sent.startswith("0x") and head.startswith("0x")
            body = [
                {"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction", "params": [raws[4]]},
                {"jsonrpc": "2.0", "id": 2, "method": "eth_chainId", "params": []},
            ]
            replies = httpx.post(proxy.url, json=body, timeout=10).json()
            assert [reply.get("error") for reply in replies] == [POOL_FULL, None]
            assert replies[1]["result"] == "0x7a69"
            assert proxy.refused() == 2
            # Once a block takes the sender's transactions, it may send again.
            await rpc.request("evm_mine", [])
            assert await rpc.request("eth_sendRawTransaction", [raws[4]]) == sent_hash(raws[4])
        finally:
            await rpc.aclose()


async def test_a_killed_proxy_refuses_connections_until_it_starts_again(node: AnvilProcess) -> None:
    with RpcProxy(node.url) as proxy:
        rpc = HttpJsonRpc(proxy.url, timeout=2)
        try:
            assert await rpc.request("eth_chainId") == "0x7a69"
            proxy.kill()
            with pytest.raises(httpx.TransportError):
                await rpc.request("eth_chainId")
            proxy.start()
            assert await rpc.request("eth_chainId") == "0x7a69"
        finally:
            await rpc.aclose()


def sent_hash(raw: str) -> str:
    return "0x" + keccak256(bytes.fromhex(raw[2:])).hex()
