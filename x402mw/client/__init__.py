"""The client side of x402mw: the paying side of x402 and the merchant API client.

Paying: a `Wallet` and `X402Auth`, an ``httpx.Auth`` that pays 402 answers.

>>> import httpx
>>> from x402mw.client import Wallet, X402Auth
>>> auth = X402Auth(Wallet.from_env(), max_amount="0.10", max_total="5")
>>> httpx.get("https://api.example.com/weather", auth=auth)

Routes sold by payment channel (``batch-settlement``) are paid by channel when the auth is given
a `ChannelPolicy` (its deposit cap): one deposit, then one voucher a request (see docs/channels.md).

>>> auth = X402Auth(Wallet.from_env(), max_amount="0.01", channels=ChannelPolicy(max_deposit="5"))

The ``x402mw pay URL`` command is in :mod:`x402mw.client.pay`.

Selling: `MerchantClient` (and `AsyncMerchantClient`), a typed client of the merchant API.

>>> from x402mw.client import MerchantClient
>>> with MerchantClient("sk_test_...") as client:
...     intent = client.payment_intents.create(order_id="A-1001", amount="12.50", currency="USDC")

Its result models (`PaymentIntent`, `Refund`, ...) are in :mod:`x402mw.client.merchant`; webhook
deliveries are verified with :mod:`x402mw.client.webhooks`.
"""

from __future__ import annotations

from x402mw.client.auth import X402Auth
from x402mw.client.channels import ChannelCharge, ChannelPolicy, ChannelRefund
from x402mw.client.merchant import (
    APIConnectionError,
    APIError,
    AsyncMerchantClient,
    AuthenticationError,
    ConflictError,
    IdempotencyError,
    InvalidRequestError,
    MerchantClient,
    NotFoundError,
    RateLimitError,
    ServerError,
    UnprocessableEntityError,
)
from x402mw.client.records import PaymentRecord
from x402mw.client.wallet import Wallet

__all__ = [
    "APIConnectionError",
    "APIError",
    "AsyncMerchantClient",
    "AuthenticationError",
    "ChannelCharge",
    "ChannelPolicy",
    "ChannelRefund",
    "ConflictError",
    "IdempotencyError",
    "InvalidRequestError",
    "MerchantClient",
    "NotFoundError",
    "PaymentRecord",
    "RateLimitError",
    "ServerError",
    "UnprocessableEntityError",
    "Wallet",
    "X402Auth",
]
