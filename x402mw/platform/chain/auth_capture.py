"""Calldata, reads and events of the x402 ``auth-capture`` escrow (commerce-payments'
``AuthCaptureEscrow``; ours is ``contracts/X402AuthCaptureEscrow.sol``) and its token collectors, at
the canonical addresses of either deployment.

Every call is sent by the payment's ``operator`` but ``reclaim`` (the payer's): ``authorize`` puts
the payer's tokens on hold through a payment collector, ``capture`` pays (part of) the hold out,
``void`` returns the rest, ``charge`` authorizes and captures at once, ``refund`` gives captured
tokens back through a refund collector. ``charge`` and ``capture`` take the fee as ``uint256
feeAmount`` on v1.1 and ``uint16 feeBps`` on v1.0 (:attr:`AuthCaptureDeployment.fee_in_bps`); the
rest is the same on both. The hashes are :mod:`x402mw.evm.auth_capture`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eth_abi.abi import decode as abi_decode
from eth_abi.abi import encode as abi_encode

from x402mw.evm.auth_capture import DEPLOYMENT_V1_1, AuthCaptureDeployment, PaymentInfo
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import to_checksum_address
from x402mw.platform.chain.rpc import JsonRpc

PAYMENT_INFO = "(address,address,address,address,uint120,uint48,uint48,uint48,uint16,uint16,address,uint256)"
"""The ABI type of ``PaymentInfo``."""


def _selector(signature: str) -> bytes:
    return keccak256(signature.encode())[:4]


AUTHORIZE = _selector(f"authorize({PAYMENT_INFO},uint256,address,bytes)")
VOID = _selector(f"void({PAYMENT_INFO})")
RECLAIM = _selector(f"reclaim({PAYMENT_INFO})")
REFUND = _selector(f"refund({PAYMENT_INFO},uint256,address,bytes)")
_FEE_TYPE = {True: "uint16", False: "uint256"}  # by fee_in_bps
_CHARGE = {bps: _selector(f"charge({PAYMENT_INFO},uint256,address,bytes,{t},address)") for bps, t in _FEE_TYPE.items()}
_CAPTURE = {bps: _selector(f"capture({PAYMENT_INFO},uint256,{t},address)") for bps, t in _FEE_TYPE.items()}
_PAYMENT_STATE = _selector("paymentState(bytes32)")
_GET_HASH = _selector(f"getHash({PAYMENT_INFO})")
_GET_TOKEN_STORE = _selector("getTokenStore(address)")

# name => (the types of the event's signature, the types of its data); topic 1 is the payment's
# hash (the operator for TokenStoreCreated).
_EVENT_TYPES: dict[bool, dict[str, tuple[str, list[str]]]] = {
    bps: {
        "PaymentAuthorized": (
            f"bytes32,{PAYMENT_INFO},uint256,address",
            [PAYMENT_INFO, "uint256", "address"],
        ),
        "PaymentCharged": (
            f"bytes32,{PAYMENT_INFO},uint256,address,{fee},address",
            [PAYMENT_INFO, "uint256", "address", fee, "address"],
        ),
        "PaymentCaptured": (f"bytes32,uint256,{fee},address", ["uint256", fee, "address"]),
        "PaymentVoided": ("bytes32,uint256", ["uint256"]),
        "PaymentReclaimed": ("bytes32,uint256", ["uint256"]),
        "PaymentRefunded": ("bytes32,uint256,address", ["uint256", "address"]),
        "TokenStoreCreated": ("address,address", ["address"]),
    }
    for bps, fee in _FEE_TYPE.items()
}


def events(deployment: AuthCaptureDeployment = DEPLOYMENT_V1_1) -> Mapping[str, bytes]:
    """The escrow's events by name => their topic 0 (``PaymentCharged`` and ``PaymentCaptured``
    differ between the deployments by the fee's type)."""
    return {
        name: keccak256(f"{name}({signature})".encode())
        for name, (signature, _) in _EVENT_TYPES[deployment.fee_in_bps].items()
    }


def authorize_calldata(info: PaymentInfo, amount: int, collector: str, collector_data: bytes) -> bytes:
    """``authorize(paymentInfo, amount, tokenCollector, collectorData)``: put ``amount`` (at most
    ``max_amount``) on hold; ``collector_data`` is the payer's signature for the payment collector."""
    return AUTHORIZE + abi_encode(
        [PAYMENT_INFO, "uint256", "address", "bytes"], [info.abi_tuple(), amount, collector, collector_data]
    )


def charge_calldata(
    info: PaymentInfo,
    amount: int,
    collector: str,
    collector_data: bytes,
    fee: int,
    fee_receiver: str,
    *,
    deployment: AuthCaptureDeployment = DEPLOYMENT_V1_1,
) -> bytes:
    """``charge(paymentInfo, amount, tokenCollector, collectorData, fee, feeReceiver)``: collect and
    pay out at once; ``fee`` is ``feeAmount`` (v1.1) or ``feeBps`` (v1.0)."""
    bps = deployment.fee_in_bps
    return _CHARGE[bps] + abi_encode(
        [PAYMENT_INFO, "uint256", "address", "bytes", _FEE_TYPE[bps], "address"],
        [info.abi_tuple(), amount, collector, collector_data, fee, fee_receiver],
    )


def capture_calldata(
    info: PaymentInfo, amount: int, fee: int, fee_receiver: str, *, deployment: AuthCaptureDeployment = DEPLOYMENT_V1_1
) -> bytes:
    """``capture(paymentInfo, amount, fee, feeReceiver)``: pay ``amount`` of the hold out, ``fee`` of
    it (``feeAmount`` on v1.1, ``feeBps`` on v1.0) to ``fee_receiver``."""
    bps = deployment.fee_in_bps
    return _CAPTURE[bps] + abi_encode(
        [PAYMENT_INFO, "uint256", _FEE_TYPE[bps], "address"], [info.abi_tuple(), amount, fee, fee_receiver]
    )


def void_calldata(info: PaymentInfo) -> bytes:
    """``void(paymentInfo)``: the operator returns the whole hold to the payer."""
    return VOID + abi_encode([PAYMENT_INFO], [info.abi_tuple()])


def reclaim_calldata(info: PaymentInfo) -> bytes:
    """``reclaim(paymentInfo)``: the payer takes the hold back, from ``authorization_expiry`` on."""
    return RECLAIM + abi_encode([PAYMENT_INFO], [info.abi_tuple()])


def refund_calldata(info: PaymentInfo, amount: int, collector: str, collector_data: bytes = b"") -> bytes:
    """``refund(paymentInfo, amount, tokenCollector, collectorData)``: give ``amount`` of what was
    captured back to the payer, the tokens brought in by a refund collector (the operator refund
    collector takes them from the operator, which approved it; no data)."""
    return REFUND + abi_encode(
        [PAYMENT_INFO, "uint256", "address", "bytes"], [info.abi_tuple(), amount, collector, collector_data]
    )


@dataclass(frozen=True, slots=True)
class PaymentState:
    """A payment's state in the escrow: whether it was collected (authorized or charged, which
    happens once), what is on hold and may be captured, and what was captured and may be refunded."""

    has_collected_payment: bool
    capturable_amount: int
    refundable_amount: int


async def _call(rpc: JsonRpc, escrow: str, data: bytes) -> bytes:
    answer = await rpc.request("eth_call", [{"to": escrow, "data": "0x" + data.hex()}, "latest"])
    return bytes.fromhex(str(answer)[2:])


async def read_payment_state(
    rpc: JsonRpc, payment_info_hash: bytes, *, escrow: str = DEPLOYMENT_V1_1.escrow
) -> PaymentState:
    """``paymentState(paymentInfoHash)`` of ``escrow``."""
    answer = await _call(rpc, escrow, _PAYMENT_STATE + payment_info_hash)
    collected, capturable, refundable = abi_decode(["bool", "uint120", "uint120"], answer)
    return PaymentState(bool(collected), int(capturable), int(refundable))


async def read_payment_hash(rpc: JsonRpc, info: PaymentInfo, *, escrow: str = DEPLOYMENT_V1_1.escrow) -> bytes:
    """The escrow's own ``getHash(paymentInfo)``."""
    return (await _call(rpc, escrow, _GET_HASH + abi_encode([PAYMENT_INFO], [info.abi_tuple()])))[:32]


async def read_token_store(rpc: JsonRpc, operator: str, *, escrow: str = DEPLOYMENT_V1_1.escrow) -> str:
    """``getTokenStore(operator)``: where the escrow holds ``operator``'s payments' tokens."""
    answer = await _call(rpc, escrow, _GET_TOKEN_STORE + abi_encode(["address"], [operator]))
    return to_checksum_address(str(abi_decode(["address"], answer)[0]))


@dataclass(frozen=True, slots=True)
class EscrowEvent:
    """One event of the escrow: its name, its indexed key (the payment's hash; for
    ``TokenStoreCreated`` the operator's address word) and its other values in order (addresses
    checksummed, the ``PaymentInfo`` of ``PaymentAuthorized``/``PaymentCharged`` as its ABI tuple)."""

    name: str
    key: bytes
    values: tuple[Any, ...]


def decode_events(
    logs: Sequence[Mapping[str, Any]], *, deployment: AuthCaptureDeployment = DEPLOYMENT_V1_1
) -> list[EscrowEvent]:
    """The events of ``deployment``'s escrow among a receipt's ``logs`` (JSON-RPC shape), in order;
    other contracts' logs are skipped."""
    names = {topic: name for name, topic in events(deployment).items()}
    types = _EVENT_TYPES[deployment.fee_in_bps]
    found = []
    for log in logs:
        if str(log["address"]).lower() != deployment.escrow.lower():
            continue
        topics = [bytes.fromhex(str(t)[2:]) for t in log["topics"]]
        name = names.get(topics[0])
        if name is None:
            continue
        values = abi_decode(types[name][1], bytes.fromhex(str(log["data"])[2:]))
        found.append(EscrowEvent(name, topics[1], _checksummed(tuple(values))))
    return found


def _checksummed(values: tuple[Any, ...]) -> tuple[Any, ...]:
    # eth_abi decodes addresses in lower case; the project's addresses are checksummed.
    return tuple(
        _checksummed(v) if isinstance(v, tuple) else to_checksum_address(v) if isinstance(v, str) else v for v in values
    )
