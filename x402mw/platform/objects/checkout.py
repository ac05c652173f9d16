"""The objects of the public checkout API (``/checkout/v1``): what a buyer may see of an order, and
how to pay it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, RootModel

from x402mw.platform.objects.base import (
    Currency,
    EvmAddress,
    Minor,
    Money,
    ResponseModel,
    Timestamp,
    Url,
    Uuid,
    omitted_if_none,
)
from x402mw.platform.objects.payments import PaymentException, PaymentIntentStatus, PaymentMethods
from x402mw.platform.objects.subscriptions import Interval

PaymentMethod = Literal["transfer", "wallet"]


class CheckoutCurrency(ResponseModel):
    """A coin of the network that can pay the order."""

    currency: Currency
    token_address: EvmAddress
    decimals: int
    methods: list[PaymentMethod]
    gasless: bool = Field(description="EIP-3009: a wallet can pay by signature, without gas")


class CheckoutNetwork(ResponseModel):
    """A chain that can take the payment, and its coins the payment accepts."""

    network: str = Field(description="`eip155:<chainId>`")
    chain_id: int
    name: str
    testnet: bool
    currencies: list[CheckoutCurrency]


class Merchant(ResponseModel):
    """The merchant a buyer pays."""

    name: str = Field(description="the merchant's display name")


class CheckoutSubscription(ResponseModel):
    """The subscription an invoice's payment order pays for."""

    plan: str = Field(description="the plan's name")
    interval: Interval
    period_start: Timestamp | None = Field(description="the period this invoice pays for; null until the first payment")
    period_end: Timestamp | None


class CheckoutPaymentIntent(ResponseModel):
    """What checkout shows of a payment intent: never its `orderId`, metadata or customer."""

    id: Uuid
    payment_id: Uuid = Field(description="same as `id`")
    object: Literal["checkout_payment_intent"] = "checkout_payment_intent"
    status: PaymentIntentStatus
    amount: Money
    amount_received: Money = Field(description="received so far")
    amount_due: Money = Field(description="`amount` less `amountReceived` (at least 0)")
    currency: Currency
    accepted_currencies: list[Currency]
    payment_methods: PaymentMethods
    merchant: Merchant
    description: str | None = Field(description="what is bought: the order's description, or the payment link's name")
    subscription: CheckoutSubscription | None = Field(description="for a subscription's invoice: its plan and period")
    success_url: Url | None
    cancel_url: Url | None
    exceptions: list[PaymentException]
    network: str | None = Field(description="`eip155:<chainId>` it was paid on; null until paid")
    paid_currency: Currency | None
    tx_hash: str | None
    paid_at: Timestamp | None
    expires_at: Timestamp | None
    livemode: bool = Field(description="false: a test payment on a test network")
    networks: list[CheckoutNetwork] = Field(
        description="where the platform can take this payment (once part is paid: only that chain and coin)"
    )


class WalletTransaction(ResponseModel):
    """`wallet`: an ordinary token transfer for `eth_sendTransaction`; report it with `sync`."""

    to: EvmAddress
    data: str
    value: str
    chain_id: str = Field(description="hex")


class AuthorizationDomain(ResponseModel):
    """The token's EIP-712 domain."""

    name: str
    version: str
    chain_id: int
    verifying_contract: EvmAddress


class AuthorizationMessage(ResponseModel):
    """The authorization to sign, but for `from` (the wallet's account)."""

    to: EvmAddress
    value: Minor
    valid_after: str
    valid_before: str
    nonce: str


class AuthorizationTypedData(ResponseModel):
    """`wallet` with an EIP-3009 coin: EIP-712 typed data for `eth_signTypedData_v4`, with
    `message.from` set to the wallet's account."""

    primary_type: Literal["TransferWithAuthorization"] = "TransferWithAuthorization"
    types: dict[str, Any]
    domain: AuthorizationDomain
    message: AuthorizationMessage


class CheckoutAttempt(ResponseModel):
    """How to pay a payment intent with the chosen network, coin and method."""

    object: Literal["checkout_attempt"] = "checkout_attempt"
    payment_id: Uuid
    method: PaymentMethod
    network: str
    chain_id: int
    network_name: str
    currency: Currency
    token_address: EvmAddress
    decimals: int
    deposit_address: EvmAddress = Field(description="the payment's own address: send the coin here")
    amount_due: Money = Field(description="what is still to pay")
    amount_due_minor: Minor
    payment_uri: str = Field(
        description="EIP-681: `ethereum:<token>@<chainId>/transfer?address=<deposit>&uint256=<amount>`"
    )
    expires_at: Timestamp | None
    transaction: WalletTransaction | None
    authorization: AuthorizationTypedData | None


class X402Offer(ResponseModel):
    """One way to pay an order over x402 (an x402 v2 `PaymentRequirements`)."""

    scheme: Literal["exact"]
    network: str
    amount: Minor
    asset: EvmAddress
    pay_to: EvmAddress = Field(description="the order's deposit address")
    max_timeout_seconds: int
    extra: dict[str, Any] = Field(description="`name`, `version` (the token's EIP-712 domain), `paymentId`")


class X402Resource(ResponseModel):
    """What an x402 payment pays for."""

    url: str
    description: str
    mime_type: str


class X402PaymentRequired(ResponseModel):
    """x402 v2 `PaymentRequired` (also base64 in the `PAYMENT-REQUIRED` header): pay the amount due, once."""

    x402_version: Literal[2] = 2
    error: str | None = omitted_if_none(description="why the payment sent was not taken (an x402 reason code)")
    resource: X402Resource
    accepts: list[X402Offer] = Field(min_length=1)
    message: str | None = omitted_if_none()


class X402PendingError(ResponseModel):
    """A payment sent and not final yet."""

    type: Literal["payment_error"] = "payment_error"
    code: Literal["settlement_pending"] = "settlement_pending"
    message: str
    transaction: str


class X402PaymentPending(ResponseModel):
    """The payment is on its way and not final: send the same `PAYMENT-SIGNATURE` again."""

    error: X402PendingError


class X402PaymentRequiredOrPending(RootModel[X402PaymentRequired | X402PaymentPending]):
    """A 402 of an order's `x402Url`: what to pay, or a payment not final yet."""
