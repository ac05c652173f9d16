"""The errors the merchant client raises, one class per kind of failure.

::

    X402Error
     └── PlatformError
          └── APIError                    any error answer, or no usable answer at all
               ├── APIConnectionError          no answer: refused, reset, timed out (status 0)
               ├── InvalidRequestError         400 (and other 4xx of type invalid_request_error)
               ├── AuthenticationError         401: the API key is missing, invalid or revoked
               ├── NotFoundError               404 resource_missing
               ├── ConflictError               409: order_id_conflict, payment_intent_unexpected_state...
               ├── IdempotencyError            type idempotency_error: key reused (400) or in use (409)
               ├── UnprocessableEntityError    422: insufficient_balance...
               ├── RateLimitError              429
               └── ServerError                 5xx

Every `APIError` carries ``status``, ``type``, ``code``, ``message``, ``param`` and ``request_id``
(from the error envelope, else the ``Request-Id`` header): quote the request id to support.
"""

from __future__ import annotations

from typing import Any

import httpx

from x402mw.errors import PlatformError
from x402mw.protocol import bounded_json


class APIError(PlatformError):
    """The merchant API answered with an error, or gave no usable answer.

    ``status`` is the HTTP status (0 without an answer), ``type`` the envelope's error type
    (``invalid_request_error``, ``authentication_error``, ``idempotency_error``, ``rate_limit_error``,
    ``api_error``), ``code`` its machine-readable code (``resource_missing``, ...), ``param`` the
    request parameter at fault, if any, and ``request_id`` the id the platform gave the request.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        type: str | None = None,
        code: str | None = None,
        param: str | None = None,
        request_id: str | None = None,
        headers: httpx.Headers | None = None,
    ) -> None:
        super().__init__(message, status=status, code=code, error_type=type, param=param, request_id=request_id)
        self.type = type
        self.headers = headers if headers is not None else httpx.Headers()

    def __str__(self) -> str:
        details = [str(self.status)] if self.status else []
        details += [part for part in (self.code, self.param and f"param {self.param}") if part]
        if self.request_id:
            details.append(f"request {self.request_id}")
        return f"{self.message} ({', '.join(details)})" if details else self.message

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status}, code={self.code!r}, "
            f"message={self.message!r}, request_id={self.request_id!r})"
        )


class APIConnectionError(APIError):
    """No answer came: the connection failed, was reset or timed out (after every retry)."""


class InvalidRequestError(APIError):
    """400: a parameter is missing, unknown or invalid (``param`` names it)."""


class AuthenticationError(APIError):
    """401: the API key is missing, invalid or revoked."""


class NotFoundError(APIError):
    """404: no such object for this key (another merchant's object is indistinguishable from none)."""


class ConflictError(APIError):
    """409: the request conflicts with the object's state (``order_id_conflict``, ...)."""


class IdempotencyError(APIError):
    """The ``Idempotency-Key`` was used with another request (400), or its first request is still
    running (409; retried by the client before it is raised)."""


class UnprocessableEntityError(APIError):
    """422: well-formed but impossible now, e.g. ``insufficient_balance`` for a refund."""


class RateLimitError(APIError):
    """429: too many requests (retried by the client, honouring ``Retry-After``, before it is raised)."""


class ServerError(APIError):
    """5xx: the platform failed (retried by the client before it is raised); quote ``request_id``."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
}


def error_from_response(response: httpx.Response) -> APIError:
    """The error for a non-2xx ``response`` (read), whether or not it carries the error envelope."""
    envelope = _envelope(response)
    status = response.status_code
    kind = _text(envelope.get("type"))
    if kind == "idempotency_error":
        cls: type[APIError] = IdempotencyError
    elif status >= 500:
        cls = ServerError
    else:
        cls = _BY_STATUS.get(status, InvalidRequestError if kind == "invalid_request_error" else APIError)
    message = _text(envelope.get("message")) or _fallback_message(response)
    return cls(
        message,
        status=status,
        type=kind,
        code=_text(envelope.get("code")),
        param=_text(envelope.get("param")),
        request_id=_text(envelope.get("requestId")) or response.headers.get("request-id"),
        headers=response.headers,
    )


def _envelope(response: httpx.Response) -> dict[str, Any]:
    try:
        data = bounded_json.loads(response.content)
    except ValueError:
        return {}
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _fallback_message(response: httpx.Response) -> str:
    reason = response.reason_phrase or "error"
    return f"HTTP {response.status_code} {reason} without an error envelope"
