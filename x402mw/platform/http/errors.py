"""The error envelope and the ``Request-Id`` every response carries.

``{"error": {"type", "code", "message", "requestId", "param"?}}``. Types: ``invalid_request_error``,
``authentication_error``, ``idempotency_error``, ``rate_limit_error``, ``api_error``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl

import httpx
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount

from x402mw.platform.batching import unreachable
from x402mw.platform.chain.relayer import ChainUnavailable
from x402mw.platform.http.middleware import HttpMiddleware, Scope
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.objects.service import Error, ErrorEnvelope, ErrorType
from x402mw.platform.request_ids import current_request_id, new_request_id, request_id_var
from x402mw.platform.services.errors import ServiceError

RETRY_AFTER_SECONDS = 2
"""What a 503 asks the client to wait before trying again."""

logger = logging.getLogger("x402mw.platform")


_TYPES: dict[int, ErrorType] = {401: "authentication_error", 429: "rate_limit_error"}


class HttpError(Exception):
    """An error answered in the documented envelope."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        type: ErrorType | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.type: ErrorType = type or _TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        if status == 503 and "Retry-After" not in (headers or {}):
            headers = {**(headers or {}), "Retry-After": str(RETRY_AFTER_SECONDS)}
        self.headers = headers

    @classmethod
    def missing(cls, what: str, ident: str, param: str = "id") -> HttpError:
        return cls(404, "resource_missing", f"No such {what}: '{ident[:80]}'", param=param)


def error_response(error: HttpError) -> ModelResponse:
    body = Error(
        type=error.type,
        code=error.code,
        message=error.message,
        request_id=current_request_id(),
        param=error.param,
    )
    return ModelResponse(ErrorEnvelope(error=body), status_code=error.status, headers=error.headers)


async def _api_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    return error_response(exc)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _routes_to(routes: Iterable[BaseRoute], scope: Scope) -> bool:
    """Whether Starlette's router sends ``scope`` to an endpoint: the first route that matches it
    fully takes it (a mount passes it on to its own routes, and never back)."""
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            if isinstance(route, Mount):
                if not route.routes:  # an app (static files): it answers GET and HEAD
                    return scope["method"] in ("GET", "HEAD")
                return _routes_to(route.routes, {**scope, **child})
            return True
    return False


def allowed_methods(request: Request) -> list[str]:
    """The methods the request's URL takes, found by routing the URL with each method in turn (a
    path often has one route per method, and Starlette's own 405 names only the first such route;
    routes for other paths that also match, such as the checkout pages' catch-all, are left out
    when a mount routes the URL elsewhere). Empty when the URL names nothing."""
    # Matched from the app's own root: inside a Mount, the scope's root_path is the mount's.
    root = request.scope.get("app_root_path", request.scope.get("root_path", ""))
    scope = {**request.scope, "root_path": root}
    return [method for method in _METHODS if _routes_to(request.app.routes, {**scope, "method": method})]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405 and request.method == "OPTIONS":
        # OPTIONS is answered for every path the API has, without an API key: which methods it takes
        allowed = allowed_methods(request)
        if allowed:
            return Response(status_code=204, headers={"Allow": ", ".join([*allowed, "OPTIONS"])})
    code = {404: "resource_missing", 405: "method_not_allowed"}.get(exc.status_code, "invalid_request")
    message = "Unrecognized request URL" if exc.status_code == 404 else str(exc.detail)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # RFC 9110, 15.5.6: a 405 names the methods the URL does take
        allowed = allowed_methods(request)
        if allowed:
            headers["Allow"] = ", ".join([*allowed, "OPTIONS"])
    return error_response(HttpError(exc.status_code, code, message, headers=headers))


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return error_response(HttpError(exc.status, exc.code, exc.message, param=exc.param))


exception_handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    HttpError: _api_error,
    ServiceError: _refused,
    HTTPException: _http_error,
}


class RequestIdMiddleware(HttpMiddleware):
    """Pure ASGI, outermost: gives every request an id (``Request-Id`` header, logs, error bodies),
    refuses URLs that no stored text can match, and answers any unexpected error as a logged 500
    in the envelope, with that id, keeping the connection open."""

    async def handle(self, scope: Scope, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        request_id = new_request_id()
        token = request_id_var.set(request_id)
        header = (b"request-id", request_id.encode())
        started = False

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        try:
            refused = _url_refusal(scope)
            if refused is not None:
                await error_response(refused)(scope, receive, send_with_id)
                return
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            outage = outage_error(exc)
            if outage is not None:
                logger.warning(
                    "%s on %s %s (request id %s): %s", outage.code, scope["method"], scope["path"], request_id, exc
                )
            else:
                logger.error(
                    "unexpected error on %s %s (request id %s)",
                    scope["method"],
                    scope["path"],
                    request_id,
                    exc_info=exc,
                )
            if started:  # part of the answer is out: only closing the connection can tell the client
                raise
            error = outage or HttpError(
                500, "internal_error", "An unexpected error occurred; quote the requestId to support"
            )
            await error_response(error)(scope, receive, send_with_id)
        finally:
            request_id_var.reset(token)


def outage_error(exc: BaseException) -> HttpError | None:
    """503 in the envelope, with ``Retry-After``, for an error that says a dependency is down (the
    database, a chain's node, or the way to it) rather than anything the request did; None else."""
    if isinstance(exc, ChainUnavailable | httpx.TransportError):
        return HttpError(503, "chain_unavailable", "The chain cannot be reached right now; retry shortly")
    if isinstance(exc, sa_exc.SQLAlchemyError) and unreachable(exc):
        return HttpError(503, "database_unavailable", "The database cannot be reached right now; retry shortly")
    if unreachable(exc):
        return HttpError(503, "service_unavailable", "A service the platform needs cannot be reached; retry shortly")
    return None


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _url_refusal(scope: Scope) -> HttpError | None:
    """A path with a control character names nothing (no id, slug or route holds one; a trailing
    ``%0A`` would even slip past a route's ``$``), and a NUL in the query cannot be stored
    (PostgreSQL text refuses it): both are refused here, once, before any handler sees them."""
    found = _CONTROL.search(scope["path"])
    if found is not None:
        what = "a NUL character" if found.group() == "\x00" else "a control character"
        return HttpError(400, "url_invalid", f"The URL path contains {what}")
    query: bytes = scope.get("query_string", b"")
    if b"\x00" in query or b"%00" in query:
        name = next((k for k, v in parse_qsl(query.decode("latin-1")) if "\x00" in k + v), None)
        return HttpError(400, "parameter_invalid", "A query parameter contains a NUL character", param=name)
    return None
