"""API key authentication: ``Authorization: Bearer <key>`` or ``x-api-key: <key>``."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.requests import Request

from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.state import platform_of
from x402mw.platform.services.merchants import Caller, KeyRing

CHECKED = "x402mw.checked_caller"  # a caller found by middleware before the endpoint (idempotency)


async def authenticate(request: Request) -> Caller:
    """The calling merchant; 401 ``authentication_error`` when the key is missing, invalid or revoked.
    A key already checked for this request (`CHECKED`, by `IdempotencyMiddleware`) is not looked up
    again."""
    caller = request.scope.get(CHECKED)
    if not isinstance(caller, Caller):
        caller = await caller_for(request.headers, platform_of(request).keys)
    request.scope["x402mw.caller"] = caller  # for the request log (x402mw.platform.api.request_log)
    return caller


async def caller_for(headers: Headers, keys: KeyRing) -> Caller:
    """The merchant whose key ``headers`` present (for code below the routes, e.g. ASGI middleware);
    raises the same 401 `HttpError` as `authenticate`."""
    caller = await keys.lookup(presented_key(headers))
    if caller is None:
        raise HttpError(401, "invalid_api_key", "The API key is invalid or has been revoked")
    return caller


def presented_key(headers: Headers) -> str:
    """The API key ``headers`` carry (not yet checked); 401 when they carry none."""
    header = headers.get("authorization")
    key: str | None = None
    if header is not None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise HttpError(401, "invalid_api_key", "Use 'Authorization: Bearer <API key>'")
        key = value.strip()
    else:
        key = headers.get("x-api-key")
    if not key:
        raise HttpError(
            401,
            "api_key_missing",
            "No API key provided: send 'Authorization: Bearer <API key>' or 'x-api-key'",
        )
    return key
