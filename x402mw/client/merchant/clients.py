"""`MerchantClient` and `AsyncMerchantClient`: the merchant API's resources over one HTTP client."""

from __future__ import annotations

from types import TracebackType
from typing import Generic, TypeVar

import httpx

from x402mw.client.merchant.agent_endpoints import AgentEndpoints
from x402mw.client.merchant.balances import Balances
from x402mw.client.merchant.calls import DEFAULT_BASE_URL, DEFAULT_TIMEOUT, ClientConfig
from x402mw.client.merchant.drivers import AsyncRunner, SyncRunner
from x402mw.client.merchant.events import Events
from x402mw.client.merchant.payment_intents import PaymentIntents
from x402mw.client.merchant.payment_links import PaymentLinks
from x402mw.client.merchant.refunds import Refunds
from x402mw.client.merchant.reports import Reports
from x402mw.client.merchant.resource import Async, Mode, Sync
from x402mw.client.merchant.sandbox import Sandbox
from x402mw.client.merchant.subscriptions import SubscriptionPlans, Subscriptions, TestClocks
from x402mw.client.merchant.webhook_endpoints import WebhookEndpoints

HttpClient = TypeVar("HttpClient", httpx.Client, httpx.AsyncClient)


def _masked(api_key: str) -> str:
    """The key's mode prefix only (``sk_test_…``): a key never appears in a repr."""
    for prefix in ("sk_test_", "sk_live_"):
        if api_key.startswith(prefix):
            return prefix + "…"
    return "…"


class _Client(Generic[Mode, HttpClient]):
    """What `MerchantClient` and `AsyncMerchantClient` share: the resources, over one runner."""

    payment_intents: PaymentIntents[Mode]
    payment_links: PaymentLinks[Mode]
    refunds: Refunds[Mode]
    balances: Balances[Mode]
    reports: Reports[Mode]
    webhook_endpoints: WebhookEndpoints[Mode]
    events: Events[Mode]
    agent_endpoints: AgentEndpoints[Mode]
    sandbox: Sandbox[Mode]
    subscription_plans: SubscriptionPlans[Mode]
    subscriptions: Subscriptions[Mode]
    test_clocks: TestClocks[Mode]

    def __init__(
        self,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        max_retries: int = 2,
        http_client: HttpClient | None = None,
    ) -> None:
        config = ClientConfig.create(api_key, base_url, timeout, max_retries)
        self._owns_http_client = http_client is None
        self._http_client: HttpClient = http_client if http_client is not None else self._new_http_client()
        self._attach(config, self._runner(config))

    def _new_http_client(self) -> HttpClient:
        """The HTTP client made when none is passed in (then the client's own, to close)."""
        raise NotImplementedError

    def _runner(self, config: ClientConfig) -> SyncRunner | AsyncRunner:
        """What runs the operations' calls over ``self._http_client``."""
        raise NotImplementedError

    def _attach(self, config: ClientConfig, runner: SyncRunner | AsyncRunner) -> None:
        self.base_url = config.base_url
        self.max_retries = config.max_retries
        self._api_key_hint = _masked(config.api_key)
        self.payment_intents = PaymentIntents(runner)
        self.payment_links = PaymentLinks(runner)
        self.refunds = Refunds(runner)
        self.balances = Balances(runner)
        self.reports = Reports(runner)
        self.webhook_endpoints = WebhookEndpoints(runner)
        self.events = Events(runner)
        self.agent_endpoints = AgentEndpoints(runner)
        self.sandbox = Sandbox(runner)
        self.subscription_plans = SubscriptionPlans(runner)
        self.subscriptions = Subscriptions(runner)
        self.test_clocks = TestClocks(runner)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r}, api_key='{self._api_key_hint}')"


class MerchantClient(_Client[Sync, httpx.Client]):
    """The merchant API, synchronously (``httpx.Client``).

    >>> with MerchantClient("sk_test_...") as client:
    ...     intent = client.payment_intents.create(order_id="A-1001", amount="12.50", currency="USDC")
    ...     intent.checkout_url

    ``timeout`` (seconds, or an ``httpx.Timeout``) bounds each attempt. Failed attempts that may be
    retried (no answer, 409 ``idempotency_key_in_use``, 429, 5xx) are retried up to ``max_retries``
    times with exponential backoff and jitter, honouring ``Retry-After``; every POST carries an
    ``Idempotency-Key`` (a fresh UUID unless given), the same on each attempt. Errors are
    `APIError` subclasses. Pass ``http_client`` to use your own ``httpx.Client`` (proxies,
    transports); it is then yours to close.
    """

    def _new_http_client(self) -> httpx.Client:
        return httpx.Client()

    def _runner(self, config: ClientConfig) -> SyncRunner:
        return SyncRunner(self._http_client, config)

    def close(self) -> None:
        """Close the HTTP client, unless it was passed in as ``http_client``."""
        if self._owns_http_client:
            self._http_client.close()

    def __enter__(self) -> MerchantClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncMerchantClient(_Client[Async, httpx.AsyncClient]):
    """The merchant API, asynchronously (``httpx.AsyncClient``): as `MerchantClient`, each operation
    answers an awaitable, and list operations an `AsyncPager`.

    >>> async with AsyncMerchantClient("sk_test_...") as client:
    ...     intent = await client.payment_intents.create(order_id="A-1001", amount="12.50", currency="USDC")
    ...     async for event in client.events.list(limit=100).auto_paging_iter():
    ...         print(event.type)
    """

    def _new_http_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient()

    def _runner(self, config: ClientConfig) -> AsyncRunner:
        return AsyncRunner(self._http_client, config)

    async def aclose(self) -> None:
        """Close the HTTP client, unless it was passed in as ``http_client``."""
        if self._owns_http_client:
            await self._http_client.aclose()

    async def __aenter__(self) -> AsyncMerchantClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
