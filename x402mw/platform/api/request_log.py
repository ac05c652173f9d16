"""The API's request log: after each answer to an authenticated request under ``/v1``, one row
(method, path, status, request id, duration) for the merchant the key names, written in batches
(`x402mw.platform.services.api_requests.ApiRequestLog`). The dashboard's developers pages read it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, MutableMapping
from typing import Any

from x402mw.platform.db.models import new_id
from x402mw.platform.http.middleware import HttpMiddleware, Scope
from x402mw.platform.http.state import scope_platform
from x402mw.platform.request_ids import current_request_id
from x402mw.platform.services.merchants import Caller

logger = logging.getLogger("x402mw.platform")
CALLER_KEY = "x402mw.caller"  # where `authenticate` leaves the caller in the request's scope


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
            if isinstance(caller, Caller):
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
