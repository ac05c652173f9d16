"""EIP-712 of the x402 ``batch-settlement`` scheme on EVM (payment channels): the channel's identity,
the payer's cumulative ``Voucher``, the receiver authorizer's ``Refund`` and ``ClaimBatch``, and what
a payer signs to deposit (an EIP-3009 ``ReceiveWithAuthorization`` to the collector whose nonce binds
the channel, or a Permit2 witness permit whose witness is the channel).

Everything here is keccak arithmetic under the specification's domain (``x402 Batch Settlement``,
version ``1``, the chain, the escrow's canonical address), so what is computed here is what the
escrow (``contracts/X402BatchSettlement.sol``) computes and what a client built on the x402
Foundation's SDK signs.

>>> from x402mw.evm.eip712 import recover_digest_signer, sign_digest
>>> from x402mw.evm.keys import address_of, new_private_key
>>> payer = new_private_key()
>>> config = ChannelConfig(address_of(payer), ZERO_ADDRESS, "0x" + "22" * 20, "0x" + "33" * 20,
...                        "0x" + "44" * 20, 900, bytes(32))
>>> domain = ChannelDomain(8453)
>>> digest = voucher_digest(domain, channel_id(domain, config), 5_000)
>>> recover_digest_signer(digest, sign_digest(payer, digest)) == address_of(payer)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from x402mw.evm.eip712 import DOMAIN_TYPEHASH, address_word, uint256_word
from x402mw.evm.keccak import keccak256
from x402mw.evm.permit2 import PERMIT2_ADDRESS

BATCH_SETTLEMENT_ADDRESS = "0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003"
"""The escrow (``x402BatchSettlement``): the verifying contract of the scheme's EIP-712 domain."""
ERC3009_DEPOSIT_COLLECTOR_ADDRESS = "0x4020806089470a89826cB9fB1f4059150b550004"
"""The EIP-3009 deposit collector: the payee (``to``) of a deposit's ``ReceiveWithAuthorization``."""
PERMIT2_DEPOSIT_COLLECTOR_ADDRESS = "0x4020425FAf3B746C082C2f942b4E5159887B0005"
"""The Permit2 deposit collector: the ``spender`` of a deposit's Permit2 witness permit."""

ZERO_ADDRESS = "0x" + "00" * 20
MIN_WITHDRAW_DELAY = 900
"""The shortest ``withdrawDelay`` a channel may have (15 minutes, in seconds)."""
MAX_WITHDRAW_DELAY = 2_592_000
"""The longest (30 days)."""
MAX_AMOUNT = 2**128 - 1
"""Amounts on a channel are uint128."""

DOMAIN_NAME = "x402 Batch Settlement"
DOMAIN_VERSION = "1"

CHANNEL_CONFIG_TYPE = (
    "ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,"
    "address token,uint40 withdrawDelay,bytes32 salt)"
)
VOUCHER_TYPE = "Voucher(bytes32 channelId,uint128 maxClaimableAmount)"
REFUND_TYPE = "Refund(bytes32 channelId,uint256 nonce,uint128 amount)"
CLAIM_ENTRY_TYPE = "ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
CLAIM_BATCH_TYPE = "ClaimBatch(ClaimEntry[] claims)" + CLAIM_ENTRY_TYPE
DEPOSIT_WITNESS_TYPE = "DepositWitness(bytes32 channelId)"
DEPOSIT_WITNESS_TYPE_STRING = (
    "DepositWitness witness)" + DEPOSIT_WITNESS_TYPE + "TokenPermissions(address token,uint256 amount)"
)
"""What the Permit2 collector passes to Permit2 after its ``PermitWitnessTransferFrom(...,`` stub."""

CHANNEL_CONFIG_TYPEHASH = keccak256(CHANNEL_CONFIG_TYPE.encode())
VOUCHER_TYPEHASH = keccak256(VOUCHER_TYPE.encode())
REFUND_TYPEHASH = keccak256(REFUND_TYPE.encode())
CLAIM_ENTRY_TYPEHASH = keccak256(CLAIM_ENTRY_TYPE.encode())
CLAIM_BATCH_TYPEHASH = keccak256(CLAIM_BATCH_TYPE.encode())
DEPOSIT_WITNESS_TYPEHASH = keccak256(DEPOSIT_WITNESS_TYPE.encode())

_PERMIT2_DOMAIN_TYPEHASH = keccak256(b"EIP712Domain(string name,uint256 chainId,address verifyingContract)")
_TOKEN_PERMISSIONS_TYPEHASH = keccak256(b"TokenPermissions(address token,uint256 amount)")
_DEPOSIT_PERMIT_TYPEHASH = keccak256(
    (
        "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,"
        + DEPOSIT_WITNESS_TYPE_STRING
    ).encode()
)


def _uint128_word(name: str, value: object) -> bytes:
    if type(value) is not int or not 0 <= value <= MAX_AMOUNT:
        raise ValueError(f"{name} must be an int in [0, 2**128)")
    return value.to_bytes(32, "big")


def _bytes32(name: str, value: object) -> bytes:
    if not isinstance(value, bytes) or len(value) != 32:
        raise ValueError(f"{name} must be 32 bytes")
    return value


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    """A channel's immutable parameters; their EIP-712 digest is its id (:func:`channel_id`).

    ``payer_authorizer`` is the key that signs vouchers (the zero address: the payer itself, which
    may be an EIP-1271 wallet); ``receiver_authorizer`` signs claims and refunds for the receiver;
    ``withdraw_delay`` is in seconds (:data:`MIN_WITHDRAW_DELAY` … :data:`MAX_WITHDRAW_DELAY`, which
    the escrow enforces at deposit); ``salt`` tells apart channels otherwise the same."""

    payer: str
    payer_authorizer: str
    receiver: str
    receiver_authorizer: str
    token: str
    withdraw_delay: int
    salt: bytes

    def struct_hash(self) -> bytes:
        """``hashStruct(ChannelConfig)``; ``ValueError`` for a field that cannot be encoded."""
        if type(self.withdraw_delay) is not int or not 0 <= self.withdraw_delay < 2**40:
            raise ValueError("withdraw_delay must be an int in [0, 2**40)")
        return keccak256(
            CHANNEL_CONFIG_TYPEHASH
            + address_word("payer", self.payer)
            + address_word("payer_authorizer", self.payer_authorizer)
            + address_word("receiver", self.receiver)
            + address_word("receiver_authorizer", self.receiver_authorizer)
            + address_word("token", self.token)
            + self.withdraw_delay.to_bytes(32, "big")
            + _bytes32("salt", self.salt)
        )

    def abi_tuple(self) -> tuple[str, str, str, str, str, int, bytes]:
        """The ABI tuple ``(address,address,address,address,address,uint40,bytes32)`` of the struct."""
        return (
            self.payer,
            self.payer_authorizer,
            self.receiver,
            self.receiver_authorizer,
            self.token,
            self.withdraw_delay,
            self.salt,
        )


@dataclass(frozen=True, slots=True)
class ChannelDomain:
    """The scheme's EIP-712 domain on chain ``chain_id`` (the escrow at ``verifying_contract``, its
    canonical address unless given). ``separator`` is computed once."""

    chain_id: int
    verifying_contract: str = BATCH_SETTLEMENT_ADDRESS
    separator: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        separator = keccak256(
            DOMAIN_TYPEHASH
            + keccak256(DOMAIN_NAME.encode())
            + keccak256(DOMAIN_VERSION.encode())
            + uint256_word("chain_id", self.chain_id)
            + address_word("verifying_contract", self.verifying_contract)
        )
        object.__setattr__(self, "separator", separator)

    def digest(self, struct_hash: bytes) -> bytes:
        """``keccak256(0x1901 || separator || struct_hash)``."""
        return keccak256(b"\x19\x01" + self.separator + struct_hash)


@dataclass(frozen=True, slots=True)
class VoucherClaim:
    """One row of a claim: the payer's voucher (its channel, its ceiling, its signature) and the
    cumulative amount the receiver's side claims with it (at most the ceiling)."""

    config: ChannelConfig
    max_claimable_amount: int
    signature: bytes
    total_claimed: int

    def abi_tuple(self) -> tuple[tuple[tuple[str, str, str, str, str, int, bytes], int], bytes, int]:
        """The ABI tuple ``((ChannelConfig,uint128),bytes,uint128)``."""
        return ((self.config.abi_tuple(), self.max_claimable_amount), self.signature, self.total_claimed)


def channel_id(domain: ChannelDomain, config: ChannelConfig) -> bytes:
    """The channel's id: the EIP-712 digest of ``config`` under ``domain`` (so the same parameters
    give another channel on another chain or escrow)."""
    return domain.digest(config.struct_hash())


def voucher_digest(domain: ChannelDomain, channel: bytes, max_claimable_amount: int) -> bytes:
    """What the payer (or its ``payerAuthorizer``) signs: ``Voucher(channelId, maxClaimableAmount)``."""
    return domain.digest(
        keccak256(
            VOUCHER_TYPEHASH
            + _bytes32("channel", channel)
            + _uint128_word("max_claimable_amount", max_claimable_amount)
        )
    )


def refund_digest(domain: ChannelDomain, channel: bytes, nonce: int, amount: int) -> bytes:
    """What the ``receiverAuthorizer`` signs for ``refundWithSignature``: ``Refund(channelId, nonce, amount)``."""
    return domain.digest(
        keccak256(
            REFUND_TYPEHASH
            + _bytes32("channel", channel)
            + uint256_word("nonce", nonce)
            + _uint128_word("amount", amount)
        )
    )


def claim_batch_digest(domain: ChannelDomain, claims: Sequence[VoucherClaim]) -> bytes:
    """What the ``receiverAuthorizer`` signs for ``claimWithSignature``: ``ClaimBatch(ClaimEntry[] claims)``,
    one ``ClaimEntry(channelId, maxClaimableAmount, totalClaimed)`` per row, in order."""
    entries = b"".join(
        keccak256(
            CLAIM_ENTRY_TYPEHASH
            + channel_id(domain, claim.config)
            + _uint128_word("max_claimable_amount", claim.max_claimable_amount)
            + _uint128_word("total_claimed", claim.total_claimed)
        )
        for claim in claims
    )
    return domain.digest(keccak256(CLAIM_BATCH_TYPEHASH + keccak256(entries)))


def erc3009_deposit_nonce(channel: bytes, salt: int) -> bytes:
    """The EIP-3009 nonce of a deposit into ``channel``: ``keccak256(abi.encode(channelId, salt))``
    (the EIP-3009 collector recomputes it, so the authorization pays into that channel only)."""
    return keccak256(_bytes32("channel", channel) + uint256_word("salt", salt))


def permit2_deposit_digest(
    chain_id: int, *, token: str, amount: int, nonce: int, deadline: int, channel: bytes
) -> bytes:
    """What the payer signs for a Permit2 deposit: a ``PermitWitnessTransferFrom`` of ``amount`` of
    ``token`` to the Permit2 collector (the spender), with the witness ``DepositWitness(channelId)``."""
    separator = keccak256(
        _PERMIT2_DOMAIN_TYPEHASH
        + keccak256(b"Permit2")
        + uint256_word("chain_id", chain_id)
        + address_word("Permit2", PERMIT2_ADDRESS)
    )
    permitted = keccak256(_TOKEN_PERMISSIONS_TYPEHASH + address_word("token", token) + uint256_word("amount", amount))
    witness = keccak256(DEPOSIT_WITNESS_TYPEHASH + _bytes32("channel", channel))
    struct = keccak256(
        _DEPOSIT_PERMIT_TYPEHASH
        + permitted
        + address_word("spender", PERMIT2_DEPOSIT_COLLECTOR_ADDRESS)
        + uint256_word("nonce", nonce)
        + uint256_word("deadline", deadline)
        + witness
    )
    return keccak256(b"\x19\x01" + separator + struct)
