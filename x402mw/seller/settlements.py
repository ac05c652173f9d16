"""A payment sent to the platform (`settlement_body`), and its answer read into the gate's decision.

A settled payment is served (`Serve`), a metered one authorized is served and settled after
(`ServeMetered`); a pending one, an outage or a conflict is answered at once (`Answer`); a payment
the platform refused is answered with a new challenge, which only the gate can issue: that case is
a `Refusal`, what the gate adds to its new challenge.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from x402mw.errors import PlatformError
from x402mw.protocol import channels as channel_wire
from x402mw.protocol import payment_identifier, reasons
from x402mw.protocol.channels import ChannelPaymentPayload
from x402mw.protocol.codec import PAYMENT_RESPONSE, encode_header
from x402mw.protocol.models import AnyPaymentPayload, PaymentRequirements, SettlementResponse, UptoPaymentPayload
from x402mw.seller.answers import EXPOSE_HEADERS, conflict_answer, json_answer, pending_answer, platform_failure
from x402mw.seller.challenges import EIP2612_EXTENSION
from x402mw.seller.config import EndpointTerms, PaidRoute
from x402mw.seller.decisions import Answer, PlatformReply, RequestView, Serve, Settlement, reply_error
from x402mw.seller.metering import MeteredPayment, ServeMetered

logger = logging.getLogger("x402mw.seller")


@dataclass(frozen=True, slots=True)
class Refusal:
    """A payment the platform refused: answer a new challenge with this reason and message, the
    refusal's ``PAYMENT-RESPONSE`` header (None: none, as a corrective 402 has), and ``status``
    instead of 402 when given."""

    reason: str
    message: str
    header: tuple[str, str] | None
    status: int | None = None
    eip2612: dict[str, Any] | None = None
    channel_state: dict[str, Any] | None = None  # a channel's state for the corrective 402


def settlement_body(
    route: PaidRoute,
    terms: EndpointTerms,
    request: RequestView,
    payload: AnyPaymentPayload | ChannelPaymentPayload,
    accepted: PaymentRequirements,
    challenge_id: str,
    expires: int,
    wait_seconds: float,
    *,
    hold: bool,
) -> dict[str, Any]:
    """The settlement call's body: the payment, the challenge it was made on (which the platform
    records with the payment's outcome: it is registered once, by that call, unless the call is not
    answered) and, for a payment that is not upto, what the catalogue lists of a discoverable endpoint."""
    body: dict[str, Any] = {
        "endpointId": terms.id,
        "challengeId": challenge_id,
        "resource": request.url,
        "expiresAt": expires,
        "accepted": accepted.to_wire(),
        "paymentPayload": payload.to_wire(),
        "waitSeconds": wait_seconds,
    }
    if isinstance(payload, UptoPaymentPayload | ChannelPaymentPayload):
        return body
    if hold:
        body["hold"] = True
    if route.description or terms.name:
        body["description"] = route.description or terms.name
    if route.mime_type:
        body["mimeType"] = route.mime_type
    if route.discovery is not None:
        body["extensions"] = {"bazaar": route.discovery.extension(request.method)}
    return body


def settled_outcome(reply: PlatformReply, terms: EndpointTerms, pay_to: str, asset: str) -> Answer | Serve | Refusal:
    """The platform's answer to a settlement of the terms accepted (``pay_to``, ``asset``: the
    seller's own, which the platform does not echo)."""
    if reply.status in (401, 403, 404, 503):  # refused by the platform: nothing was taken
        return platform_failure(reply_error(reply), "settlement")
    if reply.status == 409 and reply_error(reply).code == payment_identifier.CONFLICT:
        return conflict_answer(terms.network, reply_error(reply).message)
    unknown = SettlementResponse(success=False, error_reason=reasons.SETTLEMENT_PENDING, network=terms.network)
    if reply.status != 200 or not isinstance(reply.data, dict):
        logger.error("settlement answered %d; answering pending", reply.status)
        return pending_answer(unknown)
    data = reply.data
    try:
        response = SettlementResponse.model_validate(data.get("settlement"))
    except ValueError:
        logger.error("malformed settlement reply; answering pending")
        return pending_answer(unknown)
    header = (PAYMENT_RESPONSE, encode_header(response))
    if data.get("status") == "settled" and response.success:
        receipt = response.receipt or {}
        settlement = Settlement(
            transaction=response.transaction,
            network=response.network,
            payer=response.payer or "",
            pay_to=pay_to,
            asset=asset,
            amount=response.amount or 0,
            challenge_id=str(receipt.get("challengeId", "")),
            endpoint_id=terms.id,
            receipt={str(k): str(v) for k, v in receipt.items()},
            response=response,
        )
        return Serve(settlement, [header, EXPOSE_HEADERS])
    if data.get("status") == "pending":
        return pending_answer(response)
    reason = response.error_reason or reasons.UNEXPECTED_SETTLE_ERROR
    message = str(data.get("message") or f"the payment could not be settled: {reason}")
    return Refusal(reason, message, header)


def authorized_outcome(
    reply: PlatformReply, terms: EndpointTerms, accepted: PaymentRequirements, challenge_id: str
) -> Answer | ServeMetered | Refusal:
    """The platform's answer to the authorization (verify and hold) of an upto payment."""
    if reply.status != 200 or not isinstance(reply.data, dict):
        return platform_failure(reply_error(reply), "authorization")
    data = reply.data
    try:
        response = SettlementResponse.model_validate(data.get("settlement"))
    except ValueError:
        return platform_failure(PlatformError("malformed authorization reply", status=502), "authorization")
    status = data.get("status")
    if status == "authorized":
        payment = MeteredPayment(
            ceiling=accepted.amount,
            payer=response.payer or "",
            network=accepted.network,
            asset=accepted.asset,
            pay_to=accepted.pay_to,
            decimals=terms.decimals,
            currency=terms.currency,
            challenge_id=challenge_id,
            endpoint_id=terms.id,
            payment_id=str(data.get("paymentId") or ""),
        )
        return ServeMetered(payment)
    header = (PAYMENT_RESPONSE, encode_header(response))
    if status == "pending":
        return pending_answer(response)
    if status == "settled":  # this authorization was used by an earlier request: its outcome stands
        message = (
            f"this payment was settled already ({response.amount} atomic units, transaction "
            f"{response.transaction or 'none'}); an upto authorization pays for one request: sign a new one"
        )
        return Refusal(reasons.PERMIT2_NONCE_USED, message, header)
    reason = response.error_reason or reasons.UNEXPECTED_SETTLE_ERROR
    message = str(data.get("message") or f"the payment could not be authorized: {reason}")
    if reason != reasons.PERMIT2_ALLOWANCE_REQUIRED:
        return Refusal(reason, message, header)
    # 412: the payer must approve Permit2 once, or send an EIP-2612 permit with the payment; the
    # new challenge carries the payer's permit nonce as the platform read it.
    hint = (response.extensions or {}).get(EIP2612_EXTENSION)
    return Refusal(reason, message, header, status=412, eip2612=hint if isinstance(hint, dict) else None)


def channel_outcome(
    reply: PlatformReply, terms: EndpointTerms, accepted: PaymentRequirements, challenge_id: str, payload_type: str
) -> Answer | ServeMetered | Refusal:
    """The platform's answer to a payment through a channel: the channel held for this request
    (`ServeMetered`: the handler runs, its charge is committed by `PaymentGate.finish`; a route of a
    fixed price is charged its price), a refund done (answered at once: a refund skips the
    handler), or a refusal (a cumulative mismatch carries the channel's state for the corrective 402)."""
    if reply.status != 200 or not isinstance(reply.data, dict):
        return platform_failure(reply_error(reply), "channel payment")
    data = reply.data
    try:
        response = SettlementResponse.model_validate(data.get("settlement"))
    except ValueError:
        return platform_failure(PlatformError("malformed channel payment reply", status=502), "channel payment")
    status = data.get("status")
    if status == "authorized" and payload_type != "refund":
        payment = MeteredPayment(
            ceiling=accepted.amount,
            payer=response.payer or "",
            network=accepted.network,
            asset=accepted.asset,
            pay_to=accepted.pay_to,
            decimals=terms.decimals,
            currency=terms.currency,
            challenge_id=challenge_id,
            endpoint_id=terms.id,
            payment_id=str(data.get("paymentId") or ""),
            _charged=0 if terms.pricing_mode == "metered" else accepted.amount,
        )
        return ServeMetered(payment)
    header = (PAYMENT_RESPONSE, encode_header(response))
    if status == "settled" and payload_type == "refund":
        return json_answer(200, {"refunded": str(response.amount or 0)}, [header])
    if status == "pending":  # a deposit sent and not yet in a block
        return pending_answer(response)
    if status == "unavailable":
        return platform_failure(PlatformError("the chain cannot be reached", status=503), "channel payment")
    reason = response.error_reason or reasons.UNEXPECTED_SETTLE_ERROR
    message = str(data.get("message") or f"the channel payment was refused: {reason}")
    state = (response.extensions or {}).get("channel")
    if reason == channel_wire.CUMULATIVE_MISMATCH and isinstance(state, dict):
        # The corrective 402: the channel's state in the offer, and no PAYMENT-RESPONSE (a client
        # reads a 402 with one as a failed settlement, not as a state to resume from).
        return Refusal(reason, message, None, channel_state=state)
    return Refusal(reason, message, header)
