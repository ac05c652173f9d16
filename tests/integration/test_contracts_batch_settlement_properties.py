"""The batch-settlement escrow's invariants as a hypothesis property, on the dev chain and anvil: fresh
channels go through deposits, vouchers, claims, refunds, withdrawals, the passing of time and
settlements, and the chain must agree with a model after every step (never more claimed than signed
or held, refunds and withdrawals never take claimed funds, a refund nonce used once, nothing created
or lost); and the chains' clocks move forward for the withdrawal delay, never back."""

from __future__ import annotations

import os
from dataclasses import dataclass

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.chain_fixtures import ChainUnderTest, anvil_node, anyio_backend, chain, new_key
from tests.channel_helpers import (
    DELAY,
    GAS,
    Channel,
    address_of_key,
    advance,
    batch_signature,
    deposit_eip3009,
    relayer_key,
)
from tests.contract_helpers import call_error, chain_now, error_selector, funded_key
from x402mw.evm.batch_settlement import (
    BATCH_SETTLEMENT_ADDRESS,
)
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.channels import (
    ChannelSnapshot,
    claim_with_signature_calldata,
    finalize_withdraw_calldata,
    initiate_withdraw_calldata,
    read_receiver,
    refund_with_signature_calldata,
    settle_calldata,
)
from x402mw.platform.chain.rpc import RpcError
from x402mw.platform.chain.token import balance_of

__all__ = ["anvil_node", "anyio_backend", "chain", "relayer_key"]

pytestmark = pytest.mark.anyio


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
    relay = address_of_key(relayer_key)

    async def send(sender: bytes, data: bytes) -> None:
        await transact(chain.rpc, sender, BATCH_SETTLEMENT_ADDRESS, data, gas=GAS)

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
            "advance": 300 if size < 500 else DELAY,
        }.get(operation, 0)
        unclaimed = model.balance - model.claimed
        if operation == "deposit" and value <= model.payer_usdc:
            await deposit_eip3009(channel, relayer_key, value)
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
                await advance(chain, DELAY)
            data = finalize_withdraw_calldata(channel.config)
            now = await chain_now(chain)
            if not model.withdraw_at:
                await refused(data, "WithdrawalNotPending()", channel.payer)
            elif now + 30 < model.withdraw_at + DELAY:
                await refused(data, "WithdrawDelayNotElapsed()", channel.payer)
            elif now >= model.withdraw_at + DELAY:
                await send(channel.payer_key, data)
                paid = min(model.withdraw_amount, unclaimed)
                model.balance -= paid
                model.payer_usdc += paid
                model.withdraw_amount = model.withdraw_at = 0
        elif operation == "advance":
            await advance(chain, value)
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
    await advance(chain, 3_600)
    assert await chain_now(chain) >= now + 3_600
    with pytest.raises(RpcError, match="lower than previous block's timestamp"):
        await chain.rpc.request("evm_setNextBlockTimestamp", [hex(now)])
