"""What the channels send to the chain on a request's behalf, through the relayer: a deposit
(its token authorization used once), and a cooperative refund (the channel's latest voucher
claimed and what is left returned to the payer, in one transaction, with the receiver
authorizer's signatures). The requests' path (`service`) and the worker share them."""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.evm.batch_settlement import (
    BATCH_SETTLEMENT_ADDRESS,
    ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
    PERMIT2_DEPOSIT_COLLECTOR_ADDRESS,
    ChannelConfig,
    ChannelDomain,
    VoucherClaim,
    claim_batch_digest,
    erc3009_deposit_nonce,
    refund_digest,
)
from x402mw.evm.eip712 import sign_digest
from x402mw.platform.chain.channels import (
    ChannelSnapshot,
    claim_with_signature_calldata,
    deposit_calldata,
    erc3009_collector_data,
    multicall_calldata,
    permit2_collector_data,
    read_channel,
    refund_with_signature_calldata,
)
from x402mw.platform.chain.rpc import RpcError
from x402mw.platform.chain.token import balance_of
from x402mw.platform.chain.transactions import RevertError
from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.services.chains import ChainHandle, Chains
from x402mw.platform.services.channels.authorizers import Authorizers
from x402mw.platform.services.channels.checks import ChannelRefusal, VerifiedVoucher
from x402mw.protocol import channels as wire

DEPOSIT_GAS = 400_000
REFUND_GAS = 400_000


class DepositPending(Exception):
    """A deposit sent and not in a block within the wait: its ``transaction``."""

    def __init__(self, transaction: str) -> None:
        super().__init__(transaction)
        self.transaction = transaction


class ChannelTransactions:
    """Deposits and refunds of channels on ``chains``, recorded on ``engine``."""

    def __init__(self, engine: AsyncEngine, chains: Chains, clock: Clock, authorizers: Authorizers) -> None:
        self.engine = engine
        self.chains = chains
        self.clock = clock
        self.authorizers = authorizers

    async def submit_deposit(
        self, chain: ChainHandle, verified: VerifiedVoucher, deposit: wire.DepositWire, wait_seconds: float
    ) -> tuple[str, ChannelSnapshot]:
        """Submit a deposit through the relayer (its authorization used once: ``deposit_authorization_used``
        otherwise) and wait for it; its transaction and the channel's state after it."""
        config = verified.config
        now = int(self.clock.time())
        erc3009, permit2 = deposit.authorization.erc3009_authorization, deposit.authorization.permit2_authorization
        if erc3009 is not None:
            if erc3009.valid_after > now:
                raise ChannelRefusal(wire.VALID_AFTER, "the deposit's authorization is not valid yet")
            if erc3009.valid_before < now + 6:
                raise ChannelRefusal(wire.VALID_BEFORE, "the deposit's authorization has expired")
            nonce = erc3009_deposit_nonce(verified.channel, erc3009.salt)
            key = f"3009:{chain.chain_id}:{config.token.lower()}:{config.payer.lower()}:{nonce.hex()}"
            signature = bytes.fromhex(erc3009.signature[2:])
            data = erc3009_collector_data(erc3009.valid_after, erc3009.valid_before, erc3009.salt, signature)
            collector, valid_until = ERC3009_DEPOSIT_COLLECTOR_ADDRESS, erc3009.valid_before
        else:
            assert permit2 is not None
            if permit2.deadline < now + 6:
                raise ChannelRefusal(wire.PERMIT2_DEADLINE_EXPIRED, "the deposit's permit has expired")
            key = f"permit2:{chain.chain_id}:{config.payer.lower()}:{permit2.nonce}"
            data = permit2_collector_data(permit2.nonce, permit2.deadline, bytes.fromhex(permit2.signature[2:]))
            collector, valid_until = PERMIT2_DEPOSIT_COLLECTOR_ADDRESS, permit2.deadline
        calldata = deposit_calldata(config, deposit.amount, collector, data)
        deposit_id = new_id()
        table = tables.channel_deposits
        try:
            async with self.engine.begin() as conn:
                await conn.execute(
                    table.insert(),
                    {
                        "id": deposit_id,
                        "channel_id": verified.id,
                        "authorization_key": hashlib.sha256(key.encode()).hexdigest(),
                        "amount": deposit.amount,
                        "transaction": "",
                        "status": "sending",
                        "created_at": self.clock.now(),
                    },
                )
        except IntegrityError:
            raise ChannelRefusal(wire.DEPOSIT_REUSED, "this deposit authorization was used already") from None
        try:
            await chain.relayer.simulate(BATCH_SETTLEMENT_ADDRESS, calldata)
        except (RevertError, RpcError) as exc:
            async with self.engine.begin() as conn:
                await conn.execute(table.delete().where(table.c.id == deposit_id))
            if await balance_of(chain.rpc, config.token, config.payer) < deposit.amount:
                raise ChannelRefusal(wire.INSUFFICIENT_BALANCE, "the payer holds less than the deposit") from None
            raise ChannelRefusal(wire.DEPOSIT_SIMULATION_FAILED, f"the deposit would fail: {exc}") from None
        transaction = await chain.relayer.send(
            BATCH_SETTLEMENT_ADDRESS, calldata, gas=DEPOSIT_GAS, valid_until=valid_until
        )
        async with self.engine.begin() as conn:
            await conn.execute(update(table).where(table.c.id == deposit_id).values(transaction=transaction))
        try:
            receipt = await chain.wait_for(transaction, timeout=max(1.0, wait_seconds))
        except TimeoutError:
            raise DepositPending(transaction) from None
        status = "confirmed" if receipt.status == 1 else "failed"
        async with self.engine.begin() as conn:
            await conn.execute(update(table).where(table.c.id == deposit_id).values(status=status))
        if receipt.status != 1:
            raise ChannelRefusal(wire.DEPOSIT_TRANSACTION_FAILED, f"the deposit transaction {transaction} reverted")
        try:
            snapshot = await read_channel(chain.rpc, verified.channel)
        except RpcError as exc:
            raise ChannelRefusal(wire.CHANNEL_STATE_READ_FAILED, f"the channel's state cannot be read: {exc}") from None
        return receipt.transaction_hash, snapshot

    async def refund_channel(
        self, row: Any, asked: int | None, *, voucher: VerifiedVoucher | None = None, wait: float = 30.0
    ) -> tuple[str, int]:
        """Claim the channel's latest voucher (if it is not claimed) and refund ``asked`` (None: all
        that is left) with the receiver authorizer's signature, in one transaction; its hash and the
        amount refunded. `ChannelRefusal` when nothing is left to refund."""
        chain = self.chains.get(row.chain_id)
        if chain is None:
            raise ChannelRefusal(wire.NETWORK_MISMATCH, "the channel's chain is not served here")
        config = config_of(row)
        domain = ChannelDomain(row.chain_id)
        channel = bytes.fromhex(row.id[2:])
        snapshot = await read_channel(chain.rpc, channel)
        claim_to = max(row.charged, snapshot.total_claimed)
        left = snapshot.balance - claim_to
        if left <= 0:
            raise ChannelRefusal(wire.REFUND_NO_BALANCE, "nothing is left in the channel to refund")
        amount = left if asked is None else asked
        if amount > left:
            raise ChannelRefusal(wire.REFUND_AMOUNT_INVALID, f"at most {left} atomic units are left to refund")
        key = await self.authorizers.key_of(row.receiver_authorizer)
        if key is None:
            raise ChannelRefusal(wire.AUTHORIZER_MISMATCH, "the channel's receiver authorizer is not ours")
        calls = []
        if claim_to > snapshot.total_claimed and row.signature:
            claim = VoucherClaim(config, row.signed_max, bytes.fromhex(row.signature[2:]), claim_to)
            signature = sign_digest(key, claim_batch_digest(domain, [claim]))
            calls.append(claim_with_signature_calldata([claim], signature))
        refund_signature = sign_digest(key, refund_digest(domain, channel, snapshot.refund_nonce, amount))
        calls.append(refund_with_signature_calldata(config, amount, snapshot.refund_nonce, refund_signature))
        data = calls[0] if len(calls) == 1 else multicall_calldata(calls)
        try:
            await chain.relayer.simulate(BATCH_SETTLEMENT_ADDRESS, data)
        except (RevertError, RpcError) as exc:
            raise ChannelRefusal(wire.REFUND_TRANSACTION_FAILED, f"the refund would fail: {exc}") from None
        transaction = await chain.relayer.send(BATCH_SETTLEMENT_ADDRESS, data, gas=REFUND_GAS)
        receipt = await chain.wait_for(transaction, timeout=wait)
        if receipt.status != 1:
            raise ChannelRefusal(wire.REFUND_TRANSACTION_FAILED, f"the refund transaction {transaction} reverted")
        after = await read_channel(chain.rpc, channel)
        now = self.clock.now()
        table = tables.payment_channels
        async with self.engine.begin() as conn:
            await conn.execute(
                update(table)
                .where(table.c.id == row.id)
                .values(
                    claimed=table.c.claimed + (claim_to - snapshot.total_claimed),
                    refunded=table.c.refunded + amount,
                    refund_asked=None,
                    balance=after.balance,
                    total_claimed=after.total_claimed,
                    withdraw_amount=after.withdraw_amount,
                    withdraw_requested_at=after.withdraw_requested_at,
                    refund_nonce=after.refund_nonce,
                    synced_at=now,
                    updated_at=now,
                )
            )
        return receipt.transaction_hash, amount


def config_of(row: Any) -> ChannelConfig:
    """The `ChannelConfig` of a ``payment_channels`` row."""
    return ChannelConfig(
        row.payer,
        row.payer_authorizer,
        row.receiver,
        row.receiver_authorizer,
        row.token,
        row.withdraw_delay,
        bytes.fromhex(row.salt[2:]),
    )
