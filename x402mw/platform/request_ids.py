"""The id of the request being served (``Request-Id``), for whatever runs on its behalf: the error
bodies and pages that quote it, the log lines that carry it. `RequestIdMiddleware`
(`x402mw.platform.http.errors`) gives each request one; outside a request it is empty."""

from __future__ import annotations

import contextvars
import secrets

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("x402mw_request_id", default="")


def current_request_id() -> str:
    """The id of the request being served, or ``""``."""
    return request_id_var.get()


def new_request_id() -> str:
    """A fresh id: ``req_`` and 24 hex digits."""
    return "req_" + secrets.token_hex(12)
