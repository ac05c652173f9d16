"""API key authentication: ``Authorization: Bearer <key>`` or ``x-api-key: <key>``."""

from __future__ import annotations

from starlette.requests import Request

from x402mw.platform.api.errors import ApiError
from x402mw.platform.services.merchants import Caller

__all__ = ["authenticate"]


async def authenticate(request: Request) -> Caller:
    """The calling merchant; 401 ``authentication_error`` when the key is missing, invalid or revoked."""
    header = request.headers.get("authorization")
    key: str | None = None
    if header is not None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise ApiError(401, "invalid_api_key", "Use 'Authorization: Bearer <API key>'")
        key = value.strip()
    else:
        key = request.headers.get("x-api-key")
    if not key:
        raise ApiError(
            401,
            "api_key_missing",
            "No API key provided: send 'Authorization: Bearer <API key>' or 'x-api-key'",
        )
    caller: Caller | None = await request.app.state.platform.keys.lookup(key)
    if caller is None:
        raise ApiError(401, "invalid_api_key", "The API key is invalid or has been revoked")
    return caller
