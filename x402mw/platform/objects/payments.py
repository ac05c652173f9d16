"""The money objects of the API: payment intents, refunds, balances and the sandbox's answers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from x402mw.platform.objects.base import (
    Currency,
    Envelope,
    EvmAddress,
    ListPage,
    Money,
    ResponseModel,
    Timestamp,
    Url,
    Uuid,
)

PaymentIntentStatus = Literal["requires_payment", "processing", "succeeded", "canceled", "expired", "refunded"]
PaymentException = Literal["underpaid", "overpaid", "paid_late", "wrong_asset"]


class PaymentMethods(ResponseModel):
    """How checkout lets a buyer pay an order."""

    wallet: bool
    transfer: bool
    transfer_default_open: bool


class Customer(ResponseModel):
    """The buyer, as the merchant named them."""

    email: str | None
    name: str | None


class PaymentIntent(ResponseModel):
    """A payment order: an amount the merchant asks a buyer to pay at checkout."""

    payment_id: Uuid = Field(description="bare UUID; use it in API calls")
    id: Uuid = Field(description="same as `paymentId`")
    object: Literal["payment_intent"] = "payment_intent"
    status: PaymentIntentStatus
    order_id: str
    amount: Money = Field(description='as sent (`"25.00"` stays `"25.00"`)')
    amount_received: Money = Field(description="received so far (an underpaid order shows it)")
    currency: Currency
    accepted_currencies: list[Currency]
    payment_methods: PaymentMethods
    checkout_url: Url = Field(description="`{checkout_url_base}/pi_<uuid>`: hand it to the buyer exactly as returned")
    x402_url: Url = Field(
        description="`{api_host}/x402/pay/pi_<uuid>`: an x402 v2 resource any agent can pay the amount due at, once"
    )
    payment_link_id: Uuid | None = Field(description="the payment link it was opened from")
    description: str | None = Field(
        description="what is bought, shown to the buyer at checkout (a payment link's name, a subscription's plan)"
    )
    success_url: Url | None
    cancel_url: Url | None
    customer: Customer
    metadata: dict[str, str]
    exceptions: list[PaymentException] = Field(description="irregularities of the payment; never statuses")
    network: str | None = Field(description="`eip155:<chainId>` of the payment; null until paid")
    paid_currency: Currency | None = Field(description="the coin the buyer paid with; null until paid")
    payer: EvmAddress | None = Field(description="the paying wallet, where a refund goes")
    tx_hash: str | None
    paid_at: Timestamp | None
    expires_at: Timestamp | None
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp


class PaymentIntentEnvelope(Envelope):
    """A payment intent: the answer of its operations, and the data of its events."""

    payment_intent: PaymentIntent


class PaymentIntentList(ListPage[PaymentIntent]):
    """A page of PaymentIntent objects, newest first."""


class Refund(ResponseModel):
    """A full refund of a paid order, sent from the treasury to the payer."""

    id: Uuid
    object: Literal["refund"] = "refund"
    payment_id: Uuid = Field(description="the refunded payment intent")
    status: Literal["processing", "completed", "failed"]
    amount: Money = Field(description="everything the order received")
    currency: Currency
    network: str
    destination: EvmAddress = Field(description="the wallet that paid the order")
    reason: str | None
    tx_hash: str | None
    failure_reason: str | None
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp
    completed_at: Timestamp | None


class RefundEnvelope(Envelope):
    """A refund: the answer of its operations, and the data of its events."""

    refund: Refund


class RefundList(ListPage[Refund]):
    """A page of Refund objects, newest first."""


class Balance(ResponseModel):
    """The merchant's money on one chain in one coin."""

    object: Literal["balance"] = "balance"
    network: str
    chain_id: int
    currency: Currency
    available: Money = Field(description="credited payments, less refunds; what a refund can use")
    reserved: Money = Field(description="held by refunds being sent")
    livemode: bool


class BalanceList(ListPage[Balance]):
    """The merchant's balances, one per chain and coin (never more than one page)."""


class SandboxPayment(ResponseModel):
    """A payment the sandbox made, and the order once the platform has seen it."""

    object: Literal["sandbox_payment"] = "sandbox_payment"
    scenario: Literal["exact", "underpaid", "overpaid", "late", "wrong_asset"]
    network: str
    currency: str
    amount: Money
    payer: EvmAddress = Field(description="a fresh wallet the sandbox funded")
    deposit_address: EvmAddress
    tx_hash: str
    payment_intent: PaymentIntent


class FaucetTransfer(ResponseModel):
    """Test coins the sandbox minted."""

    object: Literal["faucet_transfer"] = "faucet_transfer"
    network: str
    currency: str
    address: EvmAddress
    amount: Money = Field(description="the amount as sent (a JSON number as a plain decimal)")
    transaction: str


class PaymentLink(ResponseModel):
    """A reusable priced link; each buyer who opens it gets a payment intent with `paymentLinkId` set."""

    id: Uuid
    object: Literal["payment_link"] = "payment_link"
    name: str
    slug: str | None
    active: bool
    amount: Money = Field(description="as sent")
    currency: Currency
    accepted_currencies: list[Currency]
    payment_methods: PaymentMethods
    checkout_url: Url = Field(description="`{checkout_url_base}/pl_<id>`")
    slug_url: Url | None = Field(description="`{checkout_url_base}/paylink/<slug>.<merchant id>`")
    success_url: Url | None
    cancel_url: Url | None
    metadata: dict[str, str]
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp


class PaymentLinkEnvelope(Envelope):
    """A payment link, as its operations answer it."""

    payment_link: PaymentLink


class PaymentLinkList(ListPage[PaymentLink]):
    """A page of PaymentLink objects, newest first."""
