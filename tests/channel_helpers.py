"""Helpers for the tests of the batch-settlement escrow (``X402BatchSettlement``) and its collectors:
a channel of keys on a chain that signs vouchers, claims and refunds; deposits through each collector;
the escrow's events of a transaction; revert checks; moving the chain's clock. The ``relayer_key``
and ``receiver_keys`` fixtures are module-scoped: import them with ``chain``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from eth_abi.abi import encode as abi_encode
from eth_account import Account

from tests.chain_fixtures import RECEIVE, ChainUnderTest, authorization_message
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
from x402mw.evm.eip712 import sign_digest
from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.channels import (
    EVENTS,
    ChannelSnapshot,
    deposit_calldata,
    erc3009_collector_data,
    permit2_collector_data,
    read_channel,
)
from x402mw.platform.chain.token import balance_of
from x402mw.platform.chain.transactions import TxReceipt

MAX_UINT = 2**256 - 1
DELAY = 900
GAS = 1_500_000


def address_of_key(key: bytes) -> str:
    return str(Account.from_key(key).address)


def random_uint() -> int:
    return int.from_bytes(os.urandom(32), "big")


def approve_calldata(spender: str, value: int) -> bytes:
    return keccak256(b"approve(address,uint256)")[:4] + abi_encode(["address", "uint256"], [spender, value])


def collect_calldata(payer: str, token: str, amount: int, channel: bytes, data: bytes) -> bytes:
    selector = keccak256(b"collect(address,address,uint256,bytes32,bytes)")[:4]
    return selector + abi_encode(
        ["address", "address", "uint256", "bytes32", "bytes"], [payer, token, amount, channel, data]
    )


@dataclass
class Channel:
    """One channel on ``chain``: the payer's key (and, if any, its voucher-signing authorizer's), the
    receiver and its authorizer's key; the receiver side's keys have gas. ``payer_wallet`` and
    ``authorizer_wallet`` make the payer or the receiver authorizer an EIP-1271 wallet (an
    ``X402SmartWallet``) whose owner is ``payer_key`` or ``authorizer_key``."""

    chain: ChainUnderTest
    payer_key: bytes
    receiver_key: bytes
    authorizer_key: bytes
    payer_authorizer_key: bytes | None = None
    delay: int = DELAY
    salt: bytes = field(default_factory=lambda: os.urandom(32))
    payer_wallet: str | None = None
    authorizer_wallet: str | None = None

    @property
    def payer(self) -> str:
        return self.payer_wallet or address_of_key(self.payer_key)

    @property
    def receiver(self) -> str:
        return address_of_key(self.receiver_key)

    @property
    def domain(self) -> ChannelDomain:
        return ChannelDomain(self.chain.chain_id)

    @property
    def config(self) -> ChannelConfig:
        payer_authorizer = (
            ZERO_ADDRESS if self.payer_authorizer_key is None else address_of_key(self.payer_authorizer_key)
        )
        return ChannelConfig(
            self.payer,
            payer_authorizer,
            self.receiver,
            self.authorizer_wallet or address_of_key(self.authorizer_key),
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


async def new_channel(
    chain: ChainUnderTest, receiver_keys: tuple[bytes, bytes], *, usdc: int = 10_000_000, **kw: Any
) -> Channel:
    payer_key = await funded_key(chain, usdc=usdc)
    return Channel(chain, payer_key, receiver_keys[0], receiver_keys[1], **kw)


async def deposit_eip3009(channel: Channel, sender: bytes, amount: int, **changes: Any) -> TxReceipt:
    data = await eip3009_deposit_calldata(channel, sender, amount, **changes)
    return await transact(channel.chain.rpc, sender, BATCH_SETTLEMENT_ADDRESS, data, gas=GAS)


async def eip3009_deposit_calldata(channel: Channel, sender: bytes, amount: int, **changes: Any) -> bytes:
    """Calldata of a deposit whose payer signed ``ReceiveWithAuthorization`` to the collector with
    the channel's nonce (``changes``: ``nonce_channel`` to bind another channel, ``to``, ``value``)."""
    salt = random_uint()
    valid_before = await chain_now(channel.chain) + 3600
    nonce = erc3009_deposit_nonce(changes.get("nonce_channel", channel.id), salt)
    message = authorization_message(
        channel.payer,
        channel.chain.domain(),
        to=changes.get("to", ERC3009_DEPOSIT_COLLECTOR_ADDRESS),
        value=changes.get("value", amount),
        valid_after=0,
        valid_before=valid_before,
        nonce=nonce,
        primary_type=RECEIVE,
    )
    # A wallet payer's owner signs the same digest (X402SmartWallet's EIP-1271 takes it as it is).
    signature = bytes(Account.sign_typed_data(channel.payer_key, full_message=message).signature)
    collector_data = erc3009_collector_data(0, valid_before, salt, signature)
    return deposit_calldata(channel.config, amount, ERC3009_DEPOSIT_COLLECTOR_ADDRESS, collector_data)


async def permit2_deposit_calldata(
    channel: Channel, amount: int, *, witness_channel: bytes | None = None, eip2612: bytes = b""
) -> bytes:
    nonce = random_uint()
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


async def escrow_events(chain: ChainUnderTest, receipt: TxReceipt) -> list[tuple[str, list[bytes], bytes]]:
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


async def refused(
    chain: ChainUnderTest, sender: bytes, data: bytes, error: str, *, to: str = BATCH_SETTLEMENT_ADDRESS
) -> None:
    assert await call_error(chain.rpc, address_of_key(sender), to, data) == error_selector(error)


async def escrow_usdc(chain: ChainUnderTest) -> int:
    return await balance_of(chain.rpc, chain.usdc, BATCH_SETTLEMENT_ADDRESS)


async def advance(chain: ChainUnderTest, seconds: int) -> None:
    """Move the chain's clock ``seconds`` past its latest block, and mine a block there."""
    await chain.rpc.request("evm_setNextBlockTimestamp", [hex(await chain_now(chain) + seconds)])
    await chain.rpc.request("evm_mine", [])
