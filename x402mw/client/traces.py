"""The agent's span: one per request `X402Auth` sends while tracing is on (`x402mw.tracing`), its
``traceparent`` on every attempt, so the seller's and the platform's spans join the agent's trace.
A ``traceparent`` the request already carries (the application's own trace) is its parent."""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

import httpx

from x402mw import tracing
from x402mw.client.replies import settlement_of
from x402mw.protocol.codec import decode_any_payment_payload

C = TypeVar("C")
_PAYMENT_HEADERS = ("PAYMENT-SIGNATURE", "X-PAYMENT")


def traced_flow(
    flow: Generator[C, httpx.Response | None, None], request: httpx.Request
) -> Generator[C, httpx.Response | None, None]:
    """``flow`` (a payment flow for ``request``) inside an ``x402 pay`` client span."""
    span = tracing.start(
        "x402 pay",
        kind="client",
        parent=request.headers.get("traceparent"),
        method=request.method,
        host=request.url.host,
        path=request.url.path,
    )
    request.headers["traceparent"] = span.traceparent
    response: httpx.Response | None = None
    try:
        command = next(flow)
        while True:
            reply = yield command
            if reply is not None:
                response = reply
            command = flow.send(reply)
    except StopIteration:
        pass
    except BaseException as exc:
        span.failed(exc)
        raise
    finally:
        flow.close()
        _describe(span, request, response)
        span.end()


def _describe(span: tracing.Span, request: httpx.Request, response: httpx.Response | None) -> None:
    for name in _PAYMENT_HEADERS:
        header = request.headers.get(name)
        if header is not None:
            try:
                payload = decode_any_payment_payload(header)
            except Exception:  # not ours to judge here: the seller says
                break
            accepted = payload.accepted
            if accepted is not None:
                span.set(scheme=accepted.scheme, network=accepted.network, amount=str(accepted.amount))
            break
    if response is None:
        return
    span.set(status_code=response.status_code)
    settlement = settlement_of(response)
    if settlement is not None:
        span.set(transaction=settlement.transaction or None, network=settlement.network, payer=settlement.payer)
        if not settlement.success:
            span.failed(settlement.error_reason or "not settled")
