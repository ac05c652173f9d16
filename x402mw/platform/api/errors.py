"""The error envelope and the ``Request-Id`` every response carries.

``{"error": {"type", "code", "message", "requestId", "param"?}}``. Types: ``invalid_request_error``,
``authentication_error``, ``idempotency_error``, ``rate_limit_error``, ``api_error``.
"""

from __future__ import annotations

import contextvars
import logging
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from x402mw.platform.services.errors import Refused

__all__ = ["ApiError", "RequestIdMiddleware", "current_request_id", "error_response", "exception_handlers"]

logger = logging.getLogger("x402mw.platform")
_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("x402mw_request_id", default="")


def current_request_id() -> str:
    return _request_id.get()


class ApiError(Exception):
    """An error answered in the documented envelope."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.type = type or {401: "authentication_error", 429: "rate_limit_error"}.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        self.headers = headers

    @classmethod
    def missing(cls, what: str, ident: str, param: str = "id") -> ApiError:
        return cls(404, "resource_missing", f"No such {what}: '{ident[:80]}'", param=param)


def error_response(error: ApiError) -> JSONResponse:
    body: dict[str, Any] = {
        "type": error.type,
        "code": error.code,
        "message": error.message,
        "requestId": current_request_id(),
    }
    if error.param:
        body["param"] = error.param
    return JSONResponse({"error": body}, status_code=error.status, headers=error.headers)


async def _api_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc)


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "resource_missing", 405: "method_not_allowed"}.get(exc.status_code, "invalid_request")
    message = "Unrecognized request URL" if exc.status_code == 404 else str(exc.detail)
    return error_response(ApiError(exc.status_code, code, message))


async def _unexpected(request: Request, exc: Exception) -> Response:
    logger.error(
        "unexpected error on %s %s (request id %s)",
        request.method,
        request.url.path,
        current_request_id(),
        exc_info=exc,
    )
    return error_response(
        ApiError(500, "internal_error", "An unexpected error occurred; quote the requestId to support")
    )


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    return error_response(ApiError(exc.status, exc.code, exc.message, param=exc.param))


exception_handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    ApiError: _api_error,
    Refused: _refused,
    HTTPException: _http_error,
    Exception: _unexpected,
}

Scope = MutableMapping[str, Any]


class RequestIdMiddleware:
    """Pure ASGI: gives every request an id (``Request-Id`` header, logs, error bodies)."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = "req_" + secrets.token_hex(12)
        token = _request_id.set(request_id)
        header = (b"request-id", request_id.encode())

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _request_id.reset(token)
