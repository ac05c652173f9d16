"""The merchant story over plain HTTP, for any language: create an order, have it paid in the
sandbox, receive signed webhooks, refund it. Only httpx and the standard library's HTTP server; the
webhook signature is checked with `construct_event` (any Standard Webhooks library does the same).

Against your platform, with a test key::

    X402MW_PLATFORM_URL=http://127.0.0.1:4402/v1 X402MW_API_KEY=sk_test_... python examples/merchant_http.py

Without ``X402MW_API_KEY`` it starts an embedded platform (SQLite, in-process dev chain).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from x402mw.client.webhooks import WebhookVerificationError, construct_event


def platform_url() -> str:
    """The platform's API: ``X402MW_PLATFORM_URL`` (``X402MW_BASE_URL``, its former name, still works)."""
    return os.environ.get("X402MW_PLATFORM_URL") or os.environ.get("X402MW_BASE_URL") or "http://127.0.0.1:4402/v1"


class Hooks(ThreadingHTTPServer):
    """Your webhook endpoint: the raw body and the headers go to the verifier, untouched."""

    secret = ""
    types: set[str]

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _HookHandler)
        self.types = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/webhooks"


class _HookHandler(BaseHTTPRequestHandler):
    server: Hooks

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        try:
            event = construct_event(raw, dict(self.headers.items()), self.server.secret)
        except WebhookVerificationError:
            self.send_response(400)
        else:
            self.server.types.add(event.type)
            self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # keep the story's output readable
        pass


def post(api: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST with an Idempotency-Key, so that a retry after a timeout cannot create a second object."""
    reply = api.post(path, json=body, headers={"Idempotency-Key": str(uuid.uuid4())})
    if reply.is_error:  # {"error": {"type", "code", "message", "requestId", "param"?}}
        error = reply.json()["error"]
        raise RuntimeError(f"{reply.status_code} {error['code']}: {error['message']} (request {error['requestId']})")
    answer: dict[str, Any] = reply.json()
    return answer


def run(base_url: str, api_key: str, *, say: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole story against the platform at ``base_url``; what happened, for the caller to check."""
    hooks = Hooks()
    threading.Thread(target=hooks.serve_forever, daemon=True).start()
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as api:
        events = ["payment_intent.succeeded", "refund.completed"]
        endpoint = post(api, "/webhook-endpoints", {"url": hooks.url, "enabledEvents": events})["webhookEndpoint"]
        hooks.secret = endpoint["secret"]  # shown once: keep it with your settings
        try:
            order = post(
                api,
                "/payment-intents",
                {"orderId": f"order-{uuid.uuid4().hex[:8]}", "amount": "8.00", "currency": "USDC"},
            )["paymentIntent"]
            say(f"1. order {order['orderId']}: {order['status']}; the buyer pays at {order['checkoutUrl']}")

            post(api, f"/sandbox/payment-intents/{order['id']}/simulate-payment", {"scenario": "exact"})
            paid = api.get(f"/payment-intents/{order['id']}").json()["paymentIntent"]
            say(f"2. {paid['status']}: tx {paid['txHash']} at {paid['paidAt']}")

            refund = post(api, f"/payment-intents/{order['id']}/refunds", {"reason": "requested_by_customer"})["refund"]
            deadline = time.monotonic() + 60
            while refund["status"] == "processing" and time.monotonic() < deadline:
                time.sleep(0.5)
                refund = api.get(f"/refunds/{refund['id']}").json()["refund"]
            say(f"3. refund {refund['status']}: {refund['amount']} {refund['currency']} to {refund['destination']}")

            deadline = time.monotonic() + 30  # the platform's worker delivers every few seconds
            while not set(events) <= hooks.types and time.monotonic() < deadline:
                time.sleep(0.2)
            say(f"4. webhooks verified: {', '.join(sorted(hooks.types))}")
        finally:
            api.delete(f"/webhook-endpoints/{endpoint['id']}")
            hooks.shutdown()
            hooks.server_close()  # shutdown() only stops serve_forever: this closes the listening socket
    return {"paid": paid, "refund": refund, "events": set(hooks.types)}


@contextlib.contextmanager
def embedded_platform() -> Iterator[tuple[str, str]]:
    """A platform of our own on the embedded defaults, and a test key for a new merchant."""
    import tempfile
    from pathlib import Path

    from x402mw.platform.server import PlatformServer
    from x402mw.platform.services.merchants import create_api_key, create_merchant
    from x402mw.platform.settings import PlatformSettings

    with tempfile.TemporaryDirectory() as workdir:
        settings = PlatformSettings(database_url=f"sqlite:///{Path(workdir) / 'p.sqlite3'}", data_dir=Path(workdir))
        with PlatformServer(settings) as server:
            merchant = server.call(lambda p: create_merchant(p.engine, "HTTP shop"))
            _, key = server.call(lambda p: create_api_key(p.engine, merchant.id))
            yield server.url, key


if __name__ == "__main__":
    if os.environ.get("X402MW_API_KEY"):
        run(platform_url(), os.environ["X402MW_API_KEY"])
    else:
        with embedded_platform() as (url, key):
            run(url, key)
