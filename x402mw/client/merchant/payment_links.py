"""``/payment-links``: reusable priced links; each buyer who opens one gets a payment order of their own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal

from x402mw.client.merchant.calls import Call, Listing
from x402mw.client.merchant.payment_intents import PaymentMethods
from x402mw.client.merchant.resource import (
    APIObject,
    Collection,
    Mode,
    Resource,
    money,
    operation,
    paginated,
    present,
)


class PaymentLink(APIObject):
    """A payment link. Hand ``checkout_url`` (or ``slug_url``) to buyers; the orders they open carry
    ``payment_link_id``. An inactive link (``active`` False) opens no new orders."""

    id: str
    object: str = "payment_link"
    name: str
    slug: str | None = None
    active: bool
    amount: Decimal
    currency: str
    accepted_currencies: list[str] = []
    payment_methods: PaymentMethods = PaymentMethods()
    checkout_url: str
    slug_url: str | None = None
    success_url: str | None = None
    cancel_url: str | None = None
    metadata: dict[str, str] = {}
    livemode: bool
    created_at: datetime
    updated_at: datetime


_links = Collection("/payment-links", PaymentLink, "paymentLink")


class PaymentLinks(Resource[Mode]):
    """``client.payment_links``: create, retrieve, list and update payment links."""

    @operation
    def create(
        self,
        *,
        name: str,
        amount: Decimal | str | int,
        currency: str,
        accepted_currencies: Sequence[str] | None = None,
        payment_methods: PaymentMethods | None = None,
        success_url: str | None = None,
        cancel_url: str | None = None,
        metadata: Mapping[str, str] | None = None,
        slug: str | None = None,
        idempotency_key: str | None = None,
    ) -> Call[PaymentLink]:
        """Create a link selling ``name`` for ``amount`` of ``currency``; ``slug`` (lower-case letters,
        digits, hyphens) adds ``/paylink/<slug>.<merchant id>`` (409 ``slug_taken`` when another of
        your links has it)."""
        body = present(
            name=name,
            amount=money(amount, "amount"),
            currency=currency,
            accepted_currencies=None if accepted_currencies is None else list(accepted_currencies),
            payment_methods=None if payment_methods is None else payment_methods.model_dump(by_alias=True),
            success_url=success_url,
            cancel_url=cancel_url,
            metadata=None if metadata is None else dict(metadata),
            slug=slug,
        )
        return _links.create(body, idempotency_key)

    @operation
    def retrieve(self, link_id: str) -> Call[PaymentLink]:
        return _links.retrieve(link_id)

    @operation
    def update(self, link_id: str, *, name: str | None = None, active: bool | None = None) -> Call[PaymentLink]:
        """Rename the link, or (de)activate it: an inactive link opens no new orders."""
        return _links.update(link_id, present(name=name, active=active))

    @paginated
    def list(
        self, *, limit: int | None = None, starting_after: str | None = None, ending_before: str | None = None
    ) -> Call[Listing[PaymentLink]]:
        """Links, newest first."""
        return _links.list(limit=limit, starting_after=starting_after, ending_before=ending_before)
