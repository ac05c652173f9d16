"""The x402 ``batch-settlement`` escrow (``X402BatchSettlement``) and its EIP-3009 and Permit2 deposit
collectors at their canonical addresses, on the dev chain and on anvil: deposits through each
collector, vouchers of many channels claimed in one call, one transfer settling them, cooperative
refunds with their nonce, a timed withdrawal raced by a claim, and the escrow's invariants (never more
claimed than a voucher signed or the channel holds, a withdrawal or refund never takes claimed funds, a
refund nonce used once, a voucher of the wrong key refused), also as a hypothesis property against a
model; and what the x402 Foundation SDK's client and authorizer sign is accepted unchanged."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from eth_abi.abi import encode as abi_encode
from eth_account import Account
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.chain_fixtures import RECEIVE, ChainUnderTest, anvil_node, anyio_backend, chain, new_key, sign_authorization
from tests.contract_helpers import call_error, chain_now, error_selector, funded_key
from x402mw.evm.batch_settlement import (
    BATCH_SETTLEMENT_ADDRESS,
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
    PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
    ZERO_ADDRESS,
    ChannelConfig,
    ChannelDomain,
    VoucherClaim,
    channel_id,
    claim_batch_digest,
    erc3009_deposit_nonce,
    permit2_deposit_digest,
    refund_digest,
    voucher_digest,
)
from x402mw.evm.eip712 import TokenDomain, sign_digest
from x402mw.evm.keccak import keccak256
from x402mw.evm.permit2 import PERMIT2_ADDRESS, permit2612_digest
from x402mw.platform.chain.channels import (
    EVENTS,
    ChannelSnapshot,
    claim_calldata,
    claim_with_signature_calldata,
    deposit_calldata,
    eip2612_permit_data,
    erc3009_collector_data,
    finalize_withdraw_calldata,
    initiate_withdraw_calldata,
    multicall_calldata,
    permit2_collector_data,
    read_channel,
    read_channel_id,
    read_receiver,
    refund_calldata,
    refund_with_signature_calldata,
    settle_calldata,
)
from x402mw.platform.chain.contracts import CANONICAL_CONTRACTS, runtime_code
from x402mw.platform.chain.relayer import transact
from x402mw.platform.chain.rpc import RpcError
from x402mw.platform.chain.token import balance_of, permit_nonce
from x402mw.platform.chain.transactions import TxReceipt

__all__ = ["anvil_node", "anyio_backend", "chain"]

pytestmark = pytest.mark.anyio

_MAX = 2**256 - 1
_DELAY = 900
_GAS = 1_500_000


def _address(key: bytes) -> str:
    return str(Account.from_key(key).address)


def _salt() -> int:
    return int.from_bytes(os.urandom(32), "big")


def _approve(spender: str, value: int) -> bytes:
    return keccak256(b"approve(address,uint256)")[:4] + abi_encode(["address", "uint256"], [spender, value])


def _collect(payer: str, token: str, amount: int, channel: bytes, data: bytes) -> bytes:
    selector = keccak256(b"collect(address,address,uint256,bytes32,bytes)")[:4]
    return selector + abi_encode(
        ["address", "address", "uint256", "bytes32", "bytes"], [payer, token, amount, channel, data]
    )


@dataclass
class Channel:
    """One channel on ``chain``: the payer's key (and, if any, its voucher-signing authorizer's), the
    receiver and its authorizer's key; the receiver side's keys have gas."""

    chain: ChainUnderTest
    payer_key: bytes
    receiver_key: bytes
    authorizer_key: bytes
    payer_authorizer_key: bytes | None = None
    delay: int = _DELAY
    salt: bytes = field(default_factory=lambda: os.urandom(32))

    @property
    def payer(self) -> str:
        return _address(self.payer_key)

    @property
    def receiver(self) -> str:
        return _address(self.receiver_key)

    @property
    def domain(self) -> ChannelDomain:
        return ChannelDomain(self.chain.chain_id)

    @property
    def config(self) -> ChannelConfig:
        payer_authorizer = ZERO_ADDRESS if self.payer_authorizer_key is None else _address(self.payer_authorizer_key)
        return ChannelConfig(
            self.payer,
            payer_authorizer,
            self.receiver,
            _address(self.authorizer_key),
            self.chain.usdc,
            self.delay,
            self.salt,
        )

    @property
    def id(self) -> bytes:
        return channel_id(self.domain, self.config)

    def voucher(self, ceiling: int, *, key: bytes | None = None) -> bytes:
        """The payer side's signature of a voucher for ``ceiling`` (or ``key``'s)."""
        signer = key or self.payer_authorizer_key or self.payer_key
        return sign_digest(signer, voucher_digest(self.domain, self.id, ceiling))

    def claim(self, ceiling: int, total: int, *, key: bytes | None = None) -> VoucherClaim:
        return VoucherClaim(self.config, ceiling, self.voucher(ceiling, key=key), total)

    def refund_signature(self, nonce: int, amount: int, *, key: bytes | None = None) -> bytes:
        return sign_digest(key or self.authorizer_key, refund_digest(self.domain, self.id, nonce, amount))

    async def state(self) -> ChannelSnapshot:
        return await read_channel(self.chain.rpc, self.id)


def batch_signature(channels: Sequence[Channel], claims: Sequence[VoucherClaim], key: bytes | None = None) -> bytes:
    return sign_digest(key or channels[0].authorizer_key, claim_batch_digest(channels[0].domain, claims))


@pytest.fixture(scope="module")
async def relayer_key(chain: ChainUnderTest) -> bytes:
    """Who sends deposits, claims with signature and settlements (a facilitator: anyone may)."""
    return await funded_key(chain)


@pytest.fixture(scope="module")
async def receiver_keys(chain: ChainUnderTest) -> tuple[bytes, bytes]:
    """A receiver and its receiver authorizer, both with gas (for the direct calls)."""
    return await funded_key(chain), await funded_key(chain)


async def _channel(
    chain: ChainUnderTest, receiver_keys: tuple[bytes, bytes], *, usdc: int = 10_000_000, **kw: Any
) -> Channel:
    payer_key = await funded_key(chain, usdc=usdc)
    return Channel(chain, payer_key, receiver_keys[0], receiver_keys[1], **kw)


async def _deposit_eip3009(channel: Channel, sender: bytes, amount: int, **changes: Any) -> TxReceipt:
    data = await _eip3009_deposit(channel, sender, amount, **changes)
    return await transact(channel.chain.rpc, sender, BATCH_SETTLEMENT_ADDRESS, data, gas=_GAS)


async def _eip3009_deposit(channel: Channel, sender: bytes, amount: int, **changes: Any) -> bytes:
    """Calldata of a deposit whose payer signed ``ReceiveWithAuthorization`` to the collector with
    the channel's nonce (``changes``: ``nonce_channel`` to bind another channel, ``to``, ``value``)."""
    salt = _salt()
    valid_before = await chain_now(channel.chain) + 3600
    nonce = erc3009_deposit_nonce(changes.get("nonce_channel", channel.id), salt)
    signature = sign_authorization(
        channel.payer_key,
        channel.chain.domain(),
        to=changes.get("to", ERC3009_DEPOSIT_COLLECTOR_ADDRESS),
        value=changes.get("value", amount),
        valid_after=0,
        valid_before=valid_before,
        nonce=nonce,
        primary_type=RECEIVE,
    )
    collector_data = erc3009_collector_data(0, valid_before, salt, signature)
    return deposit_calldata(channel.config, amount, ERC3009_DEPOSIT_COLLECTOR_ADDRESS, collector_data)


async def _permit2_deposit(
    channel: Channel, amount: int, *, witness_channel: bytes | None = None, eip2612: bytes = b""
) -> bytes:
    nonce = _salt()
    deadline = await chain_now(channel.chain) + 3600
    digest = permit2_deposit_digest(
        channel.chain.chain_id,
        token=channel.chain.usdc,
        amount=amount,
        nonce=nonce,
        deadline=deadline,
        channel=witness_channel or channel.id,
    )
    data = permit2_collector_data(nonce, deadline, sign_digest(channel.payer_key, digest), eip2612)
    return deposit_calldata(channel.config, amount, PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, data)


async def _logs(chain: ChainUnderTest, receipt: TxReceipt) -> list[tuple[str, list[bytes], bytes]]:
    """The escrow's events in ``receipt``: (name, topics after the first, data)."""
    names = {topic: name for name, topic in EVENTS.items()}
    found = await chain.rpc.request("eth_getTransactionReceipt", [receipt.transaction_hash])
    events = []
    for log in found["logs"]:
        if str(log["address"]).lower() != BATCH_SETTLEMENT_ADDRESS.lower():
            continue
        topics = [bytes.fromhex(str(t)[2:]) for t in log["topics"]]
        events.append((names[topics[0]], topics[1:], bytes.fromhex(str(log["data"])[2:])))
    return events


async def _refused(
    chain: ChainUnderTest, sender: bytes, data: bytes, error: str, *, to: str = BATCH_SETTLEMENT_ADDRESS
) -> None:
    assert await call_error(chain.rpc, _address(sender), to, data) == error_selector(error)


async def _escrow_usdc(chain: ChainUnderTest) -> int:
    return await balance_of(chain.rpc, chain.usdc, BATCH_SETTLEMENT_ADDRESS)


# --- placement -----------------------------------------------------------------------------------


async def test_the_escrow_and_collectors_sit_at_their_canonical_addresses(chain: ChainUnderTest) -> None:
    for address in (BATCH_SETTLEMENT_ADDRESS, ERC3009_DEPOSIT_COLLECTOR_ADDRESS, PERMIT2_DEPOSIT_COLLECTOR_ADDRESS):
        code = await chain.rpc.request("eth_getCode", [address, "latest"])
        assert bytes.fromhex(str(code)[2:]) == runtime_code(CANONICAL_CONTRACTS[address])
    answer = await chain.rpc.request(
        "eth_call",
        [{"to": BATCH_SETTLEMENT_ADDRESS, "data": "0x" + keccak256(b"DOMAIN_SEPARATOR()")[:4].hex()}, "latest"],
    )
    assert bytes.fromhex(str(answer)[2:]) == ChannelDomain(chain.chain_id).separator
    config = ChannelConfig(
        _address(new_key()), ZERO_ADDRESS, _address(new_key()), _address(new_key()), chain.usdc, 900, os.urandom(32)
    )
    assert await read_channel_id(chain.rpc, config) == channel_id(ChannelDomain(chain.chain_id), config)


# --- deposits --------------------------------------------------------------------------------------


async def test_a_deposit_through_the_eip3009_collector(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await _channel(chain, receiver_keys, usdc=5_000_000)
    held = await _escrow_usdc(chain)
    receipt = await _deposit_eip3009(channel, relayer_key, 3_000_000)
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 2_000_000
    assert await _escrow_usdc(chain) == held + 3_000_000
    assert await balance_of(chain.rpc, chain.usdc, ERC3009_DEPOSIT_COLLECTOR_ADDRESS) == 0
    assert await channel.state() == ChannelSnapshot(3_000_000, 0, 0, 0, 0)
    events = await _logs(chain, receipt)
    assert [name for name, _, _ in events] == ["ChannelCreated", "Deposited"]
    assert events[0][1] == [channel.id]
    created = abi_encode(["(address,address,address,address,address,uint40,bytes32)"], [channel.config.abi_tuple()])
    assert events[0][2] == created
    assert events[1][1] == [channel.id, bytes(12) + bytes.fromhex(_address(relayer_key)[2:])]
    assert events[1][2] == abi_encode(["uint128", "uint128"], [3_000_000, 3_000_000])

    # A top-up adds to the same channel and creates nothing.
    receipt = await _deposit_eip3009(channel, relayer_key, 2_000_000)
    assert [name for name, _, _ in await _logs(chain, receipt)] == ["Deposited"]
    assert (await channel.state()).balance == 5_000_000


async def test_an_eip3009_deposit_is_bound_to_its_channel_and_the_escrow(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await _channel(chain, receiver_keys)
    other = await _channel(chain, receiver_keys)
    # An authorization whose nonce names another channel does not verify for this one.
    data = await _eip3009_deposit(channel, relayer_key, 1_000, nonce_channel=other.id)
    error = await call_error(chain.rpc, _address(relayer_key), BATCH_SETTLEMENT_ADDRESS, data)
    assert error.startswith(error_selector("Error(string)")), error  # the token's "invalid signature"
    # The collector serves the escrow only: called directly, even with a good authorization, it refuses.
    salt = _salt()
    valid_before = await chain_now(chain) + 3600
    signature = sign_authorization(
        channel.payer_key,
        chain.domain(),
        to=ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
        value=1_000,
        valid_after=0,
        valid_before=valid_before,
        nonce=erc3009_deposit_nonce(channel.id, salt),
        primary_type=RECEIVE,
    )
    direct = _collect(
        channel.payer, chain.usdc, 1_000, channel.id, erc3009_collector_data(0, valid_before, salt, signature)
    )
    await _refused(chain, relayer_key, direct, "OnlyBatchSettlement()", to=ERC3009_DEPOSIT_COLLECTOR_ADDRESS)
    # The same authorization through the escrow deposits, once.
    good = deposit_calldata(
        channel.config,
        1_000,
        ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
        erc3009_collector_data(0, valid_before, salt, signature),
    )
    await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, good, gas=_GAS)
    assert (await channel.state()).balance == 1_000
    error = await call_error(chain.rpc, _address(relayer_key), BATCH_SETTLEMENT_ADDRESS, good)
    assert error.startswith(error_selector("Error(string)")), error  # "authorization is used or canceled"
    # Bad channels and amounts are refused before anything moves.
    bad_delay = Channel(chain, channel.payer_key, receiver_keys[0], receiver_keys[1], delay=899)
    await _refused(
        chain, relayer_key, await _eip3009_deposit(bad_delay, relayer_key, 1_000), "WithdrawDelayOutOfRange()"
    )
    too_long = Channel(chain, channel.payer_key, receiver_keys[0], receiver_keys[1], delay=2_592_001)
    await _refused(
        chain, relayer_key, await _eip3009_deposit(too_long, relayer_key, 1_000), "WithdrawDelayOutOfRange()"
    )
    await _refused(chain, relayer_key, await _eip3009_deposit(channel, relayer_key, 0), "ZeroDeposit()")
    no_code = deposit_calldata(channel.config, 1_000, _address(new_key()), b"")
    await _refused(chain, relayer_key, no_code, "InvalidCollector()")


async def test_a_deposit_through_the_permit2_collector(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await _channel(chain, receiver_keys, usdc=4_000_000)
    await transact(chain.rpc, channel.payer_key, chain.usdc, _approve(PERMIT2_ADDRESS, _MAX), gas=80_000)
    held = await _escrow_usdc(chain)
    # A permit whose witness names another channel is refused by Permit2.
    other = await _channel(chain, receiver_keys)
    stolen = await _permit2_deposit(channel, 1_000_000, witness_channel=other.id)
    await _refused(chain, relayer_key, stolen, "InvalidSigner()")
    receipt = await transact(
        chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, await _permit2_deposit(channel, 1_500_000), gas=_GAS
    )
    assert [name for name, _, _ in await _logs(chain, receipt)] == ["ChannelCreated", "Deposited"]
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 2_500_000
    assert await _escrow_usdc(chain) == held + 1_500_000
    assert (await channel.state()).balance == 1_500_000


async def test_a_gasless_permit2_deposit_with_an_eip2612_permit(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await _channel(chain, receiver_keys, usdc=2_000_000)  # it never sends a transaction
    deadline = await chain_now(chain) + 3600
    token_domain = TokenDomain("USD Coin", "2", chain.chain_id, chain.usdc)
    nonce = await permit_nonce(chain.rpc, chain.usdc, channel.payer)
    signed = sign_digest(
        channel.payer_key, permit2612_digest(token_domain, channel.payer, PERMIT2_ADDRESS, _MAX, nonce, deadline)
    )
    permit = eip2612_permit_data(_MAX, deadline, signed[64], signed[:32], signed[32:64])
    # Without the permit Permit2 has no allowance.
    error = await call_error(
        chain.rpc, _address(relayer_key), BATCH_SETTLEMENT_ADDRESS, await _permit2_deposit(channel, 700_000)
    )
    assert error.startswith(error_selector("Error(string)"))  # TRANSFER_FROM_FAILED
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        await _permit2_deposit(channel, 700_000, eip2612=permit),
        gas=_GAS,
    )
    assert (await channel.state()).balance == 700_000
    # The permit is spent; a second deposit with it still works (its failure is ignored, the allowance stays).
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        await _permit2_deposit(channel, 300_000, eip2612=permit),
        gas=_GAS,
    )
    assert (await channel.state()).balance == 1_000_000
    direct = _collect(channel.payer, chain.usdc, 1, channel.id, permit2_collector_data(1, deadline, b"\x00" * 65))
    await _refused(chain, relayer_key, direct, "OnlyBatchSettlement()", to=PERMIT2_DEPOSIT_COLLECTOR_ADDRESS)


# --- claims and settlement -------------------------------------------------------------------


async def test_many_channels_claimed_in_one_call_and_settled_in_one_transfer(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    receiver_key = new_key()  # a receiver of its own: its totals start at zero
    channels = []
    for i in range(6):
        payer_authorizer = new_key() if i % 2 else None
        channel = Channel(
            chain, await funded_key(chain, usdc=1_000_000), receiver_key, receiver_keys[1], payer_authorizer
        )
        await _deposit_eip3009(channel, relayer_key, 1_000_000)
        channels.append(channel)
    receiver = channels[0].receiver
    # Each payer signed a cumulative voucher; the server charged a part of each ceiling.
    claims = [c.claim(100_000 * (i + 1), 90_000 * (i + 1)) for i, c in enumerate(channels)]
    expected = sum(c.total_claimed for c in claims)
    data = claim_with_signature_calldata(claims, batch_signature(channels, claims))
    receipt = await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=_GAS)
    assert [name for name, _, _ in await _logs(chain, receipt)] == ["Claimed"] * 6
    for channel, claim in zip(channels, claims, strict=True):
        state = await channel.state()
        assert (state.balance, state.total_claimed) == (1_000_000, claim.total_claimed)
    assert await read_receiver(chain.rpc, receiver, chain.usdc) == (expected, 0)
    assert await balance_of(chain.rpc, chain.usdc, receiver) == 0  # claiming moves no token

    # The same batch again changes nothing (cumulative totals), and costs no signature check.
    await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=_GAS)
    assert await read_receiver(chain.rpc, receiver, chain.usdc) == (expected, 0)

    held = await _escrow_usdc(chain)
    receipt = await transact(
        chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, settle_calldata(receiver, chain.usdc), gas=_GAS
    )
    assert await balance_of(chain.rpc, chain.usdc, receiver) == expected
    assert await _escrow_usdc(chain) == held - expected
    assert await read_receiver(chain.rpc, receiver, chain.usdc) == (expected, expected)
    settled = await _logs(chain, receipt)
    assert [(name, data) for name, _, data in settled] == [("Settled", abi_encode(["uint128"], [expected]))]
    # Settling again is a no-op; so is settling a receiver with nothing claimed.
    receipt = await transact(
        chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, settle_calldata(receiver, chain.usdc), gas=_GAS
    )
    assert await _logs(chain, receipt) == []
    assert await balance_of(chain.rpc, chain.usdc, receiver) == expected

    # A later voucher claims the difference only.
    more = [channels[0].claim(500_000, 400_000)]
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        claim_with_signature_calldata(more, batch_signature(channels, more)),
        gas=_GAS,
    )
    assert await read_receiver(chain.rpc, receiver, chain.usdc) == (expected + 310_000, expected)
    # claim() directly, by the receiver, with settle in the same multicall.
    direct = [channels[1].claim(600_000, 600_000)]
    calls = multicall_calldata([claim_calldata(direct), settle_calldata(receiver, chain.usdc)])
    await transact(chain.rpc, chain.minter_key, receiver, b"", gas=21_000, value=10**17)  # gas for the receiver
    await transact(chain.rpc, receiver_key, BATCH_SETTLEMENT_ADDRESS, calls, gas=_GAS)
    assert await balance_of(chain.rpc, chain.usdc, receiver) == expected + 310_000 + 420_000


async def test_what_a_claim_refuses(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await _channel(chain, receiver_keys)
    await _deposit_eip3009(channel, relayer_key, 1_000_000)
    delegated = await _channel(chain, receiver_keys, payer_authorizer_key=new_key())
    await _deposit_eip3009(delegated, relayer_key, 1_000_000)

    def signed(claims: list[VoucherClaim], key: bytes | None = None) -> bytes:
        return claim_with_signature_calldata(claims, batch_signature([channel], claims, key))

    # Never more than the voucher's ceiling, never more than the channel holds.
    await _refused(chain, relayer_key, signed([channel.claim(500_000, 500_001)]), "ClaimExceedsCeiling()")
    await _refused(chain, relayer_key, signed([channel.claim(2_000_000, 1_000_001)]), "ClaimExceedsBalance()")
    # A voucher signed by a key other than the payer's, or by the payer when it delegated to an authorizer.
    await _refused(chain, relayer_key, signed([channel.claim(500_000, 400_000, key=new_key())]), "InvalidSignature()")
    await _refused(
        chain, relayer_key, signed([delegated.claim(500_000, 400_000, key=delegated.payer_key)]), "InvalidSignature()"
    )
    # A voucher for another amount than the one claimed with.
    forged = VoucherClaim(channel.config, 900_000, channel.voucher(100_000), 800_000)
    await _refused(chain, relayer_key, signed([forged]), "InvalidSignature()")
    # A batch not signed by the receiver authorizer, rows of different authorizers, an empty batch.
    await _refused(chain, relayer_key, signed([channel.claim(500_000, 400_000)], new_key()), "InvalidSignature()")
    stranger = Channel(chain, channel.payer_key, receiver_keys[0], new_key())
    rows = [channel.claim(500_000, 400_000), stranger.claim(1, 1)]
    await _refused(chain, relayer_key, signed(rows), "NotReceiverAuthorizer()")
    await _refused(chain, relayer_key, claim_with_signature_calldata([], b""), "EmptyBatch()")
    # claim() is for the receiver and its authorizer only; one bad row spoils the batch.
    await _refused(chain, relayer_key, claim_calldata([channel.claim(500_000, 400_000)]), "NotAuthorizedToClaim()")
    rows = [channel.claim(500_000, 400_000), channel.claim(500_000, 400_001, key=new_key())]
    await _refused(chain, receiver_keys[1], claim_calldata(rows), "InvalidSignature()")
    # The good rows: a delegated channel's voucher signed by its authorizer, claimed by the receiver.
    good = [channel.claim(500_000, 400_000), delegated.claim(300_000, 300_000)]
    await transact(chain.rpc, receiver_keys[0], BATCH_SETTLEMENT_ADDRESS, claim_calldata(good), gas=_GAS)
    assert (await channel.state()).total_claimed == 400_000
    assert (await delegated.state()).total_claimed == 300_000


# --- refunds ---------------------------------------------------------------------------------


async def test_a_cooperative_refund_uses_its_nonce_once(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await _channel(chain, receiver_keys, usdc=1_000_000)
    await _deposit_eip3009(channel, relayer_key, 1_000_000)
    claims = [channel.claim(300_000, 300_000)]
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        claim_with_signature_calldata(claims, batch_signature([channel], claims)),
        gas=_GAS,
    )

    signature = channel.refund_signature(0, 200_000)
    data = refund_with_signature_calldata(channel.config, 200_000, 0, signature)
    receipt = await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=_GAS)
    assert [name for name, _, _ in await _logs(chain, receipt)] == ["Refunded"]
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 200_000
    assert await channel.state() == ChannelSnapshot(800_000, 300_000, 0, 0, 1)
    # The same signature again: its nonce is used.
    await _refused(chain, relayer_key, data, "InvalidRefundNonce()")
    # Signed by another key, or for another amount than sent.
    await _refused(
        chain,
        relayer_key,
        refund_with_signature_calldata(channel.config, 1, 1, channel.refund_signature(1, 1, key=new_key())),
        "InvalidSignature()",
    )
    await _refused(
        chain,
        relayer_key,
        refund_with_signature_calldata(channel.config, 2, 1, channel.refund_signature(1, 1)),
        "InvalidSignature()",
    )
    # A direct refund by the receiver side advances the nonce too, invalidating what was signed for it.
    presigned = refund_with_signature_calldata(channel.config, 100_000, 1, channel.refund_signature(1, 100_000))
    await _refused(chain, relayer_key, refund_calldata(channel.config, 100_000), "NotAuthorizedToRefund()")
    await _refused(chain, receiver_keys[0], refund_calldata(channel.config, 0), "ZeroRefund()")
    await transact(
        chain.rpc, receiver_keys[0], BATCH_SETTLEMENT_ADDRESS, refund_calldata(channel.config, 100_000), gas=_GAS
    )
    await _refused(chain, relayer_key, presigned, "InvalidRefundNonce()")
    # A refund of more than is unclaimed returns the unclaimed part only: claimed funds stay.
    await transact(
        chain.rpc, receiver_keys[1], BATCH_SETTLEMENT_ADDRESS, refund_calldata(channel.config, 10**9), gas=_GAS
    )
    assert await channel.state() == ChannelSnapshot(300_000, 300_000, 0, 0, 3)
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 700_000
    # With nothing left unclaimed, a refund moves nothing and emits nothing, and still uses its nonce.
    data = refund_with_signature_calldata(channel.config, 5, 3, channel.refund_signature(3, 5))
    receipt = await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=_GAS)
    assert await _logs(chain, receipt) == []
    assert await channel.state() == ChannelSnapshot(300_000, 300_000, 0, 0, 4)
    # The claimed 300,000 are still the receiver's to settle.
    await transact(
        chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, settle_calldata(channel.receiver, chain.usdc), gas=_GAS
    )
    assert await balance_of(chain.rpc, chain.usdc, channel.receiver) >= 300_000


async def test_a_full_refund_closes_an_unclaimed_channel_and_it_opens_again(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await _channel(chain, receiver_keys, usdc=1_000_000)
    await _deposit_eip3009(channel, relayer_key, 600_000)
    data = refund_with_signature_calldata(channel.config, 600_000, 0, channel.refund_signature(0, 600_000))
    receipt = await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=_GAS)
    assert [name for name, _, _ in await _logs(chain, receipt)] == ["Refunded", "ChannelClosed"]
    assert await channel.state() == ChannelSnapshot(0, 0, 0, 0, 1)
    receipt = await _deposit_eip3009(channel, relayer_key, 400_000)
    assert [name for name, _, _ in await _logs(chain, receipt)] == ["ChannelCreated", "Deposited"]
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 600_000


# --- timed withdrawal ------------------------------------------------------------------------


async def _advance(chain: ChainUnderTest, seconds: int) -> None:
    """Move the chain's clock ``seconds`` past its latest block, and mine a block there."""
    await chain.rpc.request("evm_setNextBlockTimestamp", [hex(await chain_now(chain) + seconds)])
    await chain.rpc.request("evm_mine", [])


async def test_a_timed_withdrawal_raced_by_a_claim(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    channel = await _channel(chain, receiver_keys, usdc=1_000_000)
    await _deposit_eip3009(channel, relayer_key, 1_000_000)
    voucher = channel.claim(600_000, 600_000)  # signed by the payer, not claimed yet
    # Only the payer side may withdraw, and no more than is unclaimed.
    await _refused(chain, relayer_key, initiate_withdraw_calldata(channel.config, 1), "NotAuthorizedToWithdraw()")
    await _refused(
        chain,
        channel.payer_key,
        initiate_withdraw_calldata(channel.config, 1_000_001),
        "WithdrawAmountExceedsAvailable()",
    )
    await _refused(chain, channel.payer_key, initiate_withdraw_calldata(channel.config, 0), "NothingToWithdraw()")
    await _refused(chain, channel.payer_key, finalize_withdraw_calldata(channel.config), "WithdrawalNotPending()")
    receipt = await transact(
        chain.rpc,
        channel.payer_key,
        BATCH_SETTLEMENT_ADDRESS,
        initiate_withdraw_calldata(channel.config, 1_000_000),
        gas=_GAS,
    )
    started = await chain_now(chain)
    events = await _logs(chain, receipt)
    assert events == [
        ("WithdrawInitiated", [channel.id], abi_encode(["uint128", "uint40"], [1_000_000, started + _DELAY]))
    ]
    state = await channel.state()
    assert (state.withdraw_amount, state.withdraw_requested_at) == (1_000_000, started)
    await _refused(
        chain, channel.payer_key, initiate_withdraw_calldata(channel.config, 1), "WithdrawalAlreadyPending()"
    )
    await _refused(chain, channel.payer_key, finalize_withdraw_calldata(channel.config), "WithdrawDelayNotElapsed()")
    await _refused(chain, relayer_key, finalize_withdraw_calldata(channel.config), "NotAuthorizedToFinalizeWithdraw()")

    # The server sees the withdrawal and claims its voucher within the delay.
    await _advance(chain, _DELAY - 60)
    claims = [voucher]
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        claim_with_signature_calldata(claims, batch_signature([channel], claims)),
        gas=_GAS,
    )
    await _refused(chain, channel.payer_key, finalize_withdraw_calldata(channel.config), "WithdrawDelayNotElapsed()")
    await _advance(chain, 61)
    receipt = await transact(
        chain.rpc, channel.payer_key, BATCH_SETTLEMENT_ADDRESS, finalize_withdraw_calldata(channel.config), gas=_GAS
    )
    # The withdrawal took what was unclaimed only; the claim stands and settles.
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 400_000
    assert await channel.state() == ChannelSnapshot(600_000, 600_000, 0, 0, 0)
    finalized = await _logs(chain, receipt)
    assert [(name, data) for name, _, data in finalized] == [("WithdrawFinalized", abi_encode(["uint128"], [400_000]))]
    # After the withdrawal, the voucher's unclaimed ceiling finds nothing left.
    late = [channel.claim(700_000, 700_000)]
    await _refused(
        chain,
        relayer_key,
        claim_with_signature_calldata(late, batch_signature([channel], late)),
        "ClaimExceedsBalance()",
    )
    before = await balance_of(chain.rpc, chain.usdc, channel.receiver)
    await transact(
        chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, settle_calldata(channel.receiver, chain.usdc), gas=_GAS
    )
    assert await balance_of(chain.rpc, chain.usdc, channel.receiver) >= before + 600_000


async def test_a_refund_shrinks_or_cancels_a_pending_withdrawal(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    authorizer = new_key()
    channel = await _channel(chain, receiver_keys, usdc=1_000_000, payer_authorizer_key=authorizer)
    await _deposit_eip3009(channel, relayer_key, 1_000_000)
    await transact(chain.rpc, chain.minter_key, _address(authorizer), b"", gas=21_000, value=10**17)
    # The payer's authorizer may withdraw for it (the money goes to the payer).
    await transact(
        chain.rpc, authorizer, BATCH_SETTLEMENT_ADDRESS, initiate_withdraw_calldata(channel.config, 500_000), gas=_GAS
    )
    await transact(
        chain.rpc, receiver_keys[0], BATCH_SETTLEMENT_ADDRESS, refund_calldata(channel.config, 200_000), gas=_GAS
    )
    state = await channel.state()
    assert (state.balance, state.withdraw_amount) == (800_000, 300_000)
    await transact(
        chain.rpc, receiver_keys[0], BATCH_SETTLEMENT_ADDRESS, refund_calldata(channel.config, 300_000), gas=_GAS
    )
    state = await channel.state()
    assert (state.balance, state.withdraw_amount, state.withdraw_requested_at) == (500_000, 0, 0)
    await _refused(chain, authorizer, finalize_withdraw_calldata(channel.config), "WithdrawalNotPending()")
    assert await balance_of(chain.rpc, chain.usdc, channel.payer) == 500_000


# --- the Foundation SDK's payloads -----------------------------------------------------------


async def test_what_the_foundation_sdk_signs_is_accepted(
    chain: ChainUnderTest, relayer_key: bytes, receiver_keys: tuple[bytes, bytes]
) -> None:
    """The x402 Foundation's Python SDK (``x402`` 2.25.0) builds a deposit payload of each kind with
    its voucher, and signs a claim batch and a refund as a receiver authorizer; all go through here."""
    from x402.mechanisms.evm.batch_settlement.authorizer_signer import (
        LocalAuthorizerSigner,
        sign_claim_batch,
        sign_refund,
    )
    from x402.mechanisms.evm.batch_settlement.client.eip3009 import create_batch_settlement_eip3009_deposit_payload
    from x402.mechanisms.evm.batch_settlement.client.permit2 import create_batch_settlement_permit2_deposit_payload
    from x402.mechanisms.evm.batch_settlement.encoding import build_erc3009_collector_data, build_permit2_collector_data
    from x402.mechanisms.evm.batch_settlement.types import ChannelConfig as SdkConfig
    from x402.mechanisms.evm.batch_settlement.types import VoucherClaim as SdkClaim
    from x402.mechanisms.evm.signers import EthAccountSigner
    from x402.schemas import PaymentRequirements

    network = f"eip155:{chain.chain_id}"
    receiver, authorizer = (_address(k) for k in receiver_keys)
    requirements = PaymentRequirements(
        scheme="batch-settlement",
        network=network,
        asset=chain.usdc,
        amount="1000",
        pay_to=receiver,
        max_timeout_seconds=3600,
        extra={"receiverAuthorizer": authorizer, "withdrawDelay": _DELAY, "name": "USD Coin", "version": "2"},
    )
    configs = []
    for kind in ("eip3009", "permit2"):
        payer_key = await funded_key(chain, usdc=1_000_000)
        payer = _address(payer_key)
        if kind == "permit2":
            await transact(chain.rpc, payer_key, chain.usdc, _approve(PERMIT2_ADDRESS, _MAX), gas=80_000)
        sdk_config = SdkConfig(
            payer, ZERO_ADDRESS, receiver, authorizer, chain.usdc, _DELAY, "0x" + os.urandom(32).hex()
        )
        signer = EthAccountSigner(Account.from_key(payer_key))
        if kind == "eip3009":
            payload = create_batch_settlement_eip3009_deposit_payload(signer, requirements, sdk_config, 500_000, 1_000)
            auth3009 = payload.deposit.authorization.erc3009_authorization
            collector = ERC3009_DEPOSIT_COLLECTOR_ADDRESS
            data = build_erc3009_collector_data(
                auth3009.valid_after, auth3009.valid_before, auth3009.salt, auth3009.signature
            )
        else:
            payload = create_batch_settlement_permit2_deposit_payload(signer, requirements, sdk_config, 500_000, 1_000)
            auth2 = payload.deposit.authorization.permit2_authorization
            collector = PERMIT2_DEPOSIT_COLLECTOR_ADDRESS
            data = build_permit2_collector_data(auth2.nonce, auth2.deadline, auth2.signature)
        config = ChannelConfig(
            payer, ZERO_ADDRESS, receiver, authorizer, chain.usdc, _DELAY, bytes.fromhex(sdk_config.salt[2:])
        )
        assert "0x" + channel_id(ChannelDomain(chain.chain_id), config).hex() == payload.voucher.channel_id
        await transact(
            chain.rpc,
            relayer_key,
            BATCH_SETTLEMENT_ADDRESS,
            deposit_calldata(config, 500_000, collector, data),
            gas=_GAS,
        )
        assert (await read_channel(chain.rpc, bytes.fromhex(payload.voucher.channel_id[2:]))).balance == 500_000
        configs.append((config, sdk_config, payload.voucher))

    # The SDK's vouchers, claimed in one batch the SDK's authorizer signer signed.
    rows = [VoucherClaim(c, int(v.max_claimable_amount), bytes.fromhex(v.signature[2:]), 800) for c, _, v in configs]
    sdk_rows = [
        SdkClaim(channel=s, max_claimable_amount=v.max_claimable_amount, signature=v.signature, total_claimed="800")
        for _, s, v in configs
    ]
    batch = sign_claim_batch(LocalAuthorizerSigner(Account.from_key(receiver_keys[1])), sdk_rows, network)
    await transact(
        chain.rpc,
        relayer_key,
        BATCH_SETTLEMENT_ADDRESS,
        claim_with_signature_calldata(rows, bytes.fromhex(batch[2:])),
        gas=_GAS,
    )
    for _config, _, voucher in configs:
        assert (await read_channel(chain.rpc, bytes.fromhex(voucher.channel_id[2:]))).total_claimed == 800
    # The SDK authorizer's refund at the channel's nonce.
    config, _, voucher = configs[0]
    refund = sign_refund(
        LocalAuthorizerSigner(Account.from_key(receiver_keys[1])), voucher.channel_id, 100_000, 0, network
    )
    data = refund_with_signature_calldata(config, 100_000, 0, bytes.fromhex(refund[2:]))
    await transact(chain.rpc, relayer_key, BATCH_SETTLEMENT_ADDRESS, data, gas=_GAS)
    assert await read_channel(chain.rpc, bytes.fromhex(voucher.channel_id[2:])) == ChannelSnapshot(
        400_000, 800, 0, 0, 1
    )


# --- the invariants, as a property ---------------------------------------------------------------


@dataclass
class _Model:
    """What the escrow should hold for one channel of its own receiver, and the payer's wallet."""

    payer_usdc: int
    balance: int = 0
    claimed: int = 0
    ceiling: int = 0
    nonce: int = 0
    withdraw_amount: int = 0
    withdraw_at: int = 0
    settled: int = 0


_KINDS = [
    "deposit",
    "sign",
    "sign",
    "claim",
    "claim",
    "forged",
    "refund",
    "stale_refund",
    "initiate",
    "finalize",
    "advance",
    "settle",
]
_OPERATIONS = st.tuples(st.sampled_from(_KINDS), st.integers(0, 1000))
"""An operation and a number that sizes it (the scale is the operation's: see _run_operations)."""


async def _run_operations(chain: ChainUnderTest, relayer_key: bytes, operations: list[tuple[str, int]]) -> list[str]:
    """Run ``operations`` on a new channel, checking the chain against the model after each; what
    each did (``"claim: moved"`` when the escrow's state or a wallet changed, else ``"claim: held"``)."""
    funds = 1_000_000
    seen: list[str] = []
    before: tuple[object, ...] = (ChannelSnapshot(0, 0, 0, 0, 0), funds, 0)
    channel = Channel(chain, await funded_key(chain, usdc=funds), new_key(), new_key())
    model = _Model(payer_usdc=funds)
    relay = _address(relayer_key)

    async def send(sender: bytes, data: bytes) -> None:
        await transact(chain.rpc, sender, BATCH_SETTLEMENT_ADDRESS, data, gas=_GAS)

    async def refused(data: bytes, error: str, sender: str = relay) -> None:
        assert await call_error(chain.rpc, sender, BATCH_SETTLEMENT_ADDRESS, data) == error_selector(error), error

    for operation, size in operations:
        value = {
            "deposit": 1 + size * 400,
            "sign": size * 400,
            "claim": size * 120 // 1000,
            "forged": 1 + size * 300,
            "refund": size * 500,
            "stale_refund": 1 + size * 500,
            "initiate": size * 600,
            "advance": 300 if size < 500 else _DELAY,
        }.get(operation, 0)
        unclaimed = model.balance - model.claimed
        if operation == "deposit" and value <= model.payer_usdc:
            await _deposit_eip3009(channel, relayer_key, value)
            model.balance += value
            model.payer_usdc -= value
        elif operation == "sign":
            model.ceiling += value
        elif operation in ("claim", "forged"):
            # A claim of a percentage of the latest voucher's ceiling (over 100: more than it signed),
            # or a voucher for more than is claimed signed by a key not the payer's.
            if operation == "claim":
                ceiling, total, key = model.ceiling, model.ceiling * value // 100, None
            else:
                ceiling = total = model.claimed + value
                key = new_key()
            claims = [channel.claim(ceiling, total, key=key)]
            data = claim_with_signature_calldata(claims, batch_signature([channel], claims))
            if total <= model.claimed:
                await send(relayer_key, data)  # a no-op
            elif total > ceiling:
                await refused(data, "ClaimExceedsCeiling()")
            elif total > model.balance:
                await refused(data, "ClaimExceedsBalance()")
            elif operation == "forged":
                await refused(data, "InvalidSignature()")
            else:
                await send(relayer_key, data)
                model.claimed = total
        elif operation == "refund":
            data = refund_with_signature_calldata(
                channel.config, value, model.nonce, channel.refund_signature(model.nonce, value)
            )
            if value == 0:
                await refused(data, "ZeroRefund()")
                continue
            await send(relayer_key, data)
            model.nonce += 1
            paid = min(value, unclaimed)
            model.balance -= paid
            model.payer_usdc += paid
            if model.withdraw_at and paid:
                if paid >= model.withdraw_amount:
                    model.withdraw_amount = model.withdraw_at = 0
                else:
                    model.withdraw_amount -= paid
        elif operation == "stale_refund" and model.nonce > 0:
            nonce = model.nonce - 1
            data = refund_with_signature_calldata(channel.config, value, nonce, channel.refund_signature(nonce, value))
            await refused(data, "InvalidRefundNonce()")
        elif operation == "initiate":
            data = initiate_withdraw_calldata(channel.config, value)
            if value == 0:
                await refused(data, "NothingToWithdraw()", channel.payer)
            elif model.withdraw_at:
                await refused(data, "WithdrawalAlreadyPending()", channel.payer)
            elif value > unclaimed:
                await refused(data, "WithdrawAmountExceedsAvailable()", channel.payer)
            else:
                await send(channel.payer_key, data)
                model.withdraw_amount, model.withdraw_at = value, await chain_now(chain)
        elif operation == "finalize":
            if size >= 500:  # after the delay (else, most likely, before it)
                await _advance(chain, _DELAY)
            data = finalize_withdraw_calldata(channel.config)
            now = await chain_now(chain)
            if not model.withdraw_at:
                await refused(data, "WithdrawalNotPending()", channel.payer)
            elif now + 30 < model.withdraw_at + _DELAY:
                await refused(data, "WithdrawDelayNotElapsed()", channel.payer)
            elif now >= model.withdraw_at + _DELAY:
                await send(channel.payer_key, data)
                paid = min(model.withdraw_amount, unclaimed)
                model.balance -= paid
                model.payer_usdc += paid
                model.withdraw_amount = model.withdraw_at = 0
        elif operation == "advance":
            await _advance(chain, value)
        elif operation == "settle":
            await send(relayer_key, settle_calldata(channel.receiver, chain.usdc))
            model.settled = model.claimed

        state = await channel.state()
        assert state == ChannelSnapshot(
            model.balance, model.claimed, model.withdraw_amount, model.withdraw_at, model.nonce
        )
        # Never more claimed than the channel holds or than the payer signed.
        assert state.total_claimed <= state.balance and state.total_claimed <= max(model.ceiling, 0)
        payer_usdc = await balance_of(chain.rpc, chain.usdc, channel.payer)
        receiver_usdc = await balance_of(chain.rpc, chain.usdc, channel.receiver)
        assert (payer_usdc, receiver_usdc) == (model.payer_usdc, model.settled)
        assert await read_receiver(chain.rpc, channel.receiver, chain.usdc) == (model.claimed, model.settled)
        # Nothing created or lost: the payer's funds are in its wallet, the escrow, or the receiver's wallet.
        assert payer_usdc + (state.balance - model.settled) + receiver_usdc == funds
        after = (state, payer_usdc, receiver_usdc)
        seen.append(f"{operation}: {'moved' if after != before else 'held'}")
        before = after
    return seen


async def test_the_escrows_invariants_hold_for_any_sequence_of_operations(
    chain: ChainUnderTest, relayer_key: bytes
) -> None:
    """Hypothesis drives one fresh channel per example through deposits, vouchers, claims (some
    over the ceiling or the balance, some signed by the wrong key), refunds (some at a used nonce),
    withdrawals, the passing of time and settlements; the chain must agree with a model after every
    step. Runs last in the module: it moves the chain's clock forward."""

    @settings(
        max_examples=int(os.environ.get("X402MW_CHANNEL_EXAMPLES", "25")),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(st.integers(0, 1000), st.integers(0, 1000), st.lists(_OPERATIONS, min_size=2, max_size=16))
    def check(deposit: int, voucher: int, operations: list[tuple[str, int]]) -> None:
        steps = [("deposit", deposit), ("sign", voucher), *operations]
        for outcome in anyio.from_thread.run(_run_operations, chain, relayer_key, steps):
            event(outcome)

    await anyio.to_thread.run_sync(check)


async def test_the_chains_clock_moves_forward_for_delays_and_never_back(chain: ChainUnderTest) -> None:
    now = await chain_now(chain)
    await _advance(chain, 3_600)
    assert await chain_now(chain) >= now + 3_600
    with pytest.raises(RpcError, match="lower than previous block's timestamp"):
        await chain.rpc.request("evm_setNextBlockTimestamp", [hex(now)])
