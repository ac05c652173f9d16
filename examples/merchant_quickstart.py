"""The merchant quickstart, runnable: an order is created, paid in the sandbox, reported by signed
webhooks, and refunded; the balance ends where it started.

Against your platform, with a test key::

    X402MW_PLATFORM_URL=http://127.0.0.1:4402/v1 X402MW_API_KEY=sk_test_... python examples/merchant_quickstart.py

Without ``X402MW_API_KEY`` it starts an embedded platform (SQLite, in-process dev chain) with a test
merchant of its own. The webhook receiver is a small Starlette app on a local port; its endpoint is
registered for this run and removed at the end.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.client import MerchantClient
from x402mw.client.webhooks import Event, WebhookVerificationError, event_from_starlette

EVENTS = ["payment_intent.succeeded", "refund.completed"]


def platform_url() -> str:
    """The platform's API: ``X402MW_PLATFORM_URL`` (``X402MW_BASE_URL``, its former name, still works)."""
    return os.environ.get("X402MW_PLATFORM_URL") or os.environ.get("X402MW_BASE_URL") or "http://127.0.0.1:4402/v1"


class WebhookReceiver:
    """Your webhook handler: verifies each delivery against the endpoint's secret, ignores repeats."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.secret = ""
        self.events: dict[str, Event] = {}  # by event id: delivery is at least once
        app = Starlette(routes=[Route("/webhooks", self.receive, methods=["POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/webhooks"

    async def receive(self, request: Request) -> JSONResponse:
        try:
            event = await event_from_starlette(request, self.secret)  # the raw body, never request.json()
        except WebhookVerificationError as exc:
            return JSONResponse({"error": exc.message}, status_code=400)
        self.events.setdefault(event.id, event)
        return JSONResponse({"received": True})

    def types(self) -> set[str]:
        return {event.type for event in self.events.values()}

    @contextlib.contextmanager
    def running(self) -> Iterator[WebhookReceiver]:
        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)
        try:
            yield self
        finally:
            self._server.should_exit = True
            self._thread.join(timeout=10)


def run(base_url: str, api_key: str, *, say: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole story against the platform at ``base_url``; what happened, for the caller to check."""
    from x402mw.platform.server import free_port

    with WebhookReceiver(free_port()).running() as receiver, MerchantClient(api_key, base_url) as client:
        endpoint = client.webhook_endpoints.create(url=receiver.url, enabled_events=EVENTS)
        receiver.secret = endpoint.secret or ""  # shown once, at creation: store it with your settings
        try:
            before = _available(client)
            order = client.payment_intents.create(
                order_id=f"order-{uuid.uuid4().hex[:8]}",
                amount="12.50",
                currency="USDC",
                success_url="https://shop.example/thanks",
                cancel_url="https://shop.example/cart",
            )
            say(f"1. order {order.order_id}: {order.status}; the buyer pays at {order.checkout_url}")

            payment = client.sandbox.simulate_payment(order.id, scenario="exact")
            paid = client.payment_intents.retrieve(order.id)
            say(f"2. paid by {payment.payer}: {paid.status}, tx {paid.tx_hash}, at {paid.paid_at}")

            refund = client.refunds.create(order.id, reason="requested_by_customer")
            deadline = time.monotonic() + 60
            while refund.status == "processing" and time.monotonic() < deadline:
                time.sleep(0.5)
                refund = client.refunds.retrieve(refund.id)
            say(f"3. refund {refund.id}: {refund.status}, {refund.amount} {refund.currency} to {refund.destination}")

            deadline = time.monotonic() + 30  # the platform's worker delivers webhooks every few seconds
            while not set(EVENTS) <= receiver.types() and time.monotonic() < deadline:
                time.sleep(0.2)
            say(f"4. webhooks verified: {', '.join(sorted(receiver.types()))}")
            after = _available(client)
            say(f"5. available balance: {before} before, {after} after")
        finally:
            client.webhook_endpoints.delete(endpoint.id)
    return {"order": order, "paid": paid, "refund": refund, "events": receiver.types(), "balances": (before, after)}


def _available(client: MerchantClient) -> Decimal:
    return sum((b.available for b in client.balances.list().auto_paging_iter() if b.currency == "USDC"), Decimal(0))


@contextlib.contextmanager
def embedded_platform() -> Iterator[tuple[str, str]]:
    """A platform of our own on the embedded defaults, and a test key for a new merchant."""
    from x402mw.platform.server import PlatformServer
    from x402mw.platform.services.merchants import create_api_key, create_merchant
    from x402mw.platform.settings import PlatformSettings

    with tempfile.TemporaryDirectory() as workdir:
        settings = PlatformSettings(
            database_url=f"sqlite:///{Path(workdir) / 'platform.sqlite3'}", data_dir=Path(workdir)
        )
        with PlatformServer(settings) as server:
            merchant = server.call(lambda p: create_merchant(p.engine, "Quickstart shop"))
            _, key = server.call(lambda p: create_api_key(p.engine, merchant.id))
            yield server.url, key


def main() -> None:
    key = os.environ.get("X402MW_API_KEY")
    if key:
        run(platform_url(), key)
        return
    with embedded_platform() as (base_url, key):
        run(base_url, key)


if __name__ == "__main__":
    main()
