"""Verify and parse the platform's webhook events (Standard Webhooks).

Every delivery carries three headers: ``webhook-id`` (the event id, stable across retries — use it
to ignore duplicates), ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``: one or more
space-separated ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{raw body}">`` (several during a
secret rotation). Secrets look like ``whsec_<base64>``.

Verify against the **raw** body, before any JSON parsing or re-serialising::

    from x402mw.client.webhooks import construct_event

    event = construct_event(raw_body, request_headers, "whsec_...")
    if event.type == "agent_payment.settled":
        ...

Framework helpers read the raw body the right way: `event_from_flask`, `event_from_starlette`
(async), `event_from_django`.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from x402mw.errors import X402Error
from x402mw.protocol import bounded_json
from x402mw.protocol.constant_time import same_secret
from x402mw.protocol.webhook_signatures import digest, secret_key, sign_payload

__all__ = [
    "DEFAULT_TOLERANCE_SECONDS",
    "Event",
    "WebhookVerificationError",
    "construct_event",
    "event_from_django",
    "event_from_flask",
    "event_from_starlette",
    "sign_payload",
]

DEFAULT_TOLERANCE_SECONDS = 300


class WebhookVerificationError(X402Error):
    """The delivery is not authentic, too old or too new, or not an event. Answer it with 400."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="webhook_verification_failed")


@dataclass(frozen=True, slots=True)
class Event:
    """A verified event: ``{id, type, createdAt, livemode, data}``. ``data`` for subscription events
    holds ``subscription``, ``invoice`` and ``paymentIntent``; for ``agent_payment.settled``,
    ``agentPayment``."""

    id: str
    type: str
    created_at: str
    livemode: bool
    data: dict[str, Any]
    raw: dict[str, Any] = field(repr=False)


def _key(secret: str | bytes) -> bytes:
    try:
        return secret_key(secret)
    except ValueError as exc:
        raise WebhookVerificationError(str(exc)) from None


def _header(headers: Mapping[str, str] | Iterable[tuple[str, str]], name: str) -> str:
    items = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        if key.lower() == name:
            return value
    raise WebhookVerificationError(f"the {name} header is missing")


def construct_event(
    raw_body: bytes | str,
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
    secret: str | bytes | Sequence[str | bytes],
    *,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> Event:
    """Verify a delivery and parse its event; `WebhookVerificationError` otherwise.

    ``secret`` may be a list: during a rotation, accept the old and the new secret. ``tolerance``
    bounds how far ``webhook-timestamp`` may be from now, in seconds (replay protection).
    """
    body = raw_body.encode() if isinstance(raw_body, str) else bytes(raw_body)
    msg_id = _header(headers, "webhook-id")
    stamp = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")
    if not stamp.isascii() or not stamp.isdigit():
        raise WebhookVerificationError("webhook-timestamp is not Unix seconds")
    timestamp = int(stamp)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise WebhookVerificationError("webhook-timestamp is outside the tolerance (replayed or clock skew)")
    secrets = [secret] if isinstance(secret, str | bytes) else list(secret)
    expected = [digest(_key(s), msg_id, timestamp, body) for s in secrets]
    offered = []
    for entry in signatures.split():
        version, _, value = entry.partition(",")
        if version != "v1":
            continue
        try:
            offered.append(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            continue
    if not any(same_secret(o, e) for e in expected for o in offered):
        raise WebhookVerificationError("no webhook-signature matches the secret")
    try:
        data = bounded_json.loads(body)
    except bounded_json.JsonLimitError as exc:
        raise WebhookVerificationError(f"the body is not an event: {exc}") from None
    except ValueError:  # not UTF-8, not JSON
        raise WebhookVerificationError("the body is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("type"), str) or not isinstance(data.get("data"), dict):
        raise WebhookVerificationError("the body is not an event {id, type, createdAt, livemode, data}")
    return Event(
        id=str(data.get("id", msg_id)),
        type=data["type"],
        created_at=str(data.get("createdAt", "")),
        livemode=bool(data.get("livemode", False)),
        data=data["data"],
        raw=data,
    )


def event_from_flask(request: Any, secret: str | bytes | Sequence[str | bytes], **options: Any) -> Event:
    """For a ``flask.Request``: reads the raw body with ``get_data()`` (call it before ``request.json``
    or ``request.form``, which may consume or reinterpret the body)."""
    return construct_event(request.get_data(cache=True), list(request.headers.items()), secret, **options)


async def event_from_starlette(request: Any, secret: str | bytes | Sequence[str | bytes], **options: Any) -> Event:
    """For a Starlette/FastAPI ``Request``: ``await request.body()`` (not ``request.json()``, whose
    re-serialisation would not match the signature)."""
    return construct_event(await request.body(), list(request.headers.items()), secret, **options)


def event_from_django(request: Any, secret: str | bytes | Sequence[str | bytes], **options: Any) -> Event:
    """For a Django ``HttpRequest``: uses ``request.body`` (read it before ``request.POST``). Mark the
    view ``@csrf_exempt``: the signature, not a CSRF token, authenticates the delivery."""
    return construct_event(request.body, list(request.headers.items()), secret, **options)
