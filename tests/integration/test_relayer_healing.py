"""The relayer heals what a node does to its transactions, on anvil: a restart that drops the pool,
a nonce nobody sent, a transaction the base fee outgrew, a node that cannot be reached.

Mining is paused (``evm_setIntervalMining 0``) where a transaction must still be in the pool when
the fault strikes; the nodes mine a block a second otherwise (``--block-time 1``), as a real chain
does, so that a transaction waits in the pool for a while.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from eth_account import Account

from tests.chain_fixtures import sign_authorization
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.healing import TransactionDropped
from x402mw.platform.chain.relayer import ChainUnavailable, Relayer
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.chain.token import authorization_state, balance_of, encode_transfer_with_authorization, mint

pytestmark = pytest.mark.anyio

RELAYER_KEY = ANVIL_DEV_KEYS[1]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Node:
    anvil: AnvilProcess
    rpc: HttpJsonRpc
    usdc: str
    relayer: Relayer
    payer_key: bytes

    @property
    def payer(self) -> str:
        return str(Account.from_key(self.payer_key).address)

    def transfer(self, to: str, value: int, *, valid_for: int = 600) -> tuple[bytes, bytes, int]:
        """Calldata of a transfer of ``value`` from the payer to ``to``, its nonce, and its validBefore."""
        nonce = os.urandom(32)
        valid_before = int(time.time()) + valid_for
        domain = {"name": "USD Coin", "version": "2", "chainId": self.anvil.chain_id, "verifyingContract": self.usdc}
        signature = sign_authorization(
            self.payer_key, domain, to=to, value=value, valid_after=0, valid_before=valid_before, nonce=nonce
        )
        data = encode_transfer_with_authorization(
            from_=self.payer,
            to=to,
            value=value,
            valid_after=0,
            valid_before=valid_before,
            nonce=nonce,
            signature=signature,
        )
        return data, nonce, valid_before

    async def pause_mining(self) -> None:
        await self.rpc.request("evm_setIntervalMining", [0])


async def _node(tmp_path: Path, *args: str) -> AsyncIterator[Node]:
    anvil = AnvilProcess(args=[*args, "--state", str(tmp_path / "anvil-state.json")])
    anvil.start()
    rpc = HttpJsonRpc(anvil.url)
    relayer = Relayer(rpc, RELAYER_KEY, chain_id=anvil.chain_id, reconcile_interval=0.2, stuck_after=1.0)
    try:
        tokens = await deploy_test_tokens(rpc, ANVIL_DEV_KEYS[0])
        payer_key = os.urandom(32)
        await mint(rpc, ANVIL_DEV_KEYS[0], tokens["USDC"], Account.from_key(payer_key).address, 10**9)
        await relayer.start()
        yield Node(anvil, rpc, tokens["USDC"], relayer, payer_key)
    finally:
        await relayer.aclose()
        await rpc.aclose()
        anvil.stop()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    """An anvil that mines a block a second and keeps its chain across a graceful restart."""
    async for made in _node(tmp_path, "--block-time", "1"):
        yield made


@pytest.fixture
async def automining_node(tmp_path: Path) -> AsyncIterator[Node]:
    async for made in _node(tmp_path):
        yield made


async def test_transactions_the_node_lost_in_a_restart_are_sent_again(node: Node) -> None:
    payee = Account.create().address
    await node.pause_mining()
    hashes = [await node.relayer.send(node.usdc, node.transfer(payee, 1_000 + i)[0]) for i in range(5)]
    node.anvil.restart()  # the pool is gone; the mined chain is kept (--state); mining resumes
    assert not await node.rpc.request("eth_getTransactionByHash", [hashes[0]])
    receipts = [await node.relayer.wait_for_receipt(h, timeout=30) for h in hashes]
    assert [r.status for r in receipts] == [1] * 5
    assert [r.transaction_hash for r in receipts] == hashes  # the same signed transactions, byte for byte
    assert await balance_of(node.rpc, node.usdc, payee) == sum(1_000 + i for i in range(5))
    mined, pending = await node.relayer.nonces()
    assert mined == pending


async def test_a_lost_transaction_whose_call_expired_is_given_up_and_its_nonce_filled(node: Node) -> None:
    payee = Account.create().address
    await node.pause_mining()
    doomed, doomed_nonce, valid_before = node.transfer(payee, 7, valid_for=2)
    first = await node.relayer.send(node.usdc, doomed, valid_until=valid_before)
    later = await node.relayer.send(node.usdc, node.transfer(payee, 5)[0])
    node.anvil.restart()
    with pytest.raises(TransactionDropped) as dropped:
        await node.relayer.wait_for_receipt(first, timeout=30)
    assert dropped.value.tx_hash == first
    assert (await node.relayer.wait_for_receipt(later, timeout=30)).status == 1
    assert await balance_of(node.rpc, node.usdc, payee) == 5
    assert not await authorization_state(node.rpc, node.usdc, node.payer, doomed_nonce)
    mined, pending = await node.relayer.nonces()
    assert mined == pending  # the dropped transaction's nonce was filled: nothing waits behind it


async def test_a_nonce_nobody_sent_is_filled(automining_node: Node) -> None:
    node = automining_node
    mined, _ = await node.relayer.nonces()
    node.relayer._nonces.next = mined + 1  # as if another process of the account took a nonce and stopped
    tx_hash = await node.relayer.send(node.usdc, node.transfer(Account.create().address, 3)[0])
    assert not await node.rpc.request("eth_getTransactionReceipt", [tx_hash])  # queued behind the gap
    receipt = await node.relayer.wait_for_receipt(tx_hash, timeout=30)
    assert receipt.status == 1
    sent = await _transactions_from(node, node.relayer.address, receipt.block_number)
    filler = sent[mined]
    assert filler["to"].lower() == node.relayer.address.lower() and int(filler["value"], 16) == 0


async def _transactions_from(node: Node, sender: str, head: int) -> dict[int, dict[str, str]]:
    """The mined transactions of ``sender`` in blocks up to ``head``, by nonce."""
    found = {}
    for number in range(head + 1):
        block = await node.rpc.request("eth_getBlockByNumber", [hex(number), True])
        for tx in block["transactions"]:
            if tx["from"].lower() == sender.lower():
                found[int(tx["nonce"], 16)] = tx
    return found


async def test_a_transaction_the_base_fee_outgrew_is_sent_again_at_the_going_fee(node: Node) -> None:
    payee = Account.create().address
    await node.pause_mining()
    tx_hash = await node.relayer.send(node.usdc, node.transfer(payee, 11)[0])
    await node.rpc.request("anvil_setNextBlockBaseFeePerGas", [hex(500 * 10**9)])
    await node.rpc.request("evm_setIntervalMining", [1])
    receipt = await node.relayer.wait_for_receipt(tx_hash, timeout=30)
    assert receipt.status == 1
    assert receipt.transaction_hash != tx_hash  # the replacement, at a fee above the new base fee
    assert await balance_of(node.rpc, node.usdc, payee) == 11


async def test_an_unreachable_node_fails_fast_and_the_relayer_recovers(automining_node: Node) -> None:
    node = automining_node
    payee = Account.create().address
    node.anvil.stop()
    with pytest.raises(ChainUnavailable):
        await node.relayer.send(node.usdc, node.transfer(payee, 2)[0])
    assert not node.relayer.available
    node.anvil.start()  # the same port: the relayer's next reconciliation finds it
    await node.relayer.reconcile()
    assert node.relayer.available
    receipt = await node.relayer.wait_for_receipt(await node.relayer.send(node.usdc, node.transfer(payee, 2)[0]))
    assert receipt.status == 1


async def test_two_relayers_of_one_account_share_it_without_stalls(automining_node: Node) -> None:
    node = automining_node
    twin = Relayer(node.rpc, RELAYER_KEY, chain_id=node.anvil.chain_id, reconcile_interval=0.2)
    await twin.start()
    payee = Account.create().address
    try:
        hashes = []
        for index in range(12):
            sender = node.relayer if index % 2 else twin
            hashes.append((sender, await sender.send(node.usdc, node.transfer(payee, 1)[0])))
        receipts = [await sender.wait_for_receipt(h, timeout=30) for sender, h in hashes]
    finally:
        await twin.aclose()
    assert all(r.status == 1 for r in receipts)
    assert await balance_of(node.rpc, node.usdc, payee) == 12
