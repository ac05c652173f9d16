"""What services raise when a request breaks their rules; the API answers it in the error envelope
with its ``status``, ``code`` and ``param`` (see `x402mw.platform.http.errors`)."""

from __future__ import annotations


class ServiceError(Exception):
    """A request the service's rules refuse, e.g. 409 ``order_id_conflict`` or 422 ``insufficient_balance``."""

    def __init__(self, status: int, code: str, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
