"""``POST /agent/settlements`` (the seller middleware's one call per paid request), the merchant's
agent payments, and monthly usage with the planned fee (computed and shown, not billed).

Work paid before it is settled makes two calls. A paid MCP tool: ``hold: true`` verifies and claims
the authorization before the tool runs (answered ``held`` with the payment's id). A metered route
(an ``upto`` payment): the payment is always held first (answered ``authorized``). Then
``POST /agent/settlements/{id}/capture`` settles it, for the usage reported (``upto``), once the
work is done; or, when a tool failed, ``POST /agent/settlements/{id}/release`` gives it up (nothing
taken; the same authorization may be used again)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt
from sqlalchemy import select
from starlette.requests import Request

from x402mw.platform.api.agents.challenges import ChallengeIn, challenge_row
from x402mw.platform.api.auth import authenticate
from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentPayment
from x402mw.platform.http.bodies import parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import MAX_MINOR, ChallengeId, Uuid
from x402mw.platform.http.pagination import list_answer, query_id
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import LIST_PARAMS, STRING, UUID, ApiRoute, Operation, query
from x402mw.platform.http.state import platform_of
from x402mw.platform.http.values import MONTH_PATTERN, calendar_month
from x402mw.platform.objects import agents as objects
from x402mw.platform.services.channels.service import ChannelRequest
from x402mw.platform.services.metering import monthly_usage
from x402mw.platform.services.settlement.checks import EndpointPolicy, PaymentRefusal
from x402mw.platform.services.settlement.outcomes import SettleOutcome, SettleRequest, payment_of
from x402mw.platform.services.settlement.payment_identifiers import IdentifierConflict
from x402mw.protocol import channels as channel_wire
from x402mw.protocol import reasons
from x402mw.protocol.channels import ChannelPaymentPayload
from x402mw.protocol.models import AnyPaymentPayload, PaymentPayload, PaymentRequirements, UptoPaymentPayload


class SettleBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    endpointId: Uuid = Field(description="the agent endpoint being paid")
    challengeId: ChallengeId = Field(description="the challenge the payment answers")
    resource: str = Field(default="", max_length=2048, description="URL of the paid resource")
    expiresAt: StrictInt = Field(description="Unix time (seconds) at which the challenge expires")
    accepted: dict[str, Any] = Field(description="the payment terms the agent accepted (sealed by the middleware)")
    paymentPayload: dict[str, Any] = Field(description="the agent's signed payload (`PAYMENT-SIGNATURE`)")
    waitSeconds: float = Field(
        default=20.0, ge=0.1, le=120.0, description="how long to wait for inclusion before answering `pending`, 0.1–120"
    )
    hold: bool = Field(
        default=False,
        description="verify and claim the payment without sending it (answered `held`): a paid MCP tool, "
        "captured once the tool succeeded or released when it failed (an `upto` payment is always held, "
        "answered `authorized`)",
    )
    # what the discovery catalogue lists of a discoverable endpoint's resource
    description: str | None = Field(
        default=None, max_length=1000, description="what the resource is, for the discovery catalogue"
    )
    mimeType: str | None = Field(
        default=None, max_length=200, description="what the resource answers, for the discovery catalogue"
    )
    extensions: dict[str, Any] | None = Field(
        default=None,
        description="the route's own `bazaar` declaration, for the discovery catalogue (the payment payload's "
        "`extensions` are the payer's and are never listed)",
    )


class CaptureBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    amountMinor: str | None = Field(
        default=None,
        pattern=r"^(?:0|[1-9][0-9]{0,17})$",
        description="atomic units to settle: an `upto` payment's usage, from 0 (nothing sent) to its signed "
        "ceiling, required; an `exact` payment settles its held amount (this, if given, must be it)",
    )
    waitSeconds: float = Field(
        default=20.0, ge=0.1, le=120.0, description="how long to wait for inclusion before answering `pending`, 0.1–120"
    )


def unavailable_error(outcome: SettleOutcome) -> HttpError:
    """503 for a payment not taken because the chain could not be reached: send it again later."""
    return HttpError(
        503, "chain_unavailable", f"{outcome.message}; nothing was taken, and the same payment may be sent again"
    )


def conflict_error(conflict: IdentifierConflict) -> HttpError:
    """409 for a payment-identifier already used with another payment: nothing was taken."""
    return HttpError(409, conflict.reason, f"{conflict}; nothing was taken. Use a new id for a new payment")


def _reply(outcome: SettleOutcome) -> ModelResponse:
    if outcome.status == "unavailable":
        raise unavailable_error(outcome)
    result = objects.SettlementResult(
        status=outcome.status,
        settlement=outcome.response,
        message=outcome.message or None,
        payment_id=outcome.payment_id or None,
    )
    return ModelResponse(result)


async def settle(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(SettleBody, await read_json(request))
    platform = platform_of(request)
    accepted = parse_body(PaymentRequirements, body.accepted, prefix="accepted.")
    if accepted.scheme == channel_wire.SCHEME:
        return await _channel_settle(request, caller.merchant_id, caller.livemode, body, accepted)
    payload: AnyPaymentPayload
    if accepted.scheme == "upto":
        payload = parse_body(UptoPaymentPayload, body.paymentPayload, prefix="paymentPayload.")
    else:
        payload = parse_body(PaymentPayload, body.paymentPayload, prefix="paymentPayload.")
    endpoint = await platform.endpoints.get(caller.merchant_id, caller.livemode, body.endpointId)
    if endpoint is None:
        raise HttpError.missing("agent endpoint", body.endpointId, param="endpointId")
    terms = EndpointPolicy.of(endpoint)
    if accepted.pay_to.lower() not in terms.payout_history:
        # Perhaps a payout address set through another process since this one read the endpoint:
        # sellers issue it within 2 s of the change, sooner than this copy of the row expires.
        endpoint = await platform.endpoints.get(caller.merchant_id, caller.livemode, body.endpointId, fresh=True)
        if endpoint is None:
            raise HttpError.missing("agent endpoint", body.endpointId, param="endpointId")
        terms = EndpointPolicy.of(endpoint)
    if not 1 <= accepted.amount <= MAX_MINOR:  # the body's bounds; the terms are settlement's to check
        refused = platform.settlement.refuse(
            accepted.network, reasons.INVALID_REQUIREMENTS, f"the amount must be from 1 to {MAX_MINOR} atomic units"
        )
        return _reply(refused)
    challenge = challenge_row(
        caller.merchant_id,
        caller.livemode,
        ChallengeIn.model_construct(
            challengeId=body.challengeId,
            endpointId=endpoint.id,
            network=accepted.network,
            asset=accepted.asset,
            payTo=accepted.pay_to,
            amount=str(accepted.amount),
            resource=body.resource,
            expiresAt=body.expiresAt,
        ),
    )
    settle = SettleRequest(
        accepted=accepted,
        payload=payload,
        merchant_id=caller.merchant_id,
        endpoint_id=endpoint.id,
        challenge_id=body.challengeId,
        resource=body.resource,
        livemode=caller.livemode,
        release_policy=endpoint.release_policy,
        terms=terms,
        challenge=challenge,
        wait_seconds=body.waitSeconds,
        # A retry of a challenge that expired gets the outcome of its payment, if it was made;
        # no new payment is settled on it.
        known_only=body.expiresAt <= platform.clock.time(),
        hold=body.hold,
    )
    try:
        outcome = await platform.payments.settle(settle)
    except IdentifierConflict as conflict:
        raise conflict_error(conflict) from None
    if outcome.status == "settled" and endpoint.discoverable:
        # The seller's word only: the payload's resource and extensions are the payer's to write.
        await platform.catalogue.record(
            endpoint,
            accepted=body.accepted,
            description=body.description,
            mime_type=body.mimeType,
            seller_extensions=body.extensions,
            settled_at=datetime.fromtimestamp(platform.clock.time(), UTC),
        )
    return _reply(outcome)


async def _channel_settle(
    request: Request, merchant_id: str, livemode: bool, body: SettleBody, accepted: PaymentRequirements
) -> ModelResponse:
    """A payment through a channel (``batch-settlement``): held for the handler (``authorized``,
    charged by a capture), or a refund the payer asked for (``settled`` at once)."""
    platform = platform_of(request)
    payload = parse_body(ChannelPaymentPayload, body.paymentPayload, prefix="paymentPayload.")
    endpoint = await platform.endpoints.get(merchant_id, livemode, body.endpointId)
    if endpoint is None:
        raise HttpError.missing("agent endpoint", body.endpointId, param="endpointId")
    if not 1 <= accepted.amount <= MAX_MINOR:
        refused = platform.settlement.refuse(
            accepted.network, reasons.INVALID_REQUIREMENTS, f"the amount must be from 1 to {MAX_MINOR} atomic units"
        )
        return _reply(refused)
    work = ChannelRequest(merchant_id, livemode, endpoint, accepted, payload.payload, body.waitSeconds)
    return _reply(await platform.channels.authorize(work))


async def capture(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    payment_id = path_uuid(request, "payment_id", "agent payment")
    body = parse_body(CaptureBody, await read_json(request, allow_empty=True))
    amount = None if body.amountMinor is None else int(body.amountMinor)
    platform = platform_of(request)
    charged = await platform.channels.capture(caller.merchant_id, payment_id, amount or 0)
    if charged is not None:  # a request paid through a channel: its charge
        return _reply(charged)
    try:
        outcome = await platform.payments.holds.capture(
            caller.merchant_id, payment_id, amount, wait_seconds=body.waitSeconds
        )
    except PaymentRefusal as refusal:
        raise HttpError(400, refusal.reason, f"{refusal.message}; nothing was taken", param="amountMinor") from None
    if outcome is None:
        raise HttpError.missing("agent payment", payment_id)
    return _reply(outcome)


async def release(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    payment_id = path_uuid(request, "payment_id", "agent payment")
    left = await platform_of(request).payments.holds.release(caller.merchant_id, payment_id)
    if left is None:
        raise HttpError.missing("agent payment", payment_id)
    if left != "released":
        raise HttpError(
            409,
            "payment_not_held",
            f"agent payment {payment_id} is {left.status}, not held: it can no longer be released",
        )
    return ModelResponse(objects.SettlementRelease(payment_id=payment_id))


async def list_payments(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    table = tables.agent_payments
    filters = caller.owns(table)
    endpoint = query_id(request, "endpointId")
    if endpoint is not None:
        filters.append(table.c.endpoint_id == endpoint)
    platform = platform_of(request)
    return await list_answer(
        platform.engine,
        table,
        filters,
        request,
        lambda r: payment_of(AgentPayment.model_validate(dict(r))),
        objects.AgentPaymentList,
    )


async def retrieve_payment(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    table = tables.agent_payments
    payment_id = path_uuid(request, "payment_id", "agent payment")
    platform = platform_of(request)
    async with platform.engine.connect() as conn:
        found = (
            (
                await conn.execute(
                    select(table).where(
                        table.c.id == payment_id,
                        *caller.owns(table),
                    )
                )
            )
            .mappings()
            .first()
        )
    if found is None:
        raise HttpError.missing("agent payment", payment_id)
    payment = payment_of(AgentPayment.model_validate(dict(found)))
    return ModelResponse(objects.AgentPaymentEnvelope(agent_payment=payment))


async def usage(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    platform = platform_of(request)
    now = platform.clock.now()
    month = request.query_params.get("month", f"{now.year:04d}-{now.month:02d}")
    start = calendar_month(month)
    if start is None:
        raise HttpError(400, "parameter_invalid", "month must look like 2026-11 (years 0001 to 9998)", param="month")
    answer = await monthly_usage(platform.engine, caller.merchant_id, caller.livemode, start)
    return ModelResponse(objects.AgentUsageEnvelope(usage=answer))


_TAG = "Agent payments"
routes = [
    ApiRoute(
        "POST",
        "/agent/settlements",
        settle,
        Operation(
            id="settleAgentPayment",
            tag=_TAG,
            summary="Settle a paid request",
            description="Called by the seller middleware once per paid request. Verifies the payment, settles it "
            "on-chain with the relayer paying the gas, and answers a signed receipt. A refused "
            "payment is a 200 with `status: failed` and the reason in `settlement.errorReason`; "
            "the same signed payload sent again answers the original outcome. A payload carrying the "
            "x402 `payment-identifier` extension is settled once per id: the same id and payload answer "
            "the stored settlement (checked before the payment is verified); the same id with another "
            "payload is a 409 `payment_identifier_conflict`, and nothing is taken.",
            answer=objects.SettlementResult,
            body=SettleBody,
            errors=(404, 409),
        ),
    ),
    ApiRoute(
        "POST",
        "/agent/settlements/{payment_id}/capture",
        capture,
        Operation(
            id="captureAgentPayment",
            tag=_TAG,
            summary="Settle a held payment",
            description="Called by the seller once the work a held payment pays for is done: a paid MCP tool's "
            "payment (`held`) for its amount, a metered route's (`authorized`, the `upto` scheme) for the "
            "usage its handler reported, from 0 (settled with no transaction) to the signed ceiling. "
            "Answers as a settlement does. A payment is captured once: a capture sent again, or another, "
            "answers the outcome of the first. A held payment whose authorization ran out is not sent: it is "
            "recorded `failed` (`invalid_exact_evm_payload_authorization_valid_before`, or "
            "`permit2_deadline_expired`), and every capture of it answers so. 404 for a payment that was "
            "never held or was released.",
            answer=objects.SettlementResult,
            body=CaptureBody,
            errors=(400, 404),
        ),
    ),
    ApiRoute(
        "POST",
        "/agent/settlements/{payment_id}/release",
        release,
        Operation(
            id="releaseAgentPayment",
            tag=_TAG,
            summary="Release a held payment",
            description="Called by the seller's MCP adapter when a paid tool failed: the payment held with "
            "`hold: true` is given up, nothing is taken, and its authorization may be used again. "
            "409 once the payment is being settled or settled.",
            answer=objects.SettlementRelease,
            errors=(404, 409),
        ),
    ),
    ApiRoute(
        "GET",
        "/agent/payments",
        list_payments,
        Operation(
            id="listAgentPayments",
            tag=_TAG,
            summary="List agent payments",
            description="Settled and failed agent payments, newest first.",
            answer=objects.AgentPaymentList,
            parameters=[*LIST_PARAMS, query("endpointId", "only this endpoint's payments", UUID)],
            errors=(400, 404),
        ),
    ),
    ApiRoute(
        "GET",
        "/agent/payments/{payment_id}",
        retrieve_payment,
        Operation(
            id="retrieveAgentPayment",
            tag=_TAG,
            summary="Retrieve an agent payment",
            answer=objects.AgentPaymentEnvelope,
            errors=(404,),
        ),
    ),
    ApiRoute(
        "GET",
        "/agent/usage",
        usage,
        Operation(
            id="retrieveAgentUsage",
            tag=_TAG,
            summary="Retrieve monthly usage",
            description="Settlements, volume per coin and the planned fee: the first 1,000 settlements a month are "
            "free, then per settlement the larger of 0.005 and 0.3 % of its amount. Nothing is billed "
            "during the beta.",
            answer=objects.AgentUsageEnvelope,
            parameters=[query("month", "`YYYY-MM`; default the current month", STRING | {"pattern": MONTH_PATTERN})],
            errors=(400,),
        ),
    ),
]
