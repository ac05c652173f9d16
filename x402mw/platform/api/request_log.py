"""The API's request log: after each answer to an authenticated request under ``/v1``, one row
(method, path, status, request id, duration) for the merchant the key names, written in batches
(`x402mw.platform.services.api_requests.ApiRequestLog`). The dashboard's developers pages read it.

The seller middleware's own upkeep is not logged, only counted
(``x402mw_request_log_skipped_total{kind}``): its revalidation of an endpoint's terms (``GET
/v1/agent/endpoints/{id}``, every second per endpoint, mostly ``304``) and its registration of the
challenges it issued (``POST /v1/agent/challenges/batch``). Left in, they pushed a merchant's own
requests out of the log's `ROWS_PER_MERCHANT` within hours. They are told by the route together with
the ``User-Agent`` the seller's client sends (``x402mw-seller/<version>``), so that the merchant's own
reads of an endpoint (their code, curl, the merchant client) stay in the log. The settlements the
seller asks for are logged: they are the merchant's business."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, MutableMapping
from typing import Any

from x402mw.platform.db.models import new_id
from x402mw.platform.http.middleware import HttpMiddleware, Scope
from x402mw.platform.http.state import scope_platform
from x402mw.platform.metrics import REQUEST_LOG_SKIPPED
from x402mw.platform.request_ids import current_request_id
from x402mw.platform.services.merchants import Caller

logger = logging.getLogger("x402mw.platform")
CALLER_KEY = "x402mw.caller"  # where `authenticate` leaves the caller in the request's scope
SELLER_AGENT = b"x402mw-seller/"  # how the seller middleware's client names itself (x402mw.seller.drivers)


def seller_upkeep(scope: Scope) -> str | None:
    """What kind of the seller middleware's upkeep the request is (``terms_revalidation`` or
    ``challenge_registration``), or None for any other request."""
    method, path = scope["method"], scope["path"]
    if method == "GET":
        head, _, endpoint_id = path.rpartition("/")
        kind = "terms_revalidation" if head.endswith("/agent/endpoints") and endpoint_id else None
    elif method == "POST" and path.endswith("/agent/challenges/batch"):
        kind = "challenge_registration"
    else:
        return None
    if kind is None:
        return None
    agent = next((value for name, value in scope["headers"] if name == b"user-agent"), b"")
    return kind if agent.startswith(SELLER_AGENT) else None


class RequestLogMiddleware(HttpMiddleware):
    async def handle(self, scope: Scope, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        started = time.perf_counter()
        method, path = scope["method"], scope["path"]
        status = 500

        async def noting(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noting)
        finally:
            caller = scope.get(CALLER_KEY)
            upkeep = seller_upkeep(scope) if isinstance(caller, Caller) else None
            if upkeep is not None:
                REQUEST_LOG_SKIPPED.labels(upkeep).inc()
            elif isinstance(caller, Caller):
                row = {
                    "id": new_id(),
                    "merchant_id": caller.merchant_id,
                    "livemode": caller.livemode,
                    "method": method[:10],
                    "path": path[:500],
                    "status": status,
                    "request_id": current_request_id()[:64],
                    "duration_ms": round((time.perf_counter() - started) * 1000),
                }
                platform = scope_platform(scope)
                try:
                    row["created_at"] = platform.clock.now()
                    await platform.api_requests.record(row)
                except Exception:  # the log must never cost the merchant their answer
                    logger.exception("could not write the API request log")
