"""``/refunds``: paying a succeeded order's amount back to the address that paid it."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from x402mw.client.merchant.calls import Call, Listing
from x402mw.client.merchant.resource import (
    APIObject,
    Collection,
    Mode,
    Resource,
    operation,
    paginated,
)


class Refund(APIObject):
    """A refund of a whole order to ``destination`` (its payer). ``status`` is ``processing``,
    ``completed`` (``tx_hash`` and ``completed_at`` set) or ``failed`` (``failure_reason`` set)."""

    id: str
    object: str = "refund"
    payment_id: str
    status: str
    amount: Decimal
    currency: str
    network: str | None = None
    destination: str | None = None
    reason: str | None = None
    tx_hash: str | None = None
    failure_reason: str | None = None
    livemode: bool
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None = None


_refunds = Collection("/refunds", Refund, "refund")
_intent_refunds = Collection("/payment-intents", Refund, "refund")  # created under their order


class Refunds(Resource[Mode]):
    """``client.refunds``: create, retrieve and list refunds."""

    @operation
    def create(self, payment_id: str, *, reason: str | None = None, idempotency_key: str | None = None) -> Call[Refund]:
        """Refund the succeeded order ``payment_id`` in full. 409 ``payment_intent_unexpected_state``
        when it has not succeeded, 409 ``payment_intent_already_refunded``, 422
        ``insufficient_balance`` when the merchant's balance cannot cover it."""
        body = {} if reason is None else {"reason": reason}
        return _intent_refunds.action(payment_id, "refunds", body=body, idempotency_key=idempotency_key)

    @operation
    def retrieve(self, refund_id: str) -> Call[Refund]:
        return _refunds.retrieve(refund_id)

    @paginated
    def list(
        self,
        *,
        payment_id: str | None = None,
        limit: int | None = None,
        starting_after: str | None = None,
        ending_before: str | None = None,
    ) -> Call[Listing[Refund]]:
        """Refunds, newest first; ``payment_id`` keeps those of one order."""
        return _refunds.list(
            payment_id=payment_id, limit=limit, starting_after=starting_after, ending_before=ending_before
        )
