"""What settlement checks before a payment may reach the chain, with no side effects: the terms
against the endpoint they are for (`EndpointPolicy`), the payment against its terms and the EIP-3009
signature (`verify_payment`), then the transfer simulated from the relayer (`simulation_outcome`).
Each failed check is a `PaymentRefusal` with an x402 reason code. The platform checks a paid request's
terms here only, once.

The facilitator's ``POST /x402/verify`` is these checks alone; ``settle`` runs them on the way.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from typing import Any

from x402mw.evm.eip712 import (
    InvalidSignatureError,
    TokenDomain,
    TransferAuthorization,
    recover_transfer_signer,
    transfer_digest,
)
from x402mw.evm.keccak import keccak256
from x402mw.platform.chain.relayer import RevertError, simulated
from x402mw.platform.clock import Clock
from x402mw.platform.services.chains import ChainHandle, Chains
from x402mw.protocol import reasons
from x402mw.protocol.models import Authorization, PaymentPayload, PaymentRequirements

__all__ = [
    "MIN_VALIDITY_SECONDS",
    "EndpointPolicy",
    "PaymentRefusal",
    "Verified",
    "WalletDeployment",
    "check_terms",
    "payload_hash",
    "revert_refusal",
    "settled_on",
    "simulation_outcome",
    "verify_payment",
]

MAX_SIGNATURE_BYTES = 4096
"""The longest signature checked (a smart account's, with an ERC-6492 factory call, fits many times)."""

MIN_VALIDITY_SECONDS = 6
"""An authorization must stay valid at least this long after it arrives: time to relay and include it."""


class PaymentRefusal(Exception):
    """A payment that fails a check: ``reason`` is the x402 reason code, ``message`` says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.details: dict[str, Any] | None = None  # what the payer needs to act on it, if anything


@dataclass(frozen=True, slots=True)
class WalletDeployment:
    """The factory call of an ERC-6492 signature: what deploys the smart account at ``from``."""

    factory: str
    calldata: bytes


@dataclass(frozen=True, slots=True)
class Verified:
    """A payment that passed the off-chain checks: its chain, its authorization and signature, the
    payer who signed it, and a hash of what was signed (two sends of one payload share it).

    ``smart`` marks a signature that does not recover to ``from``: only a smart account's wallet can
    accept it, which `x402mw.platform.services.settlement.smart_accounts.verify_contract_signer` asks on-chain
    (``digest`` is what was signed). That check fills ``token_signature`` (what the token's
    ``bytes signature`` overload gets: the ERC-6492 wrapper taken off) and ``deployment`` (the
    factory call, for a wallet not deployed yet), and sets ``payer`` to the wallet."""

    chain: ChainHandle
    auth: TransferAuthorization
    signature: bytes
    payer: str
    payload_hash: str
    smart: bool = False
    digest: bytes | None = None
    token_signature: bytes | None = None
    deployment: WalletDeployment | None = None


@dataclass(frozen=True, slots=True)
class EndpointPolicy:
    """What an agent endpoint's payments must be: on its chain, in its token, to one of the payout
    addresses it has had (a payment made on a challenge issued before a payout change still pays
    the merchant)."""

    chain_id: int
    currency: str
    payout_history: frozenset[str]  # lowercase

    @classmethod
    def of(cls, endpoint: Any) -> EndpointPolicy:
        """The terms of an ``agent_endpoints`` row."""
        history = frozenset(address.lower() for address in endpoint.payout_history or [])
        return cls(endpoint.chain_id, endpoint.currency, history)


def check_terms(chains: Chains, endpoint: EndpointPolicy, accepted: PaymentRequirements) -> None:
    if accepted.network != f"eip155:{endpoint.chain_id}":
        raise PaymentRefusal(reasons.INVALID_NETWORK, "the payment is for another network than the endpoint's")
    chain = chains.get(endpoint.chain_id)
    asset = chain.asset(endpoint.currency) if chain else None
    if asset is None or asset.address.lower() != accepted.asset.lower():
        raise PaymentRefusal(reasons.INVALID_ASSET, "the payment is in another token than the endpoint's")
    if accepted.pay_to.lower() not in endpoint.payout_history:
        raise PaymentRefusal(
            reasons.INVALID_RECIPIENT, "the payment pays an address that is not the endpoint's payout address"
        )


def settled_on(
    chains: Chains, scheme: str, accepted: PaymentRequirements, endpoint: EndpointPolicy | None = None
) -> tuple[ChainHandle, TokenDomain]:
    """The chain a payment of ``scheme`` on the terms ``accepted`` is settled on, and the token's
    EIP-712 domain there, once the terms are checked (against ``endpoint``'s when the payment is for
    one); `PaymentRefusal` otherwise. The first checks of every scheme's verification."""
    if accepted.scheme != scheme:
        raise PaymentRefusal(reasons.INVALID_SCHEME, f"scheme {accepted.scheme!r} is not {scheme}")
    if endpoint is not None:
        check_terms(chains, endpoint, accepted)
    chain = chains.by_network(accepted.network)
    if chain is None:
        raise PaymentRefusal(reasons.INVALID_NETWORK, f"network {accepted.network} is not settled here")
    domain = chain.domain(accepted.asset)
    if domain is None:
        raise PaymentRefusal(reasons.INVALID_ASSET, f"asset {accepted.asset} is not settled here")
    return chain, domain


def verify_payment(
    chains: Chains,
    clock: Clock,
    accepted: PaymentRequirements,
    payload: PaymentPayload,
    endpoint: EndpointPolicy | None = None,
) -> Verified:
    """Check everything that can be checked off-chain, the terms against ``endpoint``'s when the
    payment is for one; `PaymentRefusal` with a reason code otherwise."""
    chain, domain = settled_on(chains, "exact", accepted, endpoint)
    wire = payload.payload.authorization
    if wire.to.lower() != accepted.pay_to.lower():
        raise PaymentRefusal(reasons.INVALID_RECIPIENT, "the authorization pays someone other than payTo")
    if wire.value != accepted.amount:
        raise PaymentRefusal(reasons.INVALID_VALUE, "the authorized value differs from the amount asked")
    now = clock.time()
    if wire.valid_after > now:
        raise PaymentRefusal(reasons.INVALID_VALID_AFTER, "the authorization is not yet valid")
    if wire.valid_before < now + MIN_VALIDITY_SECONDS:
        raise PaymentRefusal(reasons.INVALID_VALID_BEFORE, "the authorization has expired or expires too soon")
    try:
        signature = bytes.fromhex(payload.payload.signature.removeprefix("0x"))
        auth = TransferAuthorization(
            from_address=wire.from_address,
            to=wire.to,
            value=wire.value,
            valid_after=wire.valid_after,
            valid_before=wire.valid_before,
            nonce=bytes.fromhex(wire.nonce[2:]),
        )
    except ValueError:
        raise PaymentRefusal(reasons.INVALID_SIGNATURE, "the signature is malformed") from None
    try:
        signer = recover_transfer_signer(domain, auth, signature)
    except InvalidSignatureError:
        signer = ""  # not a key's: perhaps a smart account's
    if signer.lower() != wire.from_address.lower():
        if not signature or len(signature) > MAX_SIGNATURE_BYTES:
            raise PaymentRefusal(reasons.INVALID_SIGNATURE, "the signature is malformed")
        # Not by a key: a smart account's signature, or nobody's; the chain tells (the caller's next step).
        hashed = payload_hash(signature, wire, accepted.asset)
        digest = transfer_digest(domain, auth)
        return Verified(chain, auth, signature, auth.from_address, hashed, smart=True, digest=digest)
    return Verified(chain, auth, signature, signer, payload_hash(signature, wire, accepted.asset))


def payload_hash(signature: bytes, wire: Authorization, asset: str) -> str:
    """What names one signed payload (`Verified.payload_hash`): two sends of it share it."""
    return hashlib.sha256(
        signature + repr(sorted(wire.to_wire().items())).encode() + asset.lower().encode()
    ).hexdigest()


async def simulation_outcome(simulation: asyncio.Future[Any], scheme: str = "exact") -> None:
    """Wait for a simulation (`Relayer.simulate_soon`) of a transfer of ``scheme``; `PaymentRefusal`
    (`revert_refusal`) if it would revert."""
    try:
        await simulated(simulation)
    except RevertError as exc:
        raise revert_refusal(exc, scheme) from None


def revert_refusal(error: RevertError, scheme: str) -> PaymentRefusal:
    """The refusal of a payment whose transfer (of ``scheme``: ``exact``, the token's EIP-3009
    call; ``upto``, the upto proxy through Permit2) the node says would revert. Every path from a
    node's revert to a reason code goes through here: the node's answer is decoded to
    ``error.reason`` once (`x402mw.platform.chain.transactions.simulated`), and mapped here once.
    (A transfer sent is not run by the node first: one that reverts once mined is
    ``transaction_reverted``, or its authorization was used by another.)"""
    reason = _upto_reason(error.reason) if scheme == "upto" else _token_reason(error.reason)
    return PaymentRefusal(reason, f"the transfer would revert: {error.reason}")


def _token_reason(text: str) -> str:
    """The x402 reason code for a token's revert message."""
    lowered = text.lower()
    if "balance" in lowered:
        return reasons.INSUFFICIENT_FUNDS
    if "used" in lowered or "canceled" in lowered:
        return reasons.NONCE_USED
    if "expired" in lowered:
        return reasons.INVALID_VALID_BEFORE
    if "not yet valid" in lowered:
        return reasons.INVALID_VALID_AFTER
    if "signature" in lowered:
        return reasons.INVALID_SIGNATURE
    return reasons.TRANSACTION_REVERTED


def _selector(signature: str) -> str:
    return keccak256(signature.encode())[:4].hex()


_UPTO_REVERTS = {
    _selector("SignatureExpired(uint256)"): reasons.PERMIT2_DEADLINE_EXPIRED,
    _selector("InvalidNonce()"): reasons.PERMIT2_NONCE_USED,
    _selector("InvalidSignature()"): reasons.PERMIT2_INVALID_SIGNATURE,
    _selector("InvalidSigner()"): reasons.PERMIT2_INVALID_SIGNATURE,
    _selector("InvalidSignatureLength()"): reasons.PERMIT2_INVALID_SIGNATURE,
    _selector("InvalidContractSignature()"): reasons.PERMIT2_INVALID_SIGNATURE,
    _selector("UnauthorizedFacilitator()"): reasons.UPTO_UNAUTHORIZED_FACILITATOR,
    _selector("AmountExceedsPermitted()"): reasons.UPTO_SETTLEMENT_EXCEEDS_AMOUNT,
    _selector("InvalidAmount(uint256)"): reasons.UPTO_SETTLEMENT_EXCEEDS_AMOUNT,
    _selector("PaymentTooEarly()"): reasons.PERMIT2_NOT_YET_VALID,
    _selector("Permit2612AmountMismatch()"): reasons.INVALID_EIP2612_PERMIT,
}


def _upto_reason(text: str) -> str:
    """The x402 reason code of a revert of the upto proxy or Permit2 (custom errors, by selector)."""
    lowered = text.lower()
    for selector, reason in _UPTO_REVERTS.items():
        if selector in lowered:
            return reason
    if "transfer_from_failed" in lowered:
        return reasons.PERMIT2_INSUFFICIENT_BALANCE  # or no allowance: the upto settlement asks why
    return reasons.TRANSACTION_REVERTED
