"""x402mw: get paid in stablecoins, per HTTP request by agents (x402 v2) and by people.

Sellers protect routes with an adapter (`x402mw.adapters.flask`, `.starlette`, `.django`, `.asgi`,
`.wsgi`); agents pay with `x402mw.client.X402Auth`; the platform lives in `x402mw.platform`.
"""

from x402mw._version import __version__
from x402mw.errors import (
    ConfigurationError,
    InvalidPaymentError,
    PaymentError,
    PaymentRefusedError,
    PlatformError,
    PriceError,
    X402Error,
)
from x402mw.seller import MeteredPayment, PaidRoute, PaymentGate, Settlement, UsageError

__all__ = [
    "ConfigurationError",
    "InvalidPaymentError",
    "MeteredPayment",
    "PaidRoute",
    "PaymentError",
    "PaymentGate",
    "PaymentRefusedError",
    "PlatformError",
    "PriceError",
    "Settlement",
    "UsageError",
    "X402Error",
    "__version__",
]
