"""What a settlement answers, and the records it answers from: the claim's row (`Claimed`), a
payment as read or claimed (`Payment`), a request to settle (`SettleRequest`), its outcome
(`SettleOutcome`) and the mapping of a recorded payment to its outcome (`outcome_for`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from x402mw.platform.db.models import AgentPayment, new_id
from x402mw.platform.objects import agents as objects
from x402mw.platform.services.chains import ChainHandle
from x402mw.platform.services.settlement.checks import EndpointPolicy
from x402mw.protocol import reasons
from x402mw.protocol.models import AnyPaymentPayload, PaymentRequirements, SettlementResponse


@dataclass(slots=True)
class Claimed:
    """The ``agent_payments`` row of a payment being claimed, every column, as a plain record: the
    settlement's hot path builds one per payment, where an `AgentPayment` (a table model, each
    attribute instrumented) costs about 50 µs to build. A test holds its fields to the table's."""

    id: str
    merchant_id: str | None
    endpoint_id: str | None
    challenge_id: str | None
    livemode: bool
    chain_id: int
    asset: str
    currency: str
    payer: str
    nonce: str
    pay_to: str
    amount_minor: int
    payload_hash: str
    resource: str
    release_policy: str
    status: str
    created_at: datetime
    transaction: str | None = None
    block_number: int | None = None
    error_reason: str | None = None
    receipt: dict[str, Any] | None = None
    chain_micros: int | None = None
    platform_micros: int | None = None
    settled_at: datetime | None = None
    signature: str | None = None
    valid_after: int | None = None
    valid_before: int | None = None
    locked_until: datetime | None = None
    scheme: str = "exact"
    ceiling_minor: int | None = None
    permit: dict[str, Any] | None = None

    def row(self) -> dict[str, Any]:
        """The row to insert: every column by name."""
        return {name: getattr(self, name) for name in self.__slots__}


Payment = AgentPayment | Claimed
"""An ``agent_payments`` row as settlement reads and updates it: loaded from the database, or just
claimed by this process."""


@dataclass(frozen=True, slots=True)
class SettleRequest:
    accepted: PaymentRequirements
    payload: AnyPaymentPayload
    merchant_id: str | None = None
    endpoint_id: str | None = None
    challenge_id: str | None = None
    resource: str = ""
    livemode: bool = False
    release_policy: str = "included"
    wait_seconds: float = 20.0
    challenge: dict[str, Any] | None = None  # the challenge's row, recorded with the outcome
    known_only: bool = False  # the challenge expired: answer a payment already made, settle no new one
    terms: EndpointPolicy | None = None  # the endpoint's, which the payment's terms must match
    hold: bool = False  # verify and claim it as `held`, send nothing (an MCP tool runs before it is settled)

    def claim(
        self,
        verified: Signed,
        *,
        nonce: str,
        pay_to: str,
        amount_minor: int,
        status: str,
        created_at: datetime,
        valid_after: int | None,
        valid_before: int | None,
        locked_until: datetime | None = None,
        scheme: str = "exact",
        ceiling_minor: int | None = None,
        permit: dict[str, Any] | None = None,
    ) -> Claimed:
        """The new row claiming this request's payment, of either scheme: what the request and the
        verified payload say, and the authorization's own columns (given)."""
        asset = verified.chain.network.asset_by_address(self.accepted.asset)
        return Claimed(
            id=new_id(),
            merchant_id=self.merchant_id,
            endpoint_id=self.endpoint_id,
            challenge_id=self.challenge_id,
            livemode=self.livemode,
            chain_id=verified.chain.chain_id,
            asset=self.accepted.asset,
            currency=asset.symbol if asset else "",
            payer=verified.payer,
            nonce=nonce,
            pay_to=pay_to,
            amount_minor=amount_minor,
            payload_hash=verified.payload_hash,
            resource=self.resource[:2048],
            release_policy=self.release_policy,
            status=status,
            created_at=created_at,
            signature="0x" + verified.signature.hex(),
            valid_after=valid_after,
            valid_before=valid_before,
            locked_until=locked_until,
            scheme=scheme,
            ceiling_minor=ceiling_minor,
            permit=permit,
        )


class Signed(Protocol):
    """What `SettleRequest.claim` reads of a verified payload, ``exact`` or ``upto``."""

    @property
    def chain(self) -> ChainHandle: ...
    @property
    def signature(self) -> bytes: ...
    @property
    def payer(self) -> str: ...
    @property
    def payload_hash(self) -> str: ...


@dataclass(frozen=True, slots=True)
class SettleOutcome:
    """``unavailable``: the chain could not be reached and nothing was sent or recorded; ``held``:
    verified and claimed, nothing sent (`SettleRequest.hold`); ``authorized`` (``upto`` only):
    verified and claimed, to be settled for the usage reported."""

    status: Literal["settled", "pending", "failed", "unavailable", "held", "authorized"]
    response: SettlementResponse
    message: str | None = None
    payment_id: str | None = None


def payment_of(row: Payment) -> objects.AgentPayment:
    """The public form of an agent payment (``agent_payment.settled`` data, challenge status)."""
    return objects.AgentPayment(
        id=row.id,
        status=row.status,
        challenge_id=row.challenge_id,
        endpoint_id=row.endpoint_id,
        network=f"eip155:{row.chain_id}",
        asset=row.asset,
        currency=row.currency,
        amount_minor=row.amount_minor,
        payer=row.payer,
        pay_to=row.pay_to,
        transaction=row.transaction,
        block_number=row.block_number,
        error_reason=row.error_reason,
        receipt=row.receipt,
        scheme="upto" if row.scheme == "upto" else "exact",
        max_amount_minor=row.ceiling_minor,
        livemode=row.livemode,
        created_at=row.created_at,
        settled_at=row.settled_at,
    )


def authorization_key(chain_id: int, token: str, payer: str, nonce: bytes) -> str:
    """What names an authorization in this process's bookkeeping (the claim's unique columns)."""
    return f"{chain_id}:{token.lower()}:{payer.lower()}:{nonce.hex()}"


def outcome_for(row: Payment) -> SettleOutcome:
    """What the answer for ``row``'s payment is, as recorded: settled (with its receipt), failed
    (with its reason) or pending."""
    network = f"eip155:{row.chain_id}"
    if row.status == "settled":
        response = SettlementResponse(
            success=True,
            payer=row.payer,
            transaction=row.transaction or "",
            network=network,
            amount=row.amount_minor,
            extensions={"receipt": row.receipt},
        )
        return SettleOutcome("settled", response, payment_id=row.id)
    if row.status == "authorized":  # upto: verified and claimed, waiting for its usage
        response = SettlementResponse(success=False, payer=row.payer, transaction="", network=network, amount=0)
        return SettleOutcome("authorized", response, "authorized, to be settled for the usage", payment_id=row.id)
    if row.status == "failed":
        return failed(
            network,
            row.error_reason or reasons.UNEXPECTED_SETTLE_ERROR,
            f"the payment failed: {row.error_reason}",
            transaction=row.transaction,
            payment_id=row.id,
        )
    response = SettlementResponse(
        success=False,
        error_reason=reasons.SETTLEMENT_PENDING,
        payer=row.payer,
        transaction=row.transaction or "",
        network=network,
        amount=row.amount_minor,
    )
    return SettleOutcome("pending", response, "the transfer is not final yet", payment_id=row.id)


def failed(
    network: str,
    reason: str,
    message: str,
    *,
    transaction: str | None = None,
    payment_id: str | None = None,
) -> SettleOutcome:
    response = SettlementResponse(success=False, error_reason=reason, transaction=transaction or "", network=network)
    return SettleOutcome("failed", response, message, payment_id)


def held(row: Payment, network: str) -> SettleOutcome:
    """A payment verified and claimed for a tool call, nothing sent: settle it or release it next."""
    response = SettlementResponse(
        success=True, payer=row.payer, transaction="", network=network, amount=row.amount_minor
    )
    return SettleOutcome("held", response, "held: settle it once the tool succeeded, or release it", row.id)


def unavailable(network: str) -> SettleOutcome:
    response = SettlementResponse(
        success=False, error_reason=reasons.CHAIN_UNAVAILABLE, transaction="", network=network
    )
    return SettleOutcome("unavailable", response, "the chain cannot be reached; retry shortly")
