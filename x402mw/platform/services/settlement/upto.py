"""Metered settlement: the ``upto`` scheme through Permit2, in two steps around the seller's handler.

1. `UptoSettlement.authorize` (before the handler): the payload is checked off-chain
   (`verify_upto`: the Permit2 witness signature, spender, token, payee, facilitator, ceiling, time
   window, and the EIP-2612 permit of the ``eip2612GasSponsoring`` extension), the settlement of
   the whole ceiling is simulated from the relayer (the worst case: balance, nonce, allowance), and
   the authorization is claimed under the same unique (chain, token, payer, nonce) as an ``exact``
   payment, with the Permit2 nonce as its nonce. The claim is ``authorized`` and leased to the
   request that made it (`AUTHORIZE_LEASE`): the same signature sent again meanwhile is *pending*.
2. `Holds.capture` (after the handler), by the payment's id: the usage, at most the ceiling, is
   written on the claim once (``authorized`` -> ``claimed``), then sent, waited for and released
   exactly as an ``exact`` payment (`Sender.execute`): pending past the wait, never
   failed for being slow, finished by recovery if its process stops. A usage of 0 sends nothing:
   the payment is settled for 0 with a receipt and no transaction, and the permit's nonce stays
   unused on-chain (the platform's claim keeps it from being settled again).

A payer without a Permit2 allowance and no EIP-2612 permit is refused with
``permit2_allowance_required`` (HTTP 412 to the agent). The facilitator's ``/settle`` does both
steps in one call (`UptoSettlement.settle`), as the x402 facilitator API has it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, update

from x402mw.evm.eip712 import InvalidSignatureError, TokenDomain, recover_digest_signer
from x402mw.evm.permit2 import UptoPermit, permit2612_digest, upto_permit_digest
from x402mw.platform.batching import unreachable
from x402mw.platform.chain.contracts import EIP2612Permit
from x402mw.platform.chain.relayer import ChainUnavailable
from x402mw.platform.chain.token import allowance, balance_of, permit_nonce
from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentPayment
from x402mw.platform.services.chains import ChainHandle, Chains
from x402mw.platform.services.settlement.checks import (
    MIN_VALIDITY_SECONDS,
    EndpointPolicy,
    PaymentRefusal,
    settled_on,
    simulation_outcome,
)
from x402mw.platform.services.settlement.holds import Holds
from x402mw.platform.services.settlement.outcomes import (
    Claimed,
    SettleOutcome,
    SettleRequest,
    failed,
    outcome_for,
    unavailable,
)
from x402mw.platform.services.settlement.service import SettlementService
from x402mw.platform.services.settlement.transfers import Transfer, upto_transfer
from x402mw.protocol import reasons
from x402mw.protocol.models import PaymentRequirements, UptoPaymentPayload
from x402mw.protocol.networks import PERMIT2_ADDRESS, UPTO_PERMIT2_PROXY_ADDRESS

logger = logging.getLogger("x402mw.platform.settlement")

EIP2612_EXTENSION = "eip2612GasSponsoring"
AUTHORIZE_LEASE = timedelta(seconds=120)
"""How long an authorization is held for the request that claimed it (its handler's time): the
same signature sent again within it is pending; after it, a new request may serve it."""


@dataclass(frozen=True, slots=True)
class VerifiedUpto:
    """An upto payload that passed the off-chain checks."""

    chain: ChainHandle
    permit: UptoPermit
    signature: bytes
    payer: str
    payload_hash: str
    permit2612: EIP2612Permit | None
    asset: str  # as the terms name it (the claim's)

    def transfer(self, amount: int) -> Transfer:
        return upto_transfer(
            asset=self.permit.token,
            payer=self.payer,
            ceiling=self.permit.ceiling,
            nonce=self.permit.nonce,
            deadline=self.permit.deadline,
            amount=amount,
            to=self.permit.to,
            facilitator=self.permit.facilitator,
            valid_after=self.permit.valid_after,
            signature=self.signature,
            permit2612=self.permit2612,
        )


def _same(a: str, b: str) -> bool:
    return a.lower() == b.lower()


def verify_upto(
    chains: Chains,
    now: int,
    accepted: PaymentRequirements,
    payload: UptoPaymentPayload,
    endpoint: EndpointPolicy | None,
    *,
    settle_amount: int | None = None,
) -> VerifiedUpto:
    """Check an upto payment off-chain; `PaymentRefusal` with the x402 reason code otherwise.

    ``accepted.amount`` is the ceiling (verification) unless ``settle_amount`` is given (the
    facilitator's settle, where the requirements carry the amount to settle): then the signed
    ceiling is ``permitted.amount``, which ``settle_amount`` may not exceed."""
    chain, domain = settled_on(chains, "upto", accepted, endpoint)  # the token's: for its EIP-2612 permit
    wire = payload.payload.permit2_authorization
    if not _same(wire.spender, UPTO_PERMIT2_PROXY_ADDRESS):
        raise PaymentRefusal(reasons.PERMIT2_INVALID_SPENDER, "the permit's spender is not the x402 upto proxy")
    if not _same(wire.permitted.token, accepted.asset):
        raise PaymentRefusal(reasons.PERMIT2_TOKEN_MISMATCH, "the permit is for another token than the terms'")
    if not _same(wire.witness.to, accepted.pay_to):
        raise PaymentRefusal(reasons.PERMIT2_RECIPIENT_MISMATCH, "the witness pays someone other than payTo")
    if not _same(wire.witness.facilitator, chain.facilitator.address):
        raise PaymentRefusal(
            reasons.UPTO_FACILITATOR_MISMATCH, "the witness names another facilitator than this platform"
        )
    ceiling = wire.permitted.amount
    if settle_amount is None and ceiling != accepted.amount:
        raise PaymentRefusal(reasons.PERMIT2_AMOUNT_MISMATCH, "the permitted amount differs from the ceiling asked")
    if settle_amount is not None and settle_amount > ceiling:
        raise PaymentRefusal(reasons.UPTO_SETTLEMENT_EXCEEDS_AMOUNT, "the amount to settle exceeds the signed ceiling")
    if ceiling == 0:
        raise PaymentRefusal(reasons.PERMIT2_AMOUNT_MISMATCH, "the permitted amount is 0")
    if wire.witness.valid_after > now:
        raise PaymentRefusal(reasons.PERMIT2_NOT_YET_VALID, "the permit is not yet valid")
    if wire.deadline < now + MIN_VALIDITY_SECONDS:
        raise PaymentRefusal(reasons.PERMIT2_DEADLINE_EXPIRED, "the permit has expired or expires too soon")
    try:
        signature = bytes.fromhex(payload.payload.signature.removeprefix("0x"))
        permit = UptoPermit(
            owner=wire.from_address,
            token=wire.permitted.token,
            ceiling=ceiling,
            spender=wire.spender,
            nonce=wire.nonce,
            deadline=wire.deadline,
            to=wire.witness.to,
            facilitator=wire.witness.facilitator,
            valid_after=wire.witness.valid_after,
        )
        signer = recover_digest_signer(upto_permit_digest(chain.chain_id, permit), signature)
    except (ValueError, InvalidSignatureError):
        raise PaymentRefusal(reasons.PERMIT2_INVALID_SIGNATURE, "the permit's signature is malformed") from None
    if not _same(signer, wire.from_address):
        raise PaymentRefusal(reasons.PERMIT2_INVALID_SIGNATURE, "the permit is not signed by its 'from'")
    permit2612 = _permit2612(domain, payload, signer, wire.permitted.token, ceiling)
    digest = hashlib.sha256(signature + repr(sorted(wire.to_wire().items())).encode() + accepted.asset.lower().encode())
    return VerifiedUpto(chain, permit, signature, signer, digest.hexdigest(), permit2612, accepted.asset)


def _permit2612(
    domain: TokenDomain, payload: UptoPaymentPayload, payer: str, token: str, ceiling: int
) -> EIP2612Permit | None:
    """The ``eip2612GasSponsoring`` permit, checked: by the payer, for Permit2, for ``token`` (whose
    EIP-712 domain is ``domain``)."""
    extension = (payload.extensions or {}).get(EIP2612_EXTENSION)
    if not isinstance(extension, dict):
        return None
    info = extension.get("info")
    if not isinstance(info, dict):
        raise PaymentRefusal(reasons.INVALID_EIP2612_PERMIT, f"{EIP2612_EXTENSION} carries no info")
    try:
        owner, asset, spender = str(info["from"]), str(info["asset"]), str(info["spender"])
        value, nonce, deadline = (int(str(info[k]), 10) for k in ("amount", "nonce", "deadline"))
        signature = bytes.fromhex(str(info["signature"]).removeprefix("0x"))
        if not (_same(owner, payer) and _same(asset, token) and _same(spender, PERMIT2_ADDRESS)):
            raise ValueError("the permit is not the payer's, for Permit2, in this token")
        if value != ceiling:
            raise ValueError("the permit's amount is not the ceiling")
        signer = recover_digest_signer(permit2612_digest(domain, owner, spender, value, nonce, deadline), signature)
        if not _same(signer, owner):
            raise ValueError("the permit is not signed by its owner")
    except (KeyError, ValueError, InvalidSignatureError) as exc:
        raise PaymentRefusal(reasons.INVALID_EIP2612_PERMIT, f"the EIP-2612 permit is unusable: {exc}") from None
    return (value, deadline, signature[:32], signature[32:64], signature[64])


class UptoSettlement:
    """The upto half of settlement, on a `SettlementService` (its writes, releases, recovery, sending)."""

    def __init__(self, service: SettlementService, holds: Holds, *, lease: timedelta = AUTHORIZE_LEASE) -> None:
        self.service = service
        self.holds = holds
        self.lease = lease

    def verify(
        self,
        accepted: PaymentRequirements,
        payload: UptoPaymentPayload,
        endpoint: EndpointPolicy | None = None,
        *,
        settle_amount: int | None = None,
    ) -> VerifiedUpto:
        return verify_upto(
            self.service.chains,
            int(self.service.clock.time()),
            accepted,
            payload,
            endpoint,
            settle_amount=settle_amount,
        )

    async def check_on_chain(self, verified: VerifiedUpto) -> None:
        """Simulate the settlement of the whole ceiling from the relayer; `PaymentRefusal` if it would
        revert (412's ``permit2_allowance_required`` for a payer without an allowance)."""
        transfer = verified.transfer(verified.permit.ceiling)
        await self._simulated(verified, verified.chain.facilitator.simulate_soon(transfer.to, transfer.calldata))

    async def _simulated(self, verified: VerifiedUpto, simulation: asyncio.Future[Any]) -> None:
        try:
            await simulation_outcome(simulation, "upto")
        except PaymentRefusal as refusal:
            if refusal.reason == reasons.PERMIT2_INSUFFICIENT_BALANCE:
                raise await self._why_transfer_fails(verified) from None
            raise

    async def _why_transfer_fails(self, verified: VerifiedUpto) -> PaymentRefusal:
        rpc, token = verified.chain.rpc, verified.permit.token
        if verified.permit2612 is None and await allowance(rpc, token, verified.payer, PERMIT2_ADDRESS) < (
            verified.permit.ceiling
        ):
            # The payer's EIP-2612 nonce goes with the refusal: an agent without a node of its own
            # can sign the permit with it (a wrong one only makes the permit fail).
            nonce = await permit_nonce(rpc, token, verified.payer)
            refusal = PaymentRefusal(
                reasons.PERMIT2_ALLOWANCE_REQUIRED,
                "the payer has not approved Permit2: approve it once, or sign an EIP-2612 permit "
                f"({EIP2612_EXTENSION})",
            )
            refusal.details = {EIP2612_EXTENSION: {"info": {"from": verified.payer, "nonce": str(nonce)}}}
            return refusal
        held = await balance_of(rpc, token, verified.payer)
        return PaymentRefusal(reasons.PERMIT2_INSUFFICIENT_BALANCE, f"the payer holds {held}, less than the ceiling")

    async def check(self, accepted: PaymentRequirements, payload: UptoPaymentPayload, *, x402_version: int = 2) -> str:
        """The facilitator's verify: `verify` and `check_on_chain`, counted (metrics); the payer, or
        `PaymentRefusal` (`ChainUnavailable` when the chain cannot be asked: not counted)."""
        try:
            if x402_version not in (1, 2):
                raise PaymentRefusal(reasons.INVALID_X402_VERSION, "unsupported x402Version")
            verified = self.verify(accepted, payload)
            await self.check_on_chain(verified)
        except PaymentRefusal as refusal:
            self.service.count_verification(accepted.network, refusal.reason)
            raise
        self.service.count_verification(accepted.network, None)
        return verified.payer

    async def authorize(self, request: SettleRequest) -> SettleOutcome:
        """Step 1: verify, simulate and claim; ``authorized`` (or the outcome the authorization has)."""
        return self.service.counted(request.accepted.network, await self._authorize(request))

    async def settle(self, request: SettleRequest, amount: int) -> SettleOutcome:
        """Both steps at once (the facilitator's ``/settle``): ``request.accepted.amount`` is the
        amount to settle, the payload's ``permitted.amount`` the ceiling."""
        return self.service.counted(request.accepted.network, await self._settle(request, amount))

    async def _authorize(self, request: SettleRequest) -> SettleOutcome:
        network = request.accepted.network
        payload = request.payload
        if not isinstance(payload, UptoPaymentPayload):
            return failed(network, reasons.INVALID_SCHEME, "an exact payload cannot pay upto terms")
        try:
            verified = self.verify(request.accepted, payload, request.terms)
        except PaymentRefusal as refusal:
            return failed(network, refusal.reason, refusal.message)
        if request.known_only:  # the challenge expired: only a payment already made is answered
            existing = await self._load(verified)
            if existing is None:
                return failed(network, reasons.CHALLENGE_EXPIRED, "the challenge has expired; pay the new one")
            return await self._join(existing, request, verified)
        if not verified.chain.facilitator.available:
            # Not "nothing taken" for an authorization made already (its usage captured, say): its
            # outcome stands, pending while the chain cannot be reached.
            existing = await self._load(verified)
            if existing is None:
                return unavailable(network)
            return await self._join(existing, request, verified)
        # The simulation (no side effects) and the claim go out at once, as for exact payments; a
        # claim whose simulation fails is withdrawn.
        transfer = verified.transfer(verified.permit.ceiling)
        simulation = verified.chain.facilitator.simulate_soon(transfer.to, transfer.calldata)
        row = self._new_claim(request, verified)
        try:
            won = await self.service.writes.claim(row.row(), request.challenge)
        except BaseException:
            simulation.cancel()
            raise
        if not won:  # claimed already: by this payment (a retry), or another with its nonce
            simulation.cancel()
            existing = await self._load(verified)
            if existing is None:
                return unavailable(network)
            return await self._join(existing, request, verified)
        try:
            await self._simulated(verified, simulation)
        except PaymentRefusal as refusal:
            await self._withdraw(row.id)
            outcome = failed(network, refusal.reason, refusal.message)
            if refusal.details:
                response = outcome.response.model_copy(update={"extensions": refusal.details})
                outcome = SettleOutcome("failed", response, outcome.message)
            return outcome
        except BaseException as exc:
            await self._withdraw(row.id)
            if isinstance(exc, ChainUnavailable) or unreachable(exc):
                return unavailable(network)
            raise
        return outcome_for(row)

    async def _withdraw(self, payment_id: str) -> None:
        """Delete a claim that is still only authorized (its simulation refused it): nothing was held."""
        table = tables.agent_payments
        async with self.service.engine.begin() as conn:
            await conn.execute(delete(table).where(table.c.id == payment_id, table.c.status == "authorized"))

    async def _settle(self, request: SettleRequest, amount: int) -> SettleOutcome:
        payload = request.payload
        network = request.accepted.network
        if not isinstance(payload, UptoPaymentPayload):
            return failed(network, reasons.INVALID_SCHEME, "an exact payload cannot pay upto terms")
        ceiling = payload.payload.permit2_authorization.permitted.amount
        if amount > ceiling:
            return failed(network, reasons.UPTO_SETTLEMENT_EXCEEDS_AMOUNT, "the amount exceeds the signed ceiling")
        authorize = dataclasses.replace(request, accepted=request.accepted.model_copy(update={"amount": ceiling}))
        outcome = await self._authorize(authorize)
        if outcome.status != "authorized" or outcome.payment_id is None:
            return outcome
        captured = await self.holds.capture(
            request.merchant_id, outcome.payment_id, amount, wait_seconds=request.wait_seconds
        )
        return captured or failed(network, reasons.UNEXPECTED_SETTLE_ERROR, "the authorization was given up meanwhile")

    # -- internals -------------------------------------------------------------------------------

    async def _load(self, verified: VerifiedUpto) -> AgentPayment | None:
        return await self.service.writes.load_by_authorization(
            verified.chain.chain_id, verified.asset, verified.payer, _nonce_bytes(verified.permit.nonce)
        )

    def _new_claim(self, request: SettleRequest, verified: VerifiedUpto) -> Claimed:
        now = self.service.clock.now()
        permit: dict[str, Any] = {"facilitator": verified.permit.facilitator}
        if verified.permit2612 is not None:
            value, deadline, r, s, v = verified.permit2612
            permit["permit2612"] = [str(value), str(deadline), "0x" + r.hex(), "0x" + s.hex(), v]
        return request.claim(
            verified,
            nonce="0x" + _nonce_bytes(verified.permit.nonce).hex(),
            pay_to=verified.permit.to,
            amount_minor=0,
            status="authorized",
            created_at=now,
            valid_after=verified.permit.valid_after,
            valid_before=verified.permit.deadline,
            locked_until=now + self.lease,
            scheme="upto",
            ceiling_minor=verified.permit.ceiling,
            permit=permit,
        )

    async def _join(self, existing: AgentPayment, request: SettleRequest, verified: VerifiedUpto) -> SettleOutcome:
        """The authorization is claimed already: by this payload and merchant, it answers its outcome."""
        network = request.accepted.network
        if existing.payload_hash != verified.payload_hash or existing.merchant_id != request.merchant_id:
            return failed(network, reasons.PERMIT2_NONCE_USED, "this Permit2 nonce has already been used")
        if existing.status != "authorized":
            return await self.service.join(existing, network, min(request.wait_seconds, 5.0))
        # Authorized and not captured: the request holding it is being served, or gave it up.
        now = self.service.clock.now()
        async with self.service.engine.begin() as conn:
            taken = await conn.execute(
                update(tables.agent_payments)
                .where(
                    tables.agent_payments.c.id == existing.id,
                    tables.agent_payments.c.status == "authorized",
                    tables.agent_payments.c.locked_until <= now,
                )
                .values(locked_until=now + self.lease)
            )
        if taken.rowcount == 1:
            return outcome_for(existing)
        outcome = outcome_for(existing)
        response = outcome.response.model_copy(update={"error_reason": reasons.SETTLEMENT_PENDING})
        return SettleOutcome("pending", response, "another request is being served with this payment", existing.id)


def _nonce_bytes(nonce: int) -> bytes:
    return nonce.to_bytes(32, "big")
