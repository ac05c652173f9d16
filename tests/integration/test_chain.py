"""The chain layer on a real chain: our EIP-3009 token, the relayer and both JSON-RPC transports,
on the in-process dev chain and on anvil."""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest
from eth_abi.abi import encode as abi_encode
from eth_account import Account

from tests.chain_fixtures import (
    RECEIVE,
    ChainUnderTest,
    anvil_node,
    anyio_backend,
    chain,
    new_key,
    sign_authorization,
    sign_cancel,
)
from tests.waiting import eventually_async
from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess
from x402mw.platform.chain.relayer import Relayer
from x402mw.platform.chain.rpc import HttpJsonRpc, RpcError
from x402mw.platform.chain.token import (
    authorization_state,
    balance_of,
    encode_receive_with_authorization,
    encode_transfer_with_authorization,
    load_token_artifact,
    read_domain,
)
from x402mw.platform.chain.transactions import Fees, RevertError, TransactionSigner

__all__ = ["anvil_node", "anyio_backend", "chain"]

pytestmark = pytest.mark.anyio

_SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
_AUTH_ARGS = "address,address,uint256,uint256,uint256,bytes32"


async def _funded_payer(chain: ChainUnderTest, amount: int = 10_000_000) -> bytes:
    key = new_key()
    await chain.mint(Account.from_key(key).address, amount)
    return key


def _authorize(
    chain: ChainUnderTest,
    key: bytes,
    to: str,
    value: int,
    *,
    valid_after: int | None = None,
    valid_before: int | None = None,
    nonce: bytes | None = None,
) -> bytes:
    now = int(time.time())
    nonce = nonce or new_key()
    after = now - 600 if valid_after is None else valid_after
    before = now + 600 if valid_before is None else valid_before
    signature = sign_authorization(
        key, chain.domain(), to=to, value=value, valid_after=after, valid_before=before, nonce=nonce
    )
    return encode_transfer_with_authorization(
        from_=Account.from_key(key).address,
        to=to,
        value=value,
        valid_after=after,
        valid_before=before,
        nonce=nonce,
        signature=signature,
    )


async def _settle(chain: ChainUnderTest, data: bytes) -> int:
    receipt = await chain.relayer.wait_for_receipt(await chain.relayer.send(chain.usdc, data), timeout=30)
    return receipt.status


async def _eth(chain: ChainUnderTest, address: str) -> int:
    return int(await chain.rpc.request("eth_getBalance", [address, "latest"]), 16)


async def test_read_domain(chain: ChainUnderTest) -> None:
    assert await read_domain(chain.rpc, chain.usdc) == ("USD Coin", "2")
    assert await read_domain(chain.rpc, chain.tokens["EURC"]) == ("EURC", "2")


async def test_transfer_with_authorization_moves_balances_and_relayer_pays_gas(chain: ChainUnderTest) -> None:
    payer = await _funded_payer(chain)
    payer_address = Account.from_key(payer).address
    payee = Account.from_key(new_key()).address
    nonce = new_key()
    data = _authorize(chain, payer, payee, 1_250_000, nonce=nonce)
    relayer_eth = await _eth(chain, chain.relayer.address)

    await chain.relayer.simulate(chain.usdc, data)
    tx_hash = await chain.relayer.send(chain.usdc, data)
    receipt = await chain.relayer.wait_for_receipt(tx_hash)

    assert receipt.status == 1
    assert receipt.transaction_hash.lower() == tx_hash.lower()
    assert receipt.gas_used > 21_000
    assert await balance_of(chain.rpc, chain.usdc, payer_address) == 10_000_000 - 1_250_000
    assert await balance_of(chain.rpc, chain.usdc, payee) == 1_250_000
    assert await _eth(chain, payer_address) == 0
    assert await _eth(chain, chain.relayer.address) < relayer_eth
    assert await authorization_state(chain.rpc, chain.usdc, payer_address, nonce) is True
    assert await authorization_state(chain.rpc, chain.usdc, payer_address, new_key()) is False


async def test_reused_nonce_reverts_with_the_reason(chain: ChainUnderTest) -> None:
    payer = await _funded_payer(chain)
    data = _authorize(chain, payer, chain.relayer.address, 1)
    assert await _settle(chain, data) == 1
    with pytest.raises(RevertError) as caught:
        await chain.relayer.simulate(chain.usdc, data)
    assert caught.value.reason == "authorization is used or canceled"


@pytest.mark.parametrize(
    ("window", "reason"),
    [((-600, -10), "authorization is expired"), ((3600, 7200), "authorization is not yet valid")],
)
async def test_authorization_outside_its_window_reverts(
    chain: ChainUnderTest, window: tuple[int, int], reason: str
) -> None:
    payer = await _funded_payer(chain)
    now = int(time.time())
    data = _authorize(chain, payer, chain.relayer.address, 1, valid_after=now + window[0], valid_before=now + window[1])
    with pytest.raises(RevertError) as caught:
        await chain.relayer.simulate(chain.usdc, data)
    assert caught.value.reason == reason


async def test_wrong_signer_high_s_and_overdraft_are_refused(chain: ChainUnderTest) -> None:
    payer = await _funded_payer(chain, amount=5)
    payer_address = Account.from_key(payer).address
    now = int(time.time())
    nonce = new_key()
    args = {"to": chain.relayer.address, "valid_after": now - 60, "valid_before": now + 600, "nonce": nonce}

    forged = sign_authorization(new_key(), chain.domain(), value=1, **args)
    data = encode_transfer_with_authorization(from_=payer_address, value=1, signature=forged, **args)
    with pytest.raises(RevertError, match=r"^invalid signature$"):
        await chain.relayer.simulate(chain.usdc, data)

    good = sign_authorization(payer, chain.domain(), value=1, **args)
    r, s, v = good[:32], int.from_bytes(good[32:64], "big"), good[64]
    twin = r + (_SECP256K1_N - s).to_bytes(32, "big") + bytes([55 - v])  # same signer, high s
    data = encode_transfer_with_authorization(from_=payer_address, value=1, signature=twin, **args)
    with pytest.raises(RevertError, match=r"^invalid signature$"):
        await chain.relayer.simulate(chain.usdc, data)

    greedy = sign_authorization(payer, chain.domain(), value=6, **args)
    data = encode_transfer_with_authorization(from_=payer_address, value=6, signature=greedy, **args)
    with pytest.raises(RevertError, match=r"^insufficient balance$"):
        await chain.relayer.simulate(chain.usdc, data)


async def test_concurrent_simulations_each_get_their_own_answer(chain: ChainUnderTest) -> None:
    # they go to the node as one JSON-RPC batch; the reverting ones must not fail their neighbours
    payer = await _funded_payer(chain, amount=100)
    to = chain.relayer.address
    calls = [_authorize(chain, payer, to, 1) for _ in range(12)]
    calls[3] = _authorize(chain, payer, to, 1_000)  # more than the payer holds
    calls[8] = _authorize(chain, payer, to, 1, valid_before=int(time.time()) - 1)  # expired
    results = await asyncio.gather(
        *(chain.relayer.simulate(chain.usdc, data) for data in calls), return_exceptions=True
    )
    assert [i for i, result in enumerate(results) if result is not None] == [3, 8]
    assert isinstance(results[3], RevertError) and results[3].reason == "insufficient balance"
    assert isinstance(results[8], RevertError) and "expired" in results[8].reason


async def test_bytes_signature_overload(chain: ChainUnderTest) -> None:
    payer = await _funded_payer(chain)
    payer_address = Account.from_key(payer).address
    payee = Account.from_key(new_key()).address
    now = int(time.time())
    nonce = new_key()
    signature = sign_authorization(
        payer, chain.domain(), to=payee, value=7, valid_after=now - 60, valid_before=now + 600, nonce=nonce
    )
    selector = keccak256(f"transferWithAuthorization({_AUTH_ARGS},bytes)".encode())[:4]
    data = selector + abi_encode(
        ["address", "address", "uint256", "uint256", "uint256", "bytes32", "bytes"],
        [payer_address, payee, 7, now - 60, now + 600, nonce, signature],
    )
    assert await _settle(chain, data) == 1
    assert await balance_of(chain.rpc, chain.usdc, payee) == 7
    assert await authorization_state(chain.rpc, chain.usdc, payer_address, nonce) is True


async def test_receive_with_authorization_needs_the_payee_as_caller(chain: ChainUnderTest) -> None:
    payer = await _funded_payer(chain)
    payer_address = Account.from_key(payer).address
    now = int(time.time())

    def receive(to: str) -> bytes:
        nonce = new_key()
        window = {"valid_after": now - 60, "valid_before": now + 600, "nonce": nonce}
        signature = sign_authorization(payer, chain.domain(), to=to, value=3, primary_type=RECEIVE, **window)
        return encode_receive_with_authorization(from_=payer_address, to=to, value=3, signature=signature, **window)

    with pytest.raises(RevertError, match=r"^caller must be the payee$"):
        await chain.relayer.simulate(chain.usdc, receive(Account.from_key(new_key()).address))
    before = await balance_of(chain.rpc, chain.usdc, chain.relayer.address)
    assert await _settle(chain, receive(chain.relayer.address)) == 1
    assert await balance_of(chain.rpc, chain.usdc, chain.relayer.address) == before + 3


async def test_cancel_authorization_burns_the_nonce(chain: ChainUnderTest) -> None:
    payer = await _funded_payer(chain)
    payer_address = Account.from_key(payer).address
    nonce = new_key()
    data = _authorize(chain, payer, chain.relayer.address, 1, nonce=nonce)
    cancel = sign_cancel(payer, chain.domain(), nonce)
    selector = keccak256(b"cancelAuthorization(address,bytes32,uint8,bytes32,bytes32)")[:4]
    call = selector + abi_encode(
        ["address", "bytes32", "uint8", "bytes32", "bytes32"],
        [payer_address, nonce, cancel[64], cancel[:32], cancel[32:64]],
    )
    assert await _settle(chain, call) == 1
    assert await authorization_state(chain.rpc, chain.usdc, payer_address, nonce) is True
    with pytest.raises(RevertError, match=r"^authorization is used or canceled$"):
        await chain.relayer.simulate(chain.usdc, data)


async def test_a_reverting_transaction_is_mined_with_status_zero(chain: ChainUnderTest) -> None:
    payer = await _funded_payer(chain)
    data = _authorize(chain, payer, chain.relayer.address, 1)
    assert await _settle(chain, data) == 1
    assert await _settle(chain, data) == 0


async def test_pipelined_sends_get_distinct_nonces(chain: ChainUnderTest) -> None:
    count = 200 if chain.kind == "anvil" else 60
    payer = await _funded_payer(chain, amount=count)
    payee = Account.from_key(new_key()).address
    calls = [_authorize(chain, payer, payee, 1) for _ in range(count)]
    hashes: list[str] = [""] * count

    async def send(index: int) -> None:
        hashes[index] = await chain.relayer.send(chain.usdc, calls[index])

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(send, index)
    receipts = [None] * count

    async def wait(index: int) -> None:
        receipts[index] = await chain.relayer.wait_for_receipt(hashes[index], timeout=60)  # type: ignore[call-overload]

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(wait, index)

    assert all(receipt is not None and receipt.status == 1 for receipt in receipts)
    transactions = await chain.rpc.batch([("eth_getTransactionByHash", [h]) for h in hashes])
    nonces = {int(tx["nonce"], 16) for tx in transactions}
    assert len(nonces) == count
    assert await balance_of(chain.rpc, chain.usdc, payee) == count


async def test_send_resyncs_after_another_sender_used_the_nonce(chain: ChainUnderTest) -> None:
    payer = await _funded_payer(chain)
    twin = Relayer(chain.rpc, chain.relayer_key, chain_id=chain.chain_id)
    await twin.start()
    try:
        first = await twin.wait_for_receipt(await twin.send(chain.usdc, _authorize(chain, payer, twin.address, 1)))
    finally:
        await twin.aclose()
    assert first.status == 1
    # chain.relayer's local nonce is now one behind the node: the send must resync and go through.
    assert await _settle(chain, _authorize(chain, payer, chain.relayer.address, 1)) == 1


async def test_a_refused_send_leaves_no_nonce_gap(chain: ChainUnderTest) -> None:
    payer = await _funded_payer(chain)
    calls = [_authorize(chain, payer, chain.relayer.address, 1) for _ in range(5)]
    outcomes: list[object] = [None] * 5

    async def send(index: int) -> None:
        gas = 10 if index == 1 else 120_000  # below the intrinsic gas: the node refuses it
        try:
            tx_hash = await chain.relayer.send(chain.usdc, calls[index], gas=gas)
            outcomes[index] = (await chain.relayer.wait_for_receipt(tx_hash, timeout=20)).status
        except RpcError as exc:
            outcomes[index] = exc

    async with anyio.create_task_group() as group:
        for index in range(5):
            group.start_soon(send, index)
    assert isinstance(outcomes[1], RpcError)
    assert [outcomes[i] for i in (0, 2, 3, 4)] == [1, 1, 1, 1]
    # Nothing is left queued behind a gap: the node's pending and mined nonces agree.
    pending, latest = await chain.rpc.batch(
        [
            ("eth_getTransactionCount", [chain.relayer.address, "pending"]),
            ("eth_getTransactionCount", [chain.relayer.address, "latest"]),
        ]
    )
    assert pending == latest
    assert await _settle(chain, _authorize(chain, payer, chain.relayer.address, 1)) == 1


async def test_wait_for_receipt_counts_confirmations_and_times_out(chain: ChainUnderTest) -> None:
    payer = await _funded_payer(chain)
    tx_hash = await chain.relayer.send(chain.usdc, _authorize(chain, payer, chain.relayer.address, 1))
    mined = await chain.relayer.wait_for_receipt(tx_hash)
    confirmed = []

    async def wait_confirmed() -> None:
        confirmed.append(await chain.relayer.wait_for_receipt(tx_hash, confirmations=2, timeout=10))

    async with anyio.create_task_group() as group:
        group.start_soon(wait_confirmed)
        await anyio.sleep(0.1)
        assert confirmed == []
        for _ in range(2):
            await chain.rpc.request("evm_mine", [])
    assert confirmed == [mined]
    head = int(await chain.rpc.request("eth_blockNumber", []), 16)
    assert head >= mined.block_number + 2

    with pytest.raises(TimeoutError):
        await chain.relayer.wait_for_receipt("0x" + "ab" * 32, timeout=0.2)


async def test_a_receipt_in_a_block_seen_before_it_was_awaited_is_found_without_a_new_block(
    chain: ChainUnderTest,
) -> None:
    # The receipt poller fetches receipts when the head moves, and for transactions awaited since
    # its last look: one mined in a block it had already seen must not wait for the next block
    # (on an automining chain that block may never come).
    payer = await _funded_payer(chain)
    pending = asyncio.ensure_future(chain.relayer.wait_for_receipt("0x" + "cd" * 32, timeout=30))  # keeps it polling
    try:
        tx_hash = await chain.relayer.send(chain.usdc, _authorize(chain, payer, chain.relayer.address, 1))
        # both waits well within the 30 s of the receipt awaited above, which keeps the poller polling
        mined = await eventually_async(
            lambda: chain.rpc.request("eth_getTransactionReceipt", [tx_hash]),
            what="the transaction mined",
            timeout=12,
            interval=0.01,
        )
        block = int(mined["blockNumber"], 16)
        await eventually_async(  # the poller has seen the block that holds tx_hash
            lambda: chain.relayer._receipts._head >= block,
            what=f"the poller to see block {block}",
            timeout=12,
            interval=0.01,
        )
        receipt = await chain.relayer.wait_for_receipt(tx_hash, timeout=3)
        assert (receipt.status, receipt.block_number) == (1, block)
    finally:
        pending.cancel()
        with pytest.raises((asyncio.CancelledError, TimeoutError)):
            await pending


async def test_rpc_errors_and_batches(chain: ChainUnderTest) -> None:
    with pytest.raises(RpcError) as caught:
        await chain.rpc.request("eth_noSuchMethod", [])
    assert caught.value.code == -32601 or "not" in caught.value.message.lower()
    chain_id, block = await chain.rpc.batch([("eth_chainId", []), ("eth_getBlockByNumber", ["latest", False])])
    assert int(chain_id, 16) == chain.chain_id
    assert int(block["number"], 16) >= 1


def test_the_artifact_has_both_overloads() -> None:
    artifact = load_token_artifact()
    assert artifact["contractName"] == "X402Token"
    assert artifact["bytecode"].startswith("0x6")
    overloads = {}
    for entry in artifact["abi"]:
        if entry["type"] == "function":
            overloads.setdefault(entry["name"], set()).add(tuple(i["type"] for i in entry["inputs"])[-1:])
    for name in ("transferWithAuthorization", "receiveWithAuthorization", "cancelAuthorization"):
        assert overloads[name] == {("bytes32",), ("bytes",)}


@pytest.mark.anvil
async def test_http_client_against_anvil(anvil_node: AnvilProcess) -> None:
    rpc = HttpJsonRpc(anvil_node.url)
    try:
        assert int(await rpc.request("eth_chainId"), 16) == 31337
        assert await rpc.batch([]) == []
        accounts = await rpc.request("eth_accounts", [])
        expected = [Account.from_key(key).address.lower() for key in ANVIL_DEV_KEYS]
        assert [a.lower() for a in accounts[: len(ANVIL_DEV_KEYS)]] == expected
    finally:
        await rpc.aclose()


def test_relayer_signing_matches_eth_account() -> None:
    for index in range(50):
        key = new_key()
        signer = TransactionSigner(key, chain_id=31337 + index)
        fees = Fees(3 * 10**9 + index, 10**9 + index)
        to = None if index % 5 == 0 else Account.from_key(new_key()).address
        data, gas, value = new_key() * (index % 4), 21_000 + index, index * 7
        signed = signer.sign_now(index, to, data, gas=gas, value=value, fees=fees)
        raw, tx_hash = bytes.fromhex(signed.raw[2:]), signed.hash
        tx: dict[str, object] = {
            "type": 2,
            "chainId": 31337 + index,
            "nonce": index,
            "gas": gas,
            "maxFeePerGas": fees.max_fee,
            "maxPriorityFeePerGas": fees.priority_fee,
            "value": value,
            "data": data,
        }
        if to is not None:
            tx["to"] = to
        expected = Account.sign_transaction(tx, key)
        assert raw == bytes(expected.raw_transaction)
        assert tx_hash == "0x" + bytes(expected.hash).hex()
