"""The one exception tree of x402mw.

::

    X402Error
     ├── ConfigurationError        a route, price or setting is wrong (raised at start-up, all problems at once)
     ├── PriceError                a price cannot be expressed in the token (too precise, negative, unknown coin)
     ├── PaymentError              a payment cannot be accepted (carries a reason code)
     │    └── InvalidPaymentError       the payment header or its authorization is malformed or does not match
     ├── PlatformError             the platform answered with an error envelope or could not be reached
     └── PaymentRefusedError       the paying client would not pay (over a cap, network not allowed, ...)

A payment the platform refuses or fails to settle raises nothing in a seller's code: the payment
gate answers the payer itself (402 with the reason code, or the payment pending), a route's handler
runs only once its payment is settled, a metered request's `MeteredPayment.settlement` stays None,
and a paid MCP tool's result is withheld. (There was a ``SettlementError`` for it, never raised.)

Every error carries what an operator needs: ``reason`` (an opaque reason code), and where known the
``request_id``, ``payer`` and ``transaction``. Secrets never appear in messages.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "InvalidPaymentError",
    "PaymentError",
    "PaymentRefusedError",
    "PlatformError",
    "PriceError",
    "X402Error",
]


class X402Error(Exception):
    """Root of every error raised by x402mw."""

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        request_id: str | None = None,
        payer: str | None = None,
        transaction: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.request_id = request_id
        self.payer = payer
        self.transaction = transaction


class ConfigurationError(X402Error):
    """Configuration is wrong. ``problems`` lists every problem found, not just the first."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems), reason="configuration_error")


class PriceError(X402Error, ValueError):
    """A price cannot be expressed exactly in the token's minor units."""


class PaymentError(X402Error):
    """A payment cannot be accepted."""


class InvalidPaymentError(PaymentError):
    """The payment header or its authorization is malformed or does not match the offer."""


class PlatformError(X402Error):
    """The platform answered with an error, or could not be reached.

    ``status`` is the HTTP status (0 when the platform could not be reached) and ``code`` the
    error code of the platform's error envelope.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        code: str | None = None,
        error_type: str | None = None,
        param: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, reason=code, request_id=request_id)
        self.status = status
        self.code = code
        self.error_type = error_type
        self.param = param


class PaymentRefusedError(X402Error):
    """The paying client refused to pay (over its cap, network or asset not allowed, bad receipt)."""
