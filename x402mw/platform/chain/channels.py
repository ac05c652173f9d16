"""Calldata and reads of the x402 ``batch-settlement`` escrow (``X402BatchSettlement``) and its deposit
collectors (``contracts/X402BatchSettlement.sol``), at their canonical addresses.

The function signatures are the specification's (and the x402 Foundation SDK's ABI): ``deposit``,
``claim``, ``claimWithSignature``, ``settle``, ``refund``, ``refundWithSignature``,
``initiateWithdraw``, ``finalizeWithdraw``, ``multicall``, and the views ``channels``,
``pendingWithdrawals``, ``refundNonce``, ``receivers``, ``getChannelId`` and the digests. The EIP-712
side (channel ids, voucher, refund and claim-batch digests) is :mod:`x402mw.evm.batch_settlement`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eth_abi.abi import decode as abi_decode
from eth_abi.abi import encode as abi_encode

from x402mw.evm.batch_settlement import BATCH_SETTLEMENT_ADDRESS, ChannelConfig, VoucherClaim
from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.rpc import JsonRpc

CONFIG = "(address,address,address,address,address,uint40,bytes32)"
"""The ABI type of ``ChannelConfig``."""
VOUCHER_CLAIM = f"(({CONFIG},uint128),bytes,uint128)"
"""The ABI type of ``VoucherClaim`` (``((ChannelConfig channel, uint128 maxClaimableAmount) voucher,
bytes signature, uint128 totalClaimed)``)."""


def _selector(signature: str) -> bytes:
    return keccak256(signature.encode())[:4]


DEPOSIT = _selector(f"deposit({CONFIG},uint128,address,bytes)")
CLAIM = _selector(f"claim({VOUCHER_CLAIM}[])")
CLAIM_WITH_SIGNATURE = _selector(f"claimWithSignature({VOUCHER_CLAIM}[],bytes)")
SETTLE = _selector("settle(address,address)")
REFUND = _selector(f"refund({CONFIG},uint128)")
REFUND_WITH_SIGNATURE = _selector(f"refundWithSignature({CONFIG},uint128,uint256,bytes)")
INITIATE_WITHDRAW = _selector(f"initiateWithdraw({CONFIG},uint128)")
FINALIZE_WITHDRAW = _selector(f"finalizeWithdraw({CONFIG})")
MULTICALL = _selector("multicall(bytes[])")
_CHANNELS = _selector("channels(bytes32)")
_PENDING_WITHDRAWALS = _selector("pendingWithdrawals(bytes32)")
_REFUND_NONCE = _selector("refundNonce(bytes32)")
_RECEIVERS = _selector("receivers(address,address)")
_GET_CHANNEL_ID = _selector(f"getChannelId({CONFIG})")

EVENTS: dict[str, bytes] = {
    name: keccak256(signature.encode())
    for name, signature in {
        "ChannelCreated": f"ChannelCreated(bytes32,{CONFIG})",
        "ChannelClosed": f"ChannelClosed(bytes32,{CONFIG})",
        "Deposited": "Deposited(bytes32,address,uint128,uint128)",
        "Claimed": "Claimed(bytes32,address,uint128,uint128)",
        "Settled": "Settled(address,address,address,uint128)",
        "Refunded": "Refunded(bytes32,address,uint128)",
        "WithdrawInitiated": "WithdrawInitiated(bytes32,uint128,uint40)",
        "WithdrawFinalized": "WithdrawFinalized(bytes32,address,uint128)",
    }.items()
}
"""The escrow's events by name => their topic 0 (the channel id is topic 1 of all but ``Settled``,
whose topics are the receiver, the token and the sender)."""


def deposit_calldata(config: ChannelConfig, amount: int, collector: str, collector_data: bytes) -> bytes:
    """``deposit(config, amount, collector, collectorData)``: ``collector`` pulls ``amount`` from the
    payer into the channel with the authorization in ``collector_data`` (:func:`erc3009_collector_data`,
    :func:`permit2_collector_data`)."""
    return DEPOSIT + abi_encode(
        [CONFIG, "uint128", "address", "bytes"], [config.abi_tuple(), amount, collector, collector_data]
    )


def claim_calldata(claims: Sequence[VoucherClaim]) -> bytes:
    """``claim(voucherClaims)``: sent by each row's receiver or receiver authorizer."""
    return CLAIM + abi_encode([f"{VOUCHER_CLAIM}[]"], [[c.abi_tuple() for c in claims]])


def claim_with_signature_calldata(claims: Sequence[VoucherClaim], authorizer_signature: bytes) -> bytes:
    """``claimWithSignature(voucherClaims, authorizerSignature)``: anyone sends it with the rows'
    receiver authorizer's ``ClaimBatch`` signature."""
    return CLAIM_WITH_SIGNATURE + abi_encode(
        [f"{VOUCHER_CLAIM}[]", "bytes"], [[c.abi_tuple() for c in claims], authorizer_signature]
    )


def settle_calldata(receiver: str, token: str) -> bytes:
    """``settle(receiver, token)``: pays the receiver all it has claimed and not been paid, in one transfer."""
    return SETTLE + abi_encode(["address", "address"], [receiver, token])


def refund_calldata(config: ChannelConfig, amount: int) -> bytes:
    """``refund(config, amount)``: sent by the receiver or its authorizer."""
    return REFUND + abi_encode([CONFIG, "uint128"], [config.abi_tuple(), amount])


def refund_with_signature_calldata(config: ChannelConfig, amount: int, nonce: int, signature: bytes) -> bytes:
    """``refundWithSignature(config, amount, nonce, receiverAuthorizerSignature)``."""
    return REFUND_WITH_SIGNATURE + abi_encode(
        [CONFIG, "uint128", "uint256", "bytes"], [config.abi_tuple(), amount, nonce, signature]
    )


def initiate_withdraw_calldata(config: ChannelConfig, amount: int) -> bytes:
    """``initiateWithdraw(config, amount)``: sent by the payer or its authorizer."""
    return INITIATE_WITHDRAW + abi_encode([CONFIG, "uint128"], [config.abi_tuple(), amount])


def finalize_withdraw_calldata(config: ChannelConfig) -> bytes:
    """``finalizeWithdraw(config)``: sent by the payer or its authorizer once the delay has passed."""
    return FINALIZE_WITHDRAW + abi_encode([CONFIG], [config.abi_tuple()])


def multicall_calldata(calls: Sequence[bytes]) -> bytes:
    """``multicall(data)``: the escrow runs each call in order, all or nothing."""
    return MULTICALL + abi_encode(["bytes[]"], [list(calls)])


def erc3009_collector_data(valid_after: int, valid_before: int, salt: int, signature: bytes) -> bytes:
    """``collectorData`` of the EIP-3009 collector: ``abi.encode(validAfter, validBefore, salt, signature)``;
    the payer signed ``ReceiveWithAuthorization`` to the collector with the nonce
    :func:`~x402mw.evm.batch_settlement.erc3009_deposit_nonce` of the channel and ``salt``."""
    return abi_encode(["uint256", "uint256", "uint256", "bytes"], [valid_after, valid_before, salt, signature])


def permit2_collector_data(nonce: int, deadline: int, signature: bytes, eip2612_permit: bytes = b"") -> bytes:
    """``collectorData`` of the Permit2 collector: ``abi.encode(nonce, deadline, permit2Signature,
    eip2612Permit)``, the last empty or :func:`eip2612_permit_data`."""
    return abi_encode(["uint256", "uint256", "bytes", "bytes"], [nonce, deadline, signature, eip2612_permit])


def eip2612_permit_data(value: int, deadline: int, v: int, r: bytes, s: bytes) -> bytes:
    """An EIP-2612 permit for Permit2 that the Permit2 collector runs first: ``abi.encode(value,
    deadline, v, r, s)``."""
    return abi_encode(["uint256", "uint256", "uint8", "bytes32", "bytes32"], [value, deadline, v, r, s])


@dataclass(frozen=True, slots=True)
class ChannelSnapshot:
    """A channel's on-chain state: what it holds (``balance``: deposits less refunds and withdrawals),
    what the receiver has claimed of it, the pending withdrawal (``withdraw_amount`` asked at
    ``withdraw_requested_at``, 0 if none) and the next refund nonce."""

    balance: int
    total_claimed: int
    withdraw_amount: int
    withdraw_requested_at: int
    refund_nonce: int


async def _call(rpc: JsonRpc, data: bytes, escrow: str) -> bytes:
    answer = await rpc.request("eth_call", [{"to": escrow, "data": "0x" + data.hex()}, "latest"])
    return bytes.fromhex(str(answer)[2:])


async def read_channel(rpc: JsonRpc, channel: bytes, *, escrow: str = BATCH_SETTLEMENT_ADDRESS) -> ChannelSnapshot:
    """The on-chain state of ``channel`` (three calls in one batch)."""
    calls = [
        ("eth_call", [{"to": escrow, "data": "0x" + (selector + channel).hex()}, "latest"])
        for selector in (_CHANNELS, _PENDING_WITHDRAWALS, _REFUND_NONCE)
    ]
    state, pending, nonce = (bytes.fromhex(str(answer)[2:]) for answer in await rpc.batch(calls))
    balance, total_claimed = abi_decode(["uint128", "uint128"], state)
    amount, requested_at = abi_decode(["uint128", "uint40"], pending)
    return ChannelSnapshot(
        int(balance), int(total_claimed), int(amount), int(requested_at), int(abi_decode(["uint256"], nonce)[0])
    )


async def read_receiver(
    rpc: JsonRpc, receiver: str, token: str, *, escrow: str = BATCH_SETTLEMENT_ADDRESS
) -> tuple[int, int]:
    """``(totalClaimed, totalSettled)`` of ``receiver`` in ``token``: claimed of all its channels, and
    paid out by ``settle``."""
    answer = await _call(rpc, _RECEIVERS + abi_encode(["address", "address"], [receiver, token]), escrow)
    claimed, settled = abi_decode(["uint128", "uint128"], answer)
    return int(claimed), int(settled)


async def read_channel_id(rpc: JsonRpc, config: ChannelConfig, *, escrow: str = BATCH_SETTLEMENT_ADDRESS) -> bytes:
    """The escrow's own ``getChannelId(config)``."""
    answer = await _call(rpc, _GET_CHANNEL_ID + abi_encode([CONFIG], [config.abi_tuple()]), escrow)
    return answer[:32]
