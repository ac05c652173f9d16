"""The seller's span, while tracing is on (`x402mw.tracing`): ``x402 settle`` around the settlement
call to the platform, a child of the agent's ``traceparent`` when the paid request carries one; the
call carries the span's own, so the platform's spans are its children."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from typing import Any, cast

from x402mw import tracing
from x402mw.protocol.models import PaymentRequirements
from x402mw.seller.decisions import PlatformCall, PlatformReply, RequestView


def traced_settlement(
    calls: Generator[PlatformCall, PlatformReply, PlatformReply],
    request: RequestView,
    accepted: PaymentRequirements,
    body: dict[str, Any],
) -> Generator[PlatformCall, PlatformReply, PlatformReply]:
    """``calls`` (the settlement call) in an ``x402 settle`` client span."""
    span = tracing.start(
        "x402 settle",
        kind="client",
        parent=request.traceparent,
        challenge_id=body.get("challengeId"),
        endpoint_id=body.get("endpointId"),
        scheme=accepted.scheme,
        network=accepted.network,
        amount=str(accepted.amount),
        pay_to=accepted.pay_to,
    )
    header = ("traceparent", span.traceparent)
    try:
        call = next(calls)
        while True:
            traced = dataclasses.replace(call, headers=(*call.headers, header))
            try:
                reply = yield traced
            except BaseException as exc:
                call = calls.throw(exc)
            else:
                call = calls.send(reply)
    except StopIteration as done:
        reply = cast(PlatformReply, done.value)
        _describe(span, reply)
        return reply
    except BaseException as exc:
        span.failed(exc)
        raise
    finally:
        span.end()


def _describe(span: tracing.Span, reply: PlatformReply) -> None:
    span.set(status_code=reply.status)
    data = reply.data if isinstance(reply.data, dict) else {}
    settlement = data.get("settlement")
    transaction = settlement.get("transaction") if isinstance(settlement, dict) else None
    outcome = data.get("status")
    span.set(
        payment_id=_text(data.get("paymentId")),
        outcome=_text(outcome),
        transaction=_text(transaction) or None,
    )
    if reply.status != 200 or outcome == "failed":
        reason = settlement.get("errorReason") if isinstance(settlement, dict) else None
        span.failed(_text(reason) or f"answered {reply.status}")


def _text(value: object) -> str | None:
    return value[:200] if isinstance(value, str) else None
