"""The dev chain kept in a state file: it comes back as it was, a crash loses only what nobody saw
mined, and a file it cannot trust is refused with a message that says what to do."""

from __future__ import annotations

import asyncio
import json
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from x402mw.errors import ConfigurationError
from x402mw.evm.eip712 import TokenDomain, TransferAuthorization, random_nonce, sign_transfer
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.devchain import DEV_CHAIN_ID, DevChain, start_dev_chain
from x402mw.platform.chain.devstate import DevChainState
from x402mw.platform.chain.relayer import Relayer
from x402mw.platform.chain.token import balance_of, encode_transfer_with_authorization

pytestmark = pytest.mark.anyio

TRANSFER = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _start(directory: Path, relayer_key: bytes, funded: list[str] | None = None) -> DevChain:
    state = await asyncio.to_thread(DevChainState.open, directory)
    return await start_dev_chain(relayer_address=address_of(relayer_key), fund_addresses=funded or [], state=state)


def _transfer(chain: DevChain, payer: bytes, to: str, value: int) -> bytes:
    token = chain.tokens["USDC"]
    auth = TransferAuthorization(address_of(payer), to, value, 0, 2**48, random_nonce())
    return encode_transfer_with_authorization(
        from_=auth.from_address,
        to=to,
        value=value,
        valid_after=0,
        valid_before=2**48,
        nonce=auth.nonce,
        signature=sign_transfer(payer, TokenDomain("USD Coin", "2", chain.chain_id, token), auth),
    )


def _frame(kind: int, payload: bytes) -> bytes:
    head = struct.pack(">BII", kind, len(payload), zlib.crc32(payload))
    return head + struct.pack(">I", zlib.crc32(head)) + payload


async def _rpc(chain: DevChain, method: str, *params: object) -> Any:
    return await chain.rpc.request(method, list(params))


async def test_a_stopped_chain_comes_back_as_it_was(tmp_path: Path) -> None:
    relayer_key, payer = new_private_key(), new_private_key()
    payee = address_of(new_private_key())
    chain = await _start(tmp_path, relayer_key, [address_of(payer)])
    relayer = Relayer(chain.rpc, relayer_key, chain_id=chain.chain_id)
    await relayer.start()
    hashes = [await relayer.send(chain.tokens["USDC"], _transfer(chain, payer, payee, n)) for n in (1, 2, 3)]
    receipts = [await _rpc(chain, "eth_getTransactionReceipt", h) for h in hashes]
    # sent but not yet sealed when the chain stops: a clean stop keeps it too
    last = await relayer.send(chain.tokens["USDC"], _transfer(chain, payer, payee, 4))
    await relayer.aclose()
    await chain.aclose()
    sealed_head = int(str(receipts[-1]["blockNumber"]), 16)
    before = (chain.identity, sealed_head)

    again = await _start(tmp_path, relayer_key, [address_of(payer)])
    try:
        assert again.identity == before[0]
        assert [await _rpc(again, "eth_getTransactionReceipt", h) for h in hashes] == receipts
        assert await balance_of(again.rpc, again.tokens["USDC"], payee) == 1 + 2 + 3 + 4
        assert (await _rpc(again, "eth_getTransactionReceipt", last))["status"] == "0x1"
        logs = await _rpc(
            again, "eth_getLogs", {"fromBlock": "0x0", "address": again.tokens["USDC"], "topics": [TRANSFER]}
        )
        assert [log["transactionHash"] for log in logs][-4:] == [*hashes, last]
        old_block = await _rpc(again, "eth_getBlockByNumber", hex(before[1]), False)
        assert old_block["hash"] == receipts[-1]["blockHash"]
        # the nonce carries on where it was, and the chain takes new transactions
        relayer = Relayer(again.rpc, relayer_key, chain_id=again.chain_id)
        await relayer.start()
        assert await relayer.nonces() == (4, 4)
        receipt = await relayer.wait_for_receipt(
            await relayer.send(again.tokens["USDC"], _transfer(again, payer, payee, 5))
        )
        assert receipt.status == 1 and receipt.block_number > before[1]
        await relayer.aclose()
        # the wallets funded at the first start are not funded again
        assert await balance_of(again.rpc, again.tokens["USDC"], address_of(payer)) == 10**12 - 15
    finally:
        await again.aclose()


async def test_a_crash_loses_only_the_block_being_built(tmp_path: Path) -> None:
    relayer_key, payer = new_private_key(), new_private_key()
    payee = address_of(new_private_key())
    chain = await _start(tmp_path / "live", relayer_key, [address_of(payer)])
    relayer = Relayer(chain.rpc, relayer_key, chain_id=chain.chain_id)
    await relayer.start()
    seen = await relayer.send(chain.tokens["USDC"], _transfer(chain, payer, payee, 7))
    receipt = await _rpc(chain, "eth_getTransactionReceipt", seen)
    unseen = await relayer.send(chain.tokens["USDC"], _transfer(chain, payer, payee, 8))
    # What a SIGKILL now would leave: the file as it is, with the unsealed transaction in memory only.
    shutil.copytree(tmp_path / "live", tmp_path / "crashed")
    await relayer.aclose()
    await chain.aclose()

    after = await _start(tmp_path / "crashed", relayer_key)
    try:
        assert await _rpc(after, "eth_getTransactionReceipt", seen) == receipt
        assert await _rpc(after, "eth_getTransactionReceipt", unseen) is None
        assert await balance_of(after.rpc, after.tokens["USDC"], payee) == 7
        relayer = Relayer(after.rpc, relayer_key, chain_id=after.chain_id)
        await relayer.start()
        assert (
            await relayer.wait_for_receipt(await relayer.send(after.tokens["USDC"], _transfer(after, payer, payee, 9)))
        ).status == 1
        await relayer.aclose()
    finally:
        await after.aclose()


async def test_a_frame_cut_short_by_a_crash_is_dropped_and_a_damaged_one_refused(tmp_path: Path) -> None:
    relayer_key = new_private_key()
    chain = await _start(tmp_path, relayer_key)
    identity = chain.identity
    await chain.aclose()
    path = tmp_path / DevChainState.FILENAME
    whole = path.read_bytes()
    path.write_bytes(whole + _frame(1, b"x" * 1000)[:200])
    again = await _start(tmp_path, relayer_key)
    assert again.identity == identity
    await again.aclose()
    assert path.read_bytes() == whole  # the cut frame is gone, the next commit follows the last whole one

    damaged = bytearray(whole)
    damaged[len(whole) // 2] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(
        ConfigurationError,
        match=r"is damaged \(the frame at byte \d+ (has a damaged header|fails its checksum)\).*delete the whole",
    ):
        DevChainState.open(tmp_path)
    path.write_bytes(b"not a chain at all" * 4)
    with pytest.raises(ConfigurationError, match=r"is damaged .*not a dev chain state file"):
        DevChainState.open(tmp_path)


async def test_a_state_written_by_another_version_is_refused(tmp_path: Path) -> None:
    chain = await _start(tmp_path, new_private_key())
    await chain.aclose()
    path = tmp_path / DevChainState.FILENAME
    whole = path.read_bytes()
    path.write_bytes(whole[:16] + struct.pack(">I", 99) + whole[20:])
    with pytest.raises(ConfigurationError, match=r"written by another version \(format 99\)"):
        DevChainState.open(tmp_path)
    meta = json.dumps({"engine": "py-evm 0.1, eth-tester 0.1", "identity": chain.identity.as_json()}).encode()
    path.write_bytes(whole + _frame(1, meta))
    with pytest.raises(ConfigurationError, match=r"written by another version \(py-evm 0\.1, eth-tester 0\.1\)"):
        DevChainState.open(tmp_path)


async def test_an_interrupted_making_is_made_again_and_one_process_runs_a_chain(tmp_path: Path) -> None:
    state = DevChainState.open(tmp_path)
    with pytest.raises(ConfigurationError, match="in use by another process"):
        DevChainState.open(tmp_path)
    backend = state.new_backend()  # a new chain whose tokens were never deployed ...
    backend.mine_blocks(3)
    state.store.commit()
    state.close()  # ... and a crash before it was recorded as finished
    again = DevChainState.open(tmp_path)
    assert again.identity is None
    chain = await start_dev_chain(relayer_address=address_of(new_private_key()), state=again)
    try:
        assert await _rpc(chain, "eth_blockNumber") == hex(3)  # 2 deployments and 1 funding: made anew
    finally:
        await chain.aclose()
    assert DevChainState.open(tmp_path).identity == chain.identity


async def test_transactions_are_found_through_the_index_and_unknown_ones_are_not() -> None:
    chain = await start_dev_chain(relayer_address=address_of(new_private_key()))
    try:
        assert chain.chain_id == DEV_CHAIN_ID
        minted = await chain.mint("USDC", address_of(new_private_key()), 5)
        await _rpc(chain, "evm_mine", hex(3))
        receipt = await _rpc(chain, "eth_getTransactionReceipt", minted)
        transaction = await _rpc(chain, "eth_getTransactionByHash", minted)
        assert receipt["transactionHash"] == transaction["hash"] == minted
        assert receipt["blockNumber"] == transaction["blockNumber"] == hex(4)
        unknown = "0x" + "ab" * 32
        assert await _rpc(chain, "eth_getTransactionReceipt", unknown) is None
        assert await _rpc(chain, "eth_getTransactionByHash", unknown) is None
        # a transaction in blocks undone by evm_revert is gone, though py-evm's index still names it
        snapshot = await _rpc(chain, "evm_snapshot")
        undone = await chain.mint("USDC", address_of(new_private_key()), 6)
        await _rpc(chain, "evm_mine", hex(2))
        assert await _rpc(chain, "evm_revert", snapshot) is True
        assert await _rpc(chain, "eth_getTransactionReceipt", undone) is None
        assert await _rpc(chain, "eth_getTransactionByHash", undone) is None
        assert await _rpc(chain, "eth_getTransactionReceipt", minted) == receipt
    finally:
        await chain.aclose()
