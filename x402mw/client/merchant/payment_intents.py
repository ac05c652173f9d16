"""``/payment-intents``: payment orders, created by the merchant and paid by a buyer at checkout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal

from x402mw.client.merchant.calls import Call, Listing
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


class Customer(APIObject):
    email: str | None = None
    name: str | None = None


class PaymentMethods(APIObject):
    """How the buyer may pay at checkout: a browser ``wallet``, a plain ``transfer`` to a deposit
    address, and whether the transfer option starts open."""

    wallet: bool = True
    transfer: bool = True
    transfer_default_open: bool = False


class PaymentIntent(APIObject):
    """A payment order. ``status`` is ``requires_payment``, ``processing``, ``succeeded``,
    ``canceled``, ``expired`` or ``refunded``; ``network``, ``payer``, ``tx_hash`` and ``paid_at`` stay
    None until a payment arrives; ``exceptions`` lists ``underpaid``, ``overpaid``, ``paid_late`` or
    ``wrong_asset`` when the payment was not the one expected."""

    id: str
    object: str = "payment_intent"
    payment_id: str | None = None
    status: str
    order_id: str
    amount: Decimal
    amount_received: Decimal = Decimal(0)
    currency: str
    accepted_currencies: list[str] = []
    payment_methods: PaymentMethods = PaymentMethods()
    checkout_url: str | None = None
    x402_url: str | None = None
    payment_link_id: str | None = None
    description: str | None = None
    success_url: str | None = None
    cancel_url: str | None = None
    customer: Customer = Customer()
    metadata: dict[str, str] = {}
    exceptions: list[str] = []
    network: str | None = None
    paid_currency: str | None = None
    payer: str | None = None
    tx_hash: str | None = None
    paid_at: datetime | None = None
    expires_at: datetime | None = None
    livemode: bool
    created_at: datetime
    updated_at: datetime


_intents = Collection("/payment-intents", PaymentIntent, "paymentIntent")


class PaymentIntents(Resource[Mode]):
    """``client.payment_intents``: create, retrieve, list and cancel payment orders."""

    @operation
    def create(
        self,
        *,
        order_id: str,
        amount: Decimal | str | int,
        currency: str,
        accepted_currencies: Sequence[str] | None = None,
        customer_email: str | None = None,
        customer_name: str | None = None,
        description: str | None = None,
        success_url: str | None = None,
        cancel_url: str | None = None,
        metadata: Mapping[str, str] | None = None,
        payment_methods: PaymentMethods | None = None,
        expires_at: datetime | None = None,
        idempotency_key: str | None = None,
    ) -> Call[PaymentIntent]:
        """Create an order of ``amount`` (a decimal amount of ``currency``, e.g. ``"12.50"``) for the
        merchant's ``order_id``, unique per merchant (409 ``order_id_conflict`` otherwise); send the
        buyer to its ``checkout_url``."""
        body = present(
            order_id=order_id,
            amount=money(amount, "amount"),
            currency=currency,
            accepted_currencies=None if accepted_currencies is None else list(accepted_currencies),
            customer_email=customer_email,
            customer_name=customer_name,
            description=description,
            success_url=success_url,
            cancel_url=cancel_url,
            metadata=None if metadata is None else dict(metadata),
            payment_methods=None if payment_methods is None else payment_methods.model_dump(by_alias=True),
            expires_at=expires_at,
        )
        return _intents.create(body, idempotency_key)

    @operation
    def retrieve(self, payment_id: str) -> Call[PaymentIntent]:
        return _intents.retrieve(payment_id)

    @operation
    def cancel(self, payment_id: str, *, idempotency_key: str | None = None) -> Call[PaymentIntent]:
        """Cancel an order awaiting payment (409 ``payment_intent_unexpected_state`` otherwise)."""
        return _intents.action(payment_id, "cancel", idempotency_key=idempotency_key)

    @paginated
    def list(
        self,
        *,
        order_id: str | None = None,
        limit: int | None = None,
        starting_after: str | None = None,
        ending_before: str | None = None,
    ) -> Call[Listing[PaymentIntent]]:
        """Orders, newest first; ``order_id`` finds the order of one of the merchant's order ids."""
        return _intents.list(order_id=order_id, limit=limit, starting_after=starting_after, ending_before=ending_before)
