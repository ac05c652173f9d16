"""Payments settled after the work they pay for ran.

A paid MCP tool's payment is held (`Held`) while the tool runs, then captured when it succeeded
(`PaymentGate.capture`) or released when it failed (`release`). A metered request's upto payment is
authorized before its handler runs, then settled for the usage reported, as its response starts
(`finish`). Capturing and finishing are the same platform call: the second names an amount.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

from x402mw.errors import PlatformError
from x402mw.protocol import reasons
from x402mw.protocol.codec import PAYMENT_RESPONSE, encode_header
from x402mw.protocol.models import PaymentRequirements, SettlementResponse
from x402mw.seller.answers import EXPOSE_HEADERS, json_answer, pending_answer
from x402mw.seller.decisions import Answer, Held, PlatformCall, PlatformReply, Settlement, reply_error
from x402mw.seller.metering import MeteredPayment

logger = logging.getLogger("x402mw.seller")
FinishStep = Generator[PlatformCall, Any, "list[tuple[str, str]] | Answer"]


def capture_call(payment_id: str, amount: int | None, settle_timeout: float) -> PlatformCall:
    """The call that settles a held payment (a tool's, or a metered request's for ``amount``)."""
    body: dict[str, Any] = {"waitSeconds": max(1.0, settle_timeout - 2.0)}
    if amount is not None:
        body["amountMinor"] = str(amount)
    return PlatformCall("POST", f"/agent/settlements/{payment_id}/capture", body, timeout=settle_timeout)


def held(data: dict[str, Any], accepted: PaymentRequirements, context: tuple[Any, ...]) -> Held:
    """The hold of a tool's payment, from the platform's ``held`` answer and the terms accepted."""
    settlement = data.get("settlement") or {}
    return Held(
        payment_id=str(data.get("paymentId", "")),
        payer=str(settlement.get("payer", "")),
        amount=accepted.amount,
        network=accepted.network,
        pay_to=accepted.pay_to,
        asset=accepted.asset,
        context=context,
    )


def capture(held: Held, settle_timeout: float) -> Generator[PlatformCall, PlatformReply, PlatformReply | Answer]:
    """Settle a held payment: the platform's reply, or the pending answer when the call failed (the
    platform may have received it)."""
    try:
        return (yield capture_call(held.payment_id, None, settle_timeout))
    except PlatformError as exc:
        logger.error("settlement call failed: %s; answering pending", exc.message)
        return pending_answer(
            SettlementResponse(success=False, error_reason=reasons.SETTLEMENT_PENDING, network=held.network)
        )


def release(held: Held) -> Generator[PlatformCall, Any, bool]:
    """Give up a held payment: see `PaymentGate.release`."""
    try:
        reply = yield PlatformCall("POST", f"/agent/settlements/{held.payment_id}/release")
    except PlatformError as exc:
        reply = PlatformReply(0, {"error": {"message": exc.message}})
    # (Its challenge was recorded with the hold.)
    if reply.status != 200:
        logger.error("could not release held payment %s: %s", held.payment_id, reply_error(reply).message)
        return False
    return True


def finish(payment: MeteredPayment, *, served: bool, settle_timeout: float) -> FinishStep:
    """Settle a metered request for its usage: see `PaymentGate.finish`."""
    amount = payment.close() if served else 0
    network = payment.network
    unknown = SettlementResponse(success=False, error_reason=reasons.SETTLEMENT_PENDING, network=network)
    try:
        reply = yield capture_call(payment.payment_id, amount, settle_timeout)
    except PlatformError as exc:
        logger.error("metered settlement call failed: %s; answering pending", exc.message)
        return [(PAYMENT_RESPONSE, encode_header(unknown)), EXPOSE_HEADERS]
    data = reply.data if isinstance(reply.data, dict) else {}
    try:
        response = SettlementResponse.model_validate(data.get("settlement"))
    except ValueError:
        logger.error("metered settlement answered %d without a settlement; answering pending", reply.status)
        return [(PAYMENT_RESPONSE, encode_header(unknown)), EXPOSE_HEADERS]
    header = (PAYMENT_RESPONSE, encode_header(response))
    status = data.get("status")
    if reply.status == 200 and status == "settled" and response.success:
        receipt = response.receipt or {}
        payment.settlement = Settlement(
            transaction=response.transaction,
            network=response.network,
            payer=response.payer or payment.payer,
            pay_to=payment.pay_to,
            asset=payment.asset,
            amount=response.amount or 0,
            challenge_id=payment.challenge_id,
            endpoint_id=payment.endpoint_id,
            receipt={str(k): str(v) for k, v in receipt.items()},
            response=response,
        )
        return [header, EXPOSE_HEADERS]
    if reply.status == 200 and status == "failed":
        reason = response.error_reason or reasons.UNEXPECTED_SETTLE_ERROR
        logger.warning("metered settlement of challenge %s failed: %s", payment.challenge_id, reason)
        body_out = {
            "error": {
                "type": "payment_error",
                "code": reason,
                "message": str(data.get("message") or "the payment could not be settled"),
            }
        }
        return json_answer(402, body_out, [header], reason)
    return [header, EXPOSE_HEADERS]  # pending: the response is served, the receipt follows
