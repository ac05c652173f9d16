"""What the payment gate decides, and the commands it asks its driver to run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from x402mw.errors import PlatformError
from x402mw.protocol.models import SettlementResponse
from x402mw.protocol.prices import Price

AmountCallback = Callable[[Any], "Price | Awaitable[Price]"]
"""A route's price computed per request, from the framework's request (`PaidRoute.amount`)."""

Headers = list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class RequestView:
    """The little a gate needs to know of a request. ``url`` is the absolute URL of the resource;
    ``payment`` is the ``PAYMENT-SIGNATURE`` header, or the v1 ``X-PAYMENT`` header, or the payload
    as JSON (an MCP tool call's ``_meta["x402/payment"]``), or None; ``accept`` the ``Accept``
    header (a browser's gets the paywall page); ``sign_in`` the ``SIGN-IN-WITH-X`` header;
    ``traceparent`` the W3C ``traceparent`` header of a paid request, read while tracing is on
    (`x402mw.tracing`): the settlement's span joins the agent's trace."""

    method: str
    url: str
    payment: str | dict[str, Any] | None
    accept: str | None = None
    sign_in: str | None = None
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class PlatformCall:
    """Command: make one HTTP call to the platform; the driver sends back a `PlatformReply`."""

    method: str
    path: str
    json: Any = None
    timeout: float = 10.0
    headers: tuple[tuple[str, str], ...] = ()  # beyond the key's (e.g. ``If-None-Match``)
    encoded: bytes | None = None  # the JSON body already encoded, instead of ``json``


@dataclass(frozen=True, slots=True)
class PlatformReply:
    status: int
    data: Any
    request_id: str | None = None
    etag: str | None = None


def reply_error(reply: PlatformReply) -> PlatformError:
    """The error of a platform reply that is not the success expected."""
    error = reply.data.get("error") if isinstance(reply.data, dict) else None
    if isinstance(error, dict):
        return PlatformError(
            str(error.get("message", "platform error")),
            status=reply.status,
            code=str(error.get("code")),
            error_type=str(error.get("type")),
            request_id=reply.request_id,
        )
    return PlatformError(f"platform answered {reply.status}", status=reply.status, request_id=reply.request_id)


@dataclass(frozen=True, slots=True)
class ComputeAmount:
    """Command: call the route's amount callback (awaiting it if it is async); send back its result."""

    callback: AmountCallback
    request: Any


Command = PlatformCall | ComputeAmount


@dataclass(frozen=True, slots=True)
class Settlement:
    """A settled payment, available to the route's handler.

    ``amount`` is in atomic units of ``asset``; ``receipt`` is the platform's EIP-191 signed receipt.
    ``signed_in`` is True when the request paid nothing and was let in by sign-in-with-x: this is
    then the earlier payment of the wallet that signed in.
    """

    transaction: str
    network: str
    payer: str
    pay_to: str
    asset: str
    amount: int
    challenge_id: str
    endpoint_id: str
    receipt: Mapping[str, str]
    response: SettlementResponse
    signed_in: bool = False


@dataclass(frozen=True, slots=True)
class Answer:
    """Decision: answer the request now with this status, headers and body (402, 503, ...)."""

    status: int
    headers: Headers
    body: bytes
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Serve:
    """Decision: run the handler with ``settlement``; add ``headers`` to its response."""

    settlement: Settlement
    headers: Headers = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Held:
    """Decision (a paid MCP tool): the payment is verified and claimed, nothing taken yet. Run the
    tool, then `PaymentGate.capture` (it succeeded) or `PaymentGate.release` (it failed)."""

    payment_id: str
    payer: str
    amount: int
    network: str
    pay_to: str  # the terms accepted (the platform does not echo them)
    asset: str
    context: tuple[Any, ...]  # the route, terms, request and native request, for the answer after


Decision = Answer | Serve
