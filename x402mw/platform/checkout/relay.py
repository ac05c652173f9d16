"""Paying an order with a signed EIP-3009 authorization that the platform relays (paying the gas):
a browser wallet's gasless payment (``POST /checkout/v1/payment-intents/:id/authorizations``) and an
agent paying the order's ``x402Url`` (`x402mw.platform.checkout.agent_pay`).

The transfer goes to the order's deposit address, so the deposit watcher credits it exactly like a
transfer the buyer sent (once, by its log), and refunds, sweeps and webhooks work unchanged. The
settlement itself is the agent payments' (`SettlementService`): the authorization is claimed once
across processes, simulated, sent, and answered with the same signed receipt; its record is an
``agent_payments`` row without a merchant (not metered, no ``agent_payment.settled``) whose
``challengeId`` is ``pi_<order id>``, the order the receipt pays.

An order takes one authorization at a time (``payment_intents.relay_hash``): a second, different
one while the first may still move money is refused before anything is sent, so two wallets or
agents cannot both pay it. The claim is given back when its payment failed or could not be sent
(the chain was down), or when the process that claimed it stopped before sending anything. The
same authorization sent again (a replay, to any process) gets the outcome of the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.chain.relayer import ChainUnavailable
from x402mw.platform.checkout.orders import PaymentOption, amount_due, awaiting_payment, find_order
from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentPayment
from x402mw.platform.services.settlement.checks import PaymentRefusal, payload_hash
from x402mw.platform.services.settlement.outcomes import SettleOutcome, SettleRequest, outcome_for
from x402mw.protocol import reasons
from x402mw.protocol.models import PaymentPayload, PaymentRequirements

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

__all__ = [
    "MAX_TIMEOUT_SECONDS",
    "RelayRefused",
    "Relayed",
    "order_requirements",
    "relay_authorization",
    "relay_busy",
    "relay_digest",
]

MAX_TIMEOUT_SECONDS = 300
"""How long an agent may take to sign after a 402 (``maxTimeoutSeconds``)."""
WAIT_SECONDS = 20.0  # how long a request waits for its transfer to be included

# A refusal's reason code -> (status, code, param) of the checkout API's answer. A well-formed
# authorization that this order cannot take is a 409, as checkout answers a choice the order does
# not offer (the request's form is right; it conflicts with the order and its terms).
_REFUSALS: dict[str, tuple[int, str, str | None]] = {
    reasons.INVALID_SIGNATURE: (409, "authorization_signature_invalid", "signature"),
    reasons.INVALID_VALID_BEFORE: (409, "authorization_expired", "authorization.validBefore"),
    reasons.INVALID_VALID_AFTER: (409, "authorization_not_yet_valid", "authorization.validAfter"),
    reasons.INVALID_RECIPIENT: (409, "authorization_wrong_recipient", "authorization.to"),
    reasons.INVALID_VALUE: (409, "authorization_wrong_amount", "authorization.value"),
    reasons.INVALID_ASSET: (409, "unsupported_currency", "currency"),
    reasons.INVALID_NETWORK: (409, "unsupported_chain", "network"),
    reasons.NONCE_USED: (409, "authorization_used", "authorization.nonce"),
    reasons.INSUFFICIENT_FUNDS: (422, "insufficient_funds", "authorization.from"),
}


class RelayRefused(Exception):
    """The authorization is refused and nothing was sent: ``status``, ``code``, ``param`` for the
    checkout API's envelope, ``reason`` the x402 reason code (an x402 client's ``errorReason``)."""

    def __init__(self, status: int, code: str, message: str, *, param: str | None = None, reason: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param, self.reason = status, code, message, param, reason

    @classmethod
    def of(cls, refusal: PaymentRefusal) -> RelayRefused:
        status, code, param = _REFUSALS.get(refusal.reason, (422, "authorization_failed", None))
        return cls(status, code, refusal.message, param=param, reason=refusal.reason)


@dataclass(frozen=True, slots=True)
class Relayed:
    """What became of a relayed authorization: ``outcome`` (settled with its receipt, pending with
    its transaction, failed, or unavailable: nothing sent) and the order as it now is."""

    outcome: SettleOutcome
    order: Mapping[Any, Any]


def order_requirements(option: PaymentOption, deposit: str, amount: int) -> PaymentRequirements:
    """The x402 ``exact`` terms that pay ``amount`` of ``option``'s coin to the order's deposit address."""
    domain = option.chain.domain(option.asset.address)
    return PaymentRequirements.model_validate(
        {
            "scheme": "exact",
            "network": option.network,
            "amount": str(amount),
            "asset": option.asset.address,
            "payTo": deposit,
            "maxTimeoutSeconds": MAX_TIMEOUT_SECONDS,
            "extra": {"name": domain.name if domain else "", "version": domain.version if domain else ""},
        }
    )


async def relay_authorization(
    platform: Platform,
    order: Mapping[Any, Any],
    accepted: PaymentRequirements,
    payload: PaymentPayload,
    *,
    resource: str,
) -> Relayed:
    """Relay ``payload`` (an authorization paying ``accepted``: the order's deposit address and the
    amount due) for ``order``. Raises `RelayRefused` (nothing sent) for an authorization that fails
    a check, for an order no longer awaiting payment (409 ``payment_intent_unexpected_state``), and
    for an order another authorization is paying (409 ``payment_in_progress``). The same
    authorization sent again answers its first outcome, whatever the order's state."""
    wire = payload.payload.authorization
    try:
        signature = bytes.fromhex(payload.payload.signature.removeprefix("0x"))
    except ValueError:
        raise RelayRefused(
            400,
            "authorization_signature_invalid",
            "the signature is not hex",
            param="signature",
            reason=reasons.INVALID_SIGNATURE,
        ) from None
    digest = payload_hash(signature, wire, accepted.asset)
    tag = f"pi_{order['id']}"
    now = platform.clock.now()
    replay = order["relay_hash"] == digest
    known = None
    if replay:
        known = await _payment(platform.engine, tag, digest)
        if known is not None and known.status == "settled":
            return Relayed(outcome_for(known), await _reload(platform.engine, order["id"]))
    elif not awaiting_payment(order, now) or amount_due(order) <= 0:
        status = "expired" if order["status"] == "requires_payment" else order["status"]
        raise RelayRefused(
            409,
            "payment_intent_unexpected_state",
            f"This payment is {status}; it can no longer be paid",
            reason=reasons.INVALID_REQUIREMENTS,
        )
    else:
        try:  # everything that can be checked without side effects, before the order is claimed
            await platform.settlement.verify(accepted, payload)
        except PaymentRefusal as refusal:
            raise RelayRefused.of(refusal) from None
        except ChainUnavailable:
            raise RelayRefused(
                503,
                "chain_unavailable",
                "the chain cannot be reached; nothing was taken: retry shortly",
                reason=reasons.CHAIN_UNAVAILABLE,
            ) from None
    claimed = await _claim(platform, order, digest, now)
    if not claimed:
        current = await _reload(platform.engine, order["id"])
        if current["relay_hash"] == digest:  # paid already by this very authorization: its outcome
            known = await _payment(platform.engine, tag, digest)
            if known is not None:
                return Relayed(outcome_for(known), current)
        if current["status"] != "requires_payment":
            status = current["status"]
            raise RelayRefused(
                409,
                "payment_intent_unexpected_state",
                f"This payment is {status}; it can no longer be paid",
                reason=reasons.INVALID_REQUIREMENTS,
            )
        raise RelayRefused(
            409,
            "payment_in_progress",
            "Another authorization is paying this payment; wait for its outcome",
            reason=reasons.INVALID_REQUIREMENTS,
        )
    try:
        outcome = await platform.settlement.settle(
            SettleRequest(
                accepted=accepted,
                payload=payload,
                challenge_id=tag,
                resource=resource[:2048],
                livemode=bool(order["livemode"]),
                wait_seconds=WAIT_SECONDS,
            )
        )
    except BaseException:
        await _give_back(platform, order["id"], tag, digest)
        raise
    if outcome.status == "failed" and outcome.payment_id is None and known is not None and known.status != "failed":
        # a replay refused before it reached the chain (it has expired since): the first send's outcome
        outcome = outcome_for(known)
    if outcome.status in ("failed", "unavailable"):
        await _give_back(platform, order["id"], tag, digest)
    return Relayed(outcome, await _reload(platform.engine, order["id"]))


def relay_digest(payload: PaymentPayload, asset: str) -> str | None:
    """What names ``payload`` among the authorizations relayed for orders (None: not hex)."""
    try:
        signature = bytes.fromhex(payload.payload.signature.removeprefix("0x"))
    except ValueError:
        return None
    return payload_hash(signature, payload.payload.authorization, asset)


async def relay_busy(platform: Platform, order: Mapping[Any, Any]) -> bool:
    """Whether an authorization relayed for ``order`` may still move money (a new one would be refused)."""
    digest = order["relay_hash"]
    return digest is not None and not await _dead(platform, order, digest, platform.clock.now())


async def _claim(platform: Platform, order: Mapping[Any, Any], digest: str, now: datetime) -> bool:
    """Make ``digest`` the authorization paying ``order`` (it may be already); False when the order
    no longer awaits payment or another authorization that may still move money holds it."""
    intents = tables.payment_intents
    payable = (intents.c.id == order["id"]) & (intents.c.status == "requires_payment")
    async with platform.engine.begin() as conn:
        taken = await conn.execute(
            update(intents)
            .where(payable, intents.c.relay_hash.is_(None) | (intents.c.relay_hash == digest))
            .values(relay_hash=digest, relay_claimed_at=now)
        )
    if taken.rowcount == 1:
        return True
    current = await _reload(platform.engine, order["id"])
    other = current["relay_hash"]
    if current["status"] != "requires_payment" or other is None:
        return False
    if not await _dead(platform, current, other, now):
        return False
    async with platform.engine.begin() as conn:
        taken = await conn.execute(
            update(intents)
            .where(payable, intents.c.relay_hash == other)
            .values(relay_hash=digest, relay_claimed_at=now)
        )
    return bool(taken.rowcount == 1)


async def _dead(platform: Platform, order: Mapping[Any, Any], digest: str, now: datetime) -> bool:
    """Whether the authorization ``digest`` holding ``order`` can no longer move money: its payment
    failed, or none was recorded and the process that claimed the order has had time to."""
    payment = await _payment(platform.engine, f"pi_{order['id']}", digest)
    if payment is not None:
        return payment.status == "failed"
    claimed_at = order["relay_claimed_at"]
    if claimed_at is not None and claimed_at.tzinfo is None:
        claimed_at = claimed_at.replace(tzinfo=now.tzinfo)
    stale = timedelta(seconds=platform.settings.takeover_seconds)
    return claimed_at is None or claimed_at < now - stale


async def _give_back(platform: Platform, order_id: str, tag: str, digest: str) -> None:
    """Release the order's claim by ``digest`` unless its payment may still move money."""
    payment = await _payment(platform.engine, tag, digest)
    if payment is not None and payment.status != "failed":
        return
    intents = tables.payment_intents
    async with platform.engine.begin() as conn:
        await conn.execute(
            update(intents)
            .where(intents.c.id == order_id, intents.c.relay_hash == digest)
            .values(relay_hash=None, relay_claimed_at=None)
        )


async def _payment(engine: AsyncEngine, tag: str, digest: str) -> AgentPayment | None:
    payments = tables.agent_payments
    async with engine.connect() as conn:
        found = (
            (
                await conn.execute(
                    select(payments).where(payments.c.challenge_id == tag, payments.c.payload_hash == digest)
                )
            )
            .mappings()
            .first()
        )
    return AgentPayment.model_validate(dict(found)) if found else None


async def _reload(engine: AsyncEngine, order_id: str) -> Mapping[Any, Any]:
    async with engine.connect() as conn:
        found = await find_order(conn, order_id)
    if found is None:  # orders are never deleted
        raise LookupError(order_id)
    return found
