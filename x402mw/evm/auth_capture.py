"""Hashes of the x402 ``auth-capture`` scheme on EVM (Base's commerce-payments ``AuthCaptureEscrow``):
a payment's ``PaymentInfo``, its identifier in the escrow (:func:`payment_info_hash`, the escrow's
``getHash``), the nonce a payer signs (:func:`signature_nonce`: the same hash with the payer left
out, which the token collectors recompute), and the salt that binds a receiver authorizer and a
policy into the payment (:func:`bound_salt`).

Two deployments exist, v1.0 and v1.1 (the default), each an escrow with three token collectors at
canonical addresses (:data:`DEPLOYMENT_V1_0`, :data:`DEPLOYMENT_V1_1`); a payment's hashes commit to
its chain and escrow, so neither crosses chains or deployments. Our own contracts
(``contracts/X402AuthCaptureEscrow.sol``) sit at these addresses on the dev chain and anvil.

>>> info = PaymentInfo(
...     operator="0x" + "11" * 20, payer="0x" + "22" * 20, receiver="0x" + "33" * 20,
...     token="0x" + "44" * 20, max_amount=1_000_000, pre_approval_expiry=1_000,
...     authorization_expiry=2_000, refund_expiry=3_000, min_fee_bps=0, max_fee_bps=100,
...     fee_receiver="0x" + "55" * 20, salt=7)
>>> signature_nonce(8453, info) == payment_info_hash(8453, info.with_payer(ZERO_ADDRESS))
True
>>> signature_nonce(8453, info) != payment_info_hash(8453, info)
True
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from x402mw.evm.eip712 import address_word, uint256_word
from x402mw.evm.keccak import keccak256

AUTH_CAPTURE_ESCROW_V1_0_ADDRESS = "0xBdEA0D1bcC5966192B070Fdf62aB4EF5b4420cff"
AUTH_CAPTURE_ESCROW_V1_1_ADDRESS = "0xf96815976523E00e65Be8f34cA5e64b4f41EB19c"
ZERO_ADDRESS = "0x" + "00" * 20

MAX_FEE_BPS = 10_000
"""Fees are in basis points of the amount captured or charged; ``maxFeeBps`` is at most this."""
MAX_AMOUNT = 2**120 - 1
"""Amounts of a payment are uint120."""
MAX_TIMESTAMP = 2**48 - 1
"""Its deadlines are uint48 Unix seconds."""

PAYMENT_INFO_TYPE = (
    "PaymentInfo(address operator,address payer,address receiver,address token,uint120 maxAmount,"
    "uint48 preApprovalExpiry,uint48 authorizationExpiry,uint48 refundExpiry,uint16 minFeeBps,uint16 maxFeeBps,"
    "address feeReceiver,uint256 salt)"
)
PAYMENT_INFO_TYPEHASH = keccak256(PAYMENT_INFO_TYPE.encode())
SALT_BINDING_TYPE = "x402AuthCaptureSaltBinding(address receiverAuthorizer,address policy,uint256 saltNonce)"
SALT_BINDING_TYPEHASH = keccak256(SALT_BINDING_TYPE.encode())


@dataclass(frozen=True, slots=True)
class AuthCaptureDeployment:
    """One commerce-payments deployment: the escrow, the EIP-3009 and Permit2 payment collectors
    (what a payer's authorization names as payee or spender) and the operator refund collector.
    ``fee_in_bps``: whether ``charge``/``capture`` take the fee as ``uint16 feeBps`` (v1.0) or as
    ``uint256 feeAmount`` (v1.1)."""

    version: str
    escrow: str
    eip3009_collector: str
    permit2_collector: str
    operator_refund_collector: str
    fee_in_bps: bool


DEPLOYMENT_V1_0 = AuthCaptureDeployment(
    "v1.0",
    AUTH_CAPTURE_ESCROW_V1_0_ADDRESS,
    "0x0E3dF9510de65469C4518D7843919c0b8C7A7757",
    "0x992476B9Ee81d52a5BdA0622C333938D0Af0aB26",
    "0x934907bffd0901b6A21e398B9C53A4A38F02fa5d",
    fee_in_bps=True,
)
DEPLOYMENT_V1_1 = AuthCaptureDeployment(
    "v1.1",
    AUTH_CAPTURE_ESCROW_V1_1_ADDRESS,
    "0x8612dfdc421f80336cd14E8EF9cb1E765dB5ab88",
    "0xD69831Aed5bfe262067ec4c751f4F830EcdD446e",
    "0x7a03443724d14798c4AB4622F1DAAcA761Fea486",
    fee_in_bps=False,
)
DEPLOYMENTS = (DEPLOYMENT_V1_0, DEPLOYMENT_V1_1)


def deployment_for(escrow: str | None) -> AuthCaptureDeployment | None:
    """The deployment of ``escrow`` (``extra.authCaptureEscrow``; None or empty: v1.1, the
    default), compared case-insensitively; None for any other address."""
    if not escrow:
        return DEPLOYMENT_V1_1
    for deployment in DEPLOYMENTS:
        if deployment.escrow.lower() == escrow.lower():
            return deployment
    return None


def _bounded(name: str, value: object, limit: int) -> bytes:
    if type(value) is not int or not 0 <= value <= limit:
        raise ValueError(f"{name} must be an int in [0, {limit}]")
    return value.to_bytes(32, "big")


@dataclass(frozen=True, slots=True)
class PaymentInfo:
    """A payment's terms, field for field the escrow's struct: ``operator`` (the only sender of
    ``authorize``/``charge``/``capture``/``void``/``refund``), ``payer``, ``receiver``, ``token``,
    ``max_amount`` (what the payer signed for), the deadlines (``pre_approval_expiry``: collect
    before; ``authorization_expiry``: capture before, reclaim from; ``refund_expiry``: refund
    before; in that order), the fee bounds in basis points, ``fee_receiver`` (the zero address: the
    operator names one per capture) and ``salt``."""

    operator: str
    payer: str
    receiver: str
    token: str
    max_amount: int
    pre_approval_expiry: int
    authorization_expiry: int
    refund_expiry: int
    min_fee_bps: int
    max_fee_bps: int
    fee_receiver: str
    salt: int

    def struct_hash(self) -> bytes:
        """``keccak256(abi.encode(PAYMENT_INFO_TYPEHASH, paymentInfo))``; ``ValueError`` for a field
        out of its type's range."""
        return keccak256(
            PAYMENT_INFO_TYPEHASH
            + address_word("operator", self.operator)
            + address_word("payer", self.payer)
            + address_word("receiver", self.receiver)
            + address_word("token", self.token)
            + _bounded("max_amount", self.max_amount, MAX_AMOUNT)
            + _bounded("pre_approval_expiry", self.pre_approval_expiry, MAX_TIMESTAMP)
            + _bounded("authorization_expiry", self.authorization_expiry, MAX_TIMESTAMP)
            + _bounded("refund_expiry", self.refund_expiry, MAX_TIMESTAMP)
            + _bounded("min_fee_bps", self.min_fee_bps, 2**16 - 1)
            + _bounded("max_fee_bps", self.max_fee_bps, 2**16 - 1)
            + address_word("fee_receiver", self.fee_receiver)
            + uint256_word("salt", self.salt)
        )

    def abi_tuple(self) -> tuple[str, str, str, str, int, int, int, int, int, int, str, int]:
        """The ABI tuple of the struct (the values in field order)."""
        return (
            self.operator,
            self.payer,
            self.receiver,
            self.token,
            self.max_amount,
            self.pre_approval_expiry,
            self.authorization_expiry,
            self.refund_expiry,
            self.min_fee_bps,
            self.max_fee_bps,
            self.fee_receiver,
            self.salt,
        )

    def with_payer(self, payer: str) -> PaymentInfo:
        """The same terms for another payer."""
        return dataclasses.replace(self, payer=payer)


def payment_info_hash(chain_id: int, info: PaymentInfo, escrow: str = AUTH_CAPTURE_ESCROW_V1_1_ADDRESS) -> bytes:
    """The payment's identifier in ``escrow`` on chain ``chain_id`` (the escrow's ``getHash``, the key
    of its ``paymentState``): ``keccak256(abi.encode(chainId, escrow, struct_hash))``."""
    return keccak256(uint256_word("chain_id", chain_id) + address_word("escrow", escrow) + info.struct_hash())


def signature_nonce(chain_id: int, info: PaymentInfo, escrow: str = AUTH_CAPTURE_ESCROW_V1_1_ADDRESS) -> bytes:
    """The nonce of the payer's token authorization (the EIP-3009 ``nonce``, or the Permit2 ``nonce``
    as a uint256): :func:`payment_info_hash` with the payer set to the zero address, so that the
    payer can sign it before its own address is in the struct; the collectors recompute it."""
    return payment_info_hash(chain_id, info.with_payer(ZERO_ADDRESS), escrow)


def bound_salt(receiver_authorizer: str, policy: str, salt_nonce: int) -> int:
    """``PaymentInfo.salt`` when a receiver authorizer or a policy is set: ``uint256(keccak256(
    abi.encode(SALT_BINDING_TYPEHASH, receiverAuthorizer, policy, saltNonce)))``, the client's random
    ``salt_nonce`` committed together with the two addresses."""
    preimage = (
        SALT_BINDING_TYPEHASH
        + address_word("receiver_authorizer", receiver_authorizer)
        + address_word("policy", policy)
        + uint256_word("salt_nonce", salt_nonce)
    )
    return int.from_bytes(keccak256(preimage), "big")


def fee_amount_bounds(info: PaymentInfo, amount: int) -> tuple[int, int]:
    """The fees the v1.1 escrow accepts on capturing or charging ``amount``: ``amount * minFeeBps //
    10000`` … ``amount * maxFeeBps // 10000`` (the escrow's integer division)."""
    return amount * info.min_fee_bps // MAX_FEE_BPS, amount * info.max_fee_bps // MAX_FEE_BPS
