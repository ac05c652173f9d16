"""What a metered route's handler reports its usage to: `MeteredPayment`.

A metered route (an agent endpoint with ``pricingMode: "metered"``) is paid with the ``upto``
scheme: the agent signs a ceiling, the platform verifies and holds it before the handler runs, and
settles what the handler reported after it. Every adapter puts the same object where the handler
finds its payment (``request.state.x402``, ``flask.g.x402``, ``request.x402`` in Django,
``scope["state"]["x402"]`` in plain ASGI, ``environ["x402mw.settlement"]`` in WSGI)::

    payment = request.state.x402
    for token in generate():
        payment.charge(PRICE_PER_TOKEN)  # atomic units, or a price such as "$0.0001"

``charge`` adds to what the request used; the total, at most the ceiling, is settled once the
response starts (its headers carry ``PAYMENT-RESPONSE``). A usage of 0 sends no transaction. Usage
reported after the response started cannot be charged any more: `charge` raises `UsageError`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from decimal import Decimal

from x402mw.errors import PriceError, X402Error
from x402mw.protocol.prices import to_atomic
from x402mw.seller.decisions import Settlement

logger = logging.getLogger("x402mw.seller")


class UsageError(X402Error, ValueError):
    """A usage that cannot be charged: negative, not a whole number of atomic units, or reported
    after the response started (when the charge was settled)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(eq=False)
class MeteredPayment:
    """The payment held for one request to a metered route: at most ``ceiling`` atomic units of
    ``asset``, signed by ``payer``. The handler reports usage with `charge`; after the response
    started, ``settlement`` is the settled payment (or None while it is pending or if it failed)."""

    ceiling: int
    payer: str
    network: str
    asset: str
    pay_to: str
    decimals: int
    currency: str
    challenge_id: str
    endpoint_id: str
    payment_id: str = ""  # the platform's agent payment holding the authorization
    settlement: Settlement | None = None
    _charged: int = 0
    _closed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def charged(self) -> int:
        """The usage reported so far, in atomic units (it may exceed the ceiling; see `amount`)."""
        return self._charged

    @property
    def amount(self) -> int:
        """What is settled: the usage reported, at most the ceiling."""
        return min(self._charged, self.ceiling)

    def charge(self, amount: int | str | Decimal) -> int:
        """Add ``amount`` to this request's usage and return the total so far. ``amount`` is an
        ``int`` of atomic units, or a price (``"$0.001"``, ``"0.001 USDC"``, a `Decimal`) of the
        endpoint's token. A total above the ceiling settles the ceiling (and is logged).

        Raises `UsageError` for a negative amount, a fraction of an atomic unit, a float, or a call
        after the response started."""
        atomic = self._atomic(amount)
        with self._lock:
            if self._closed:
                raise UsageError("the charge was settled when the response started; report usage before it starts")
            self._charged += atomic
            return self._charged

    def _atomic(self, amount: int | str | Decimal) -> int:
        if isinstance(amount, bool) or not isinstance(amount, int | str | Decimal):
            raise UsageError(f"usage must be an int of atomic units or a price string, not {type(amount).__name__}")
        if isinstance(amount, int):
            if amount < 0:
                raise UsageError("usage cannot be negative")
            return amount
        try:
            if isinstance(amount, Decimal) and amount == 0:
                return 0
            value = to_atomic(amount, decimals=self.decimals, symbol=self.currency)
        except PriceError as exc:
            raise UsageError(f"usage {amount!r} is not a chargeable amount: {exc}") from None
        return value

    def close(self) -> int:
        """End the reporting (the response is starting): the amount to settle, at most the ceiling."""
        with self._lock:
            self._closed = True
            charged = self._charged
        if charged > self.ceiling:
            logger.warning(
                "metered request (challenge %s) reported %d atomic units, above its ceiling %d: settling %d",
                self.challenge_id,
                charged,
                self.ceiling,
                self.ceiling,
            )
        return min(charged, self.ceiling)


@dataclass(frozen=True, slots=True)
class ServeMetered:
    """Decision: run the handler with ``payment`` (it reports usage), then settle with
    `PaymentGate.finish` before the response starts, and add what that returns to it."""

    payment: MeteredPayment
