"""The auth-capture escrow's invariants as a hypothesis property, on the dev chain and anvil: a fresh
payment (and operator) per example, in the v1.1 or the v1.0 escrow, collected through the EIP-3009
or the Permit2 collector, goes through authorize or charge, captures with fees in and out
of bounds, voids, reclaims (by the payer and by others), refunds, and the passing of its deadlines;
after every step the chain must agree with a model: never more captured than authorized, never more
refunded than captured, a reclaim only by the payer and only from the authorization expiry, every
deadline enforced, a second void or collection refused, fees within the payer's bounds, and no token
created or lost (the operator's token store holds exactly what is on hold)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.auth_capture_helpers import Payment, new_payment
from tests.chain_fixtures import ChainUnderTest, anvil_node, anyio_backend, chain
from tests.channel_helpers import MAX_UINT, approve_calldata
from tests.contract_helpers import chain_now, funded_key
from x402mw.evm.auth_capture import DEPLOYMENT_V1_0, DEPLOYMENT_V1_1, AuthCaptureDeployment, fee_amount_bounds
from x402mw.platform.chain.auth_capture import (
    PaymentState,
    authorize_calldata,
    capture_calldata,
    charge_calldata,
    read_token_store,
    reclaim_calldata,
    refund_calldata,
    void_calldata,
)
from x402mw.platform.chain.relayer import transact
from x402mw.platform.chain.token import balance_of

__all__ = ["anvil_node", "anyio_backend", "chain"]

pytestmark = pytest.mark.anyio

_MAX = 1_000_000
_STEP = 1_000
"""Seconds between a payment's deadlines; the clock moves by whole steps, landing mid-way."""
_MIN_BPS, _MAX_BPS = 100, 300


@dataclass
class _Model:
    """What the escrow should hold for the payment, and the wallets around it."""

    payer: int = _MAX
    receiver: int = 0
    fees: int = 0
    refunded: int = 0
    collected: int = 0
    capturable: int = 0
    refundable: int = 0
    captured: int = 0
    phase: int = 0  # 0: collectable; 1: capturable; 2: reclaimable and refundable; 3: all over


_KINDS = ["authorize", "charge", "capture", "capture", "capture", "void", "reclaim", "refund", "refund"]
_OPERATIONS = st.tuples(st.sampled_from(_KINDS), st.integers(0, 1000), st.sampled_from([True, True, True, False]))
"""An operation, a number that sizes it, and whether its rightful sender sends it."""


async def _run(
    chain: ChainUnderTest,
    deployment: AuthCaptureDeployment,
    permit2: bool,
    operations: list[tuple[str, int, bool]],
) -> list[str]:
    """Run ``operations`` on a new payment in ``deployment``'s escrow, collected through the Permit2
    collector or the EIP-3009 one, checking the chain against the model after each; what each did
    (``"capture: moved"`` when it went through, ``"capture: refused"`` when it was refused)."""
    operator_key = await funded_key(chain, usdc=_MAX)
    await transact(
        chain.rpc,
        operator_key,
        chain.usdc,
        approve_calldata(deployment.operator_refund_collector, MAX_UINT),
        gas=80_000,
    )
    start = await chain_now(chain)
    payment = await new_payment(
        chain,
        operator_key,
        max_amount=_MAX,
        min_fee_bps=_MIN_BPS,
        max_fee_bps=_MAX_BPS,
        pre_approval_expiry=start + _STEP,
        authorization_expiry=start + 2 * _STEP,
        refund_expiry=start + 3 * _STEP,
        deployment=deployment,
        permit2=permit2,
    )
    info = payment.info
    stranger = await funded_key(chain)
    store = await read_token_store(chain.rpc, info.operator, escrow=deployment.escrow)
    model = _Model()
    seen: list[str] = []
    for operation, size, rightful in operations:
        key = None if rightful else stranger
        moved = await _step(payment, model, operation, size, key, start, permit2)
        seen.append(f"{operation}: {'moved' if moved else 'refused'}")
        await _check(payment, model, store)
    return seen


def _fee(payment: Payment, amount: int, fee_bps: int) -> tuple[int, int, str | None]:
    """The fee argument of a capture or charge of ``amount`` at ``fee_bps`` (an amount on v1.1, basis
    points on v1.0), the fee it pays, and the error the escrow answers if it is out of bounds."""
    paid = amount * fee_bps // 10_000
    if payment.deployment.fee_in_bps:
        in_bounds = payment.info.min_fee_bps <= fee_bps <= payment.info.max_fee_bps
        return fee_bps, paid, None if in_bounds else "FeeBpsOutOfRange(uint16,uint16,uint16)"
    low, high = fee_amount_bounds(payment.info, amount)
    return paid, paid, None if low <= paid <= high else "FeeAmountOutOfRange(uint256,uint256,uint256)"


async def _step(
    payment: Payment, model: _Model, operation: str, size: int, key: bytes | None, start: int, permit2: bool
) -> bool:
    """Run one operation; True if it went through, False if the escrow refused it as the model says."""
    info, chain, deployment = payment.info, payment.chain, payment.deployment
    if permit2:
        collector, signature = deployment.permit2_collector, payment.permit2_signature()
    else:
        collector, signature = deployment.eip3009_collector, payment.eip3009_signature()
    amount = size * 1_100  # up to 1.1 x the maximum: over it sometimes
    fee_bps = _MIN_BPS - 25 + size % 250  # mostly in the bounds (100 … 300), sometimes out of them
    operator_sends = key is None
    if operation == "advance":
        if model.phase < 3:
            model.phase += 1
            target = start + model.phase * _STEP + _STEP // 2
            await chain.rpc.request("evm_setNextBlockTimestamp", [hex(max(target, await chain_now(chain) + 1))])
            await chain.rpc.request("evm_mine", [])
            return True
        return False
    if operation in ("authorize", "charge"):
        fee_arg, fee, fee_error = _fee(payment, amount, fee_bps)
        if operation == "authorize":
            data = authorize_calldata(info, amount, collector, signature)
        else:
            data = charge_calldata(
                info, amount, collector, signature, fee_arg, info.fee_receiver, deployment=deployment
            )
        error = (
            "InvalidSender(address,address)"
            if not operator_sends
            else "ZeroAmount()"
            if amount == 0
            else "ExceedsMaxAmount(uint256,uint256)"
            if amount > info.max_amount
            else "AfterPreApprovalExpiry(uint48,uint48)"
            if model.phase >= 1
            else fee_error
            if operation == "charge" and fee_error
            else "PaymentAlreadyCollected(bytes32)"
            if model.collected
            else None
        )
        if error:
            await payment.refused(data, error, key=key)
            return False
        await payment.send(data)
        model.collected = amount
        model.payer -= amount
        if operation == "authorize":
            model.capturable = amount
        else:
            model.refundable = model.captured = amount
            model.fees += fee
            model.receiver += amount - fee
        return True
    if operation == "capture":
        amount = model.capturable * size // 900  # up to 1.1 x what is on hold
        fee_arg, fee, fee_error = _fee(payment, amount, fee_bps)
        data = capture_calldata(info, amount, fee_arg, info.fee_receiver, deployment=deployment)
        error = (
            "InvalidSender(address,address)"
            if not operator_sends
            else "ZeroAmount()"
            if amount == 0
            else fee_error
            if fee_error
            else "AfterAuthorizationExpiry(uint48,uint48)"
            if model.phase >= 2
            else "InsufficientAuthorization(bytes32,uint256,uint256)"
            if amount > model.capturable
            else None
        )
        if error:
            await payment.refused(data, error, key=key)
            return False
        await payment.send(data)
        model.capturable -= amount
        model.refundable += amount
        model.captured += amount
        model.fees += fee
        model.receiver += amount - fee
        return True
    if operation in ("void", "reclaim"):
        # The payer is the rightful sender of reclaim; the operator tries it in its place.
        data = void_calldata(info) if operation == "void" else reclaim_calldata(info)
        if operation == "reclaim":
            sender = payment.payer_key if operator_sends else payment.operator_key
            error = (
                "InvalidSender(address,address)"
                if not operator_sends
                else "BeforeAuthorizationExpiry(uint48,uint48)"
                if model.phase < 2
                else "ZeroAuthorization(bytes32)"
                if model.capturable == 0
                else None
            )
        else:
            sender = payment.operator_key if operator_sends else key or payment.operator_key
            error = (
                "InvalidSender(address,address)"
                if not operator_sends
                else "ZeroAuthorization(bytes32)"
                if model.capturable == 0
                else None
            )
        if error:
            await payment.refused(data, error, key=sender)
            return False
        await payment.send(data, key=sender)
        model.payer += model.capturable
        model.capturable = 0
        return True
    # refund
    amount = model.refundable * size // 900
    data = refund_calldata(info, amount, deployment.operator_refund_collector)
    error = (
        "InvalidSender(address,address)"
        if not operator_sends
        else "ZeroAmount()"
        if amount == 0
        else "AfterRefundExpiry(uint48,uint48)"
        if model.phase >= 3
        else "RefundExceedsCapture(uint256,uint256)"
        if amount > model.refundable
        else None
    )
    if error:
        await payment.refused(data, error, key=key)
        return False
    await payment.send(data)
    model.refundable -= amount
    model.refunded += amount
    model.payer += amount
    return True


async def _check(payment: Payment, model: _Model, store: str) -> None:
    chain, info = payment.chain, payment.info
    state = await payment.state()
    assert state == PaymentState(model.collected > 0, model.capturable, model.refundable)
    # Never more captured than collected, never more refunded than captured, never over the maximum.
    assert model.captured + model.capturable <= model.collected <= info.max_amount
    assert model.refunded + state.refundable_amount == model.captured
    wallets = [await balance_of(chain.rpc, chain.usdc, a) for a in (info.payer, info.receiver, info.fee_receiver)]
    assert wallets == [model.payer, model.receiver, model.fees]
    # Nothing created or lost: the operator's store holds exactly the hold; refunds came from the operator.
    assert await balance_of(chain.rpc, chain.usdc, store) == model.capturable
    assert await balance_of(chain.rpc, chain.usdc, info.operator) == _MAX - model.refunded
    assert sum(wallets) + model.capturable == _MAX + model.refunded
    # Fees stayed within the payer's ceiling on what was captured (each capture's own bounds are
    # what the escrow checks; the sum of their floors may fall below the floor of the sum).
    assert model.fees <= fee_amount_bounds(info, model.captured)[1]


async def test_the_escrows_invariants_hold_for_any_sequence_of_operations(chain: ChainUnderTest) -> None:
    """Hypothesis drives one fresh payment per example through collection, captures, voids, reclaims,
    refunds and the passing of its deadlines, each sent by its rightful sender or by another; the
    chain must agree with the model after every step."""

    @settings(
        max_examples=int(os.environ.get("X402MW_AUTH_CAPTURE_EXAMPLES", "40")),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(
        st.sampled_from([DEPLOYMENT_V1_1, DEPLOYMENT_V1_0]),
        st.booleans(),
        st.sampled_from(["authorize", "charge"]),
        st.integers(0, 1000),
        st.lists(st.lists(_OPERATIONS, max_size=6), min_size=4, max_size=4),
    )
    def check(
        deployment: AuthCaptureDeployment,
        permit2: bool,
        collect: str,
        size: int,
        phases: list[list[tuple[str, int, bool]]],
    ) -> None:
        # The operations of each phase of the payment's life, the clock moved past a deadline between.
        steps = [(collect, size, True)]
        for operations in phases:
            steps += [*operations, ("advance", 0, True)]
        for outcome in anyio.from_thread.run(_run, chain, deployment, permit2, steps):
            event(f"{deployment.version}, {'permit2' if permit2 else 'eip3009'}, {outcome}")

    await anyio.to_thread.run_sync(check)
