"""A typed client of the merchant API, synchronous (`MerchantClient`) and asynchronous
(`AsyncMerchantClient`), both driving one implementation of each operation.

>>> from x402mw.client import MerchantClient
>>> with MerchantClient("sk_test_...", "http://127.0.0.1:4402/v1") as client:
...     intent = client.payment_intents.create(order_id="A-1001", amount="12.50", currency="USDC")
...     for event in client.events.list(type="payment_intent.succeeded").auto_paging_iter():
...         ...

Results are pydantic models (`PaymentIntent`, `Refund`, ...) with snake_case attributes and
``Decimal`` money; errors are `APIError` subclasses carrying the request id (see
`x402mw.client.merchant.errors`).
"""

from __future__ import annotations

from x402mw.client.merchant.agent_endpoints import AgentEndpoint, AgentEndpoints
from x402mw.client.merchant.balances import Balance, Balances
from x402mw.client.merchant.calls import DEFAULT_BASE_URL
from x402mw.client.merchant.clients import AsyncMerchantClient, MerchantClient
from x402mw.client.merchant.errors import (
    APIConnectionError,
    APIError,
    AuthenticationError,
    ConflictError,
    IdempotencyError,
    InvalidRequestError,
    NotFoundError,
    RateLimitError,
    ServerError,
    UnprocessableEntityError,
)
from x402mw.client.merchant.events import Event, EventDelivery, EventRedelivery, Events
from x402mw.client.merchant.pages import AsyncPage, AsyncPager, Page
from x402mw.client.merchant.payment_intents import Customer, PaymentIntent, PaymentIntents, PaymentMethods
from x402mw.client.merchant.payment_links import PaymentLink, PaymentLinks
from x402mw.client.merchant.refunds import Refund, Refunds
from x402mw.client.merchant.reports import Report, ReportRow, Reports
from x402mw.client.merchant.resource import NOT_GIVEN, APIObject, Async, NotGiven, Resource, Sync
from x402mw.client.merchant.sandbox import FaucetTransfer, Sandbox, SandboxPayment
from x402mw.client.merchant.subscriptions import (
    Invoice,
    OpenedSubscription,
    Subscription,
    SubscriptionPlan,
    SubscriptionPlans,
    Subscriptions,
    TestClock,
    TestClocks,
    signed_subscribe_url,
)
from x402mw.client.merchant.webhook_endpoints import DeletedWebhookEndpoint, WebhookEndpoint, WebhookEndpoints

__all__ = [
    "DEFAULT_BASE_URL",
    "NOT_GIVEN",
    "APIConnectionError",
    "APIError",
    "APIObject",
    "AgentEndpoint",
    "AgentEndpoints",
    "Async",
    "AsyncMerchantClient",
    "AsyncPage",
    "AsyncPager",
    "AuthenticationError",
    "Balance",
    "Balances",
    "ConflictError",
    "Customer",
    "DeletedWebhookEndpoint",
    "Event",
    "EventDelivery",
    "EventRedelivery",
    "Events",
    "FaucetTransfer",
    "IdempotencyError",
    "InvalidRequestError",
    "Invoice",
    "MerchantClient",
    "NotFoundError",
    "NotGiven",
    "OpenedSubscription",
    "Page",
    "PaymentIntent",
    "PaymentIntents",
    "PaymentLink",
    "PaymentLinks",
    "PaymentMethods",
    "RateLimitError",
    "Refund",
    "Refunds",
    "Report",
    "ReportRow",
    "Reports",
    "Resource",
    "Sandbox",
    "SandboxPayment",
    "ServerError",
    "Subscription",
    "SubscriptionPlan",
    "SubscriptionPlans",
    "Subscriptions",
    "Sync",
    "TestClock",
    "TestClocks",
    "UnprocessableEntityError",
    "WebhookEndpoint",
    "WebhookEndpoints",
    "signed_subscribe_url",
]
