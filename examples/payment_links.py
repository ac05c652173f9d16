"""Payment links, runnable: one link sold to two buyers, each with an order of their own.

The merchant creates a link (with a slug) through the typed client; two buyers open it in their
browsers (here: two HTTP clients, each keeping its own cookies), each see an order of their own on
the link's page (shown in place, no redirect), and pay it (in the sandbox); a buyer who reloads the
link gets the same order back. The merchant finds both orders by ``payment_link_id`` and finally
deactivates the link.

Against your platform, with a test key::

    X402MW_PLATFORM_URL=http://127.0.0.1:4402/v1 X402MW_API_KEY=sk_test_... python examples/payment_links.py

Without ``X402MW_API_KEY`` it starts an embedded platform (SQLite, in-process dev chain).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from x402mw.client import MerchantClient


def platform_url() -> str:
    """The platform's API: ``X402MW_PLATFORM_URL`` (``X402MW_BASE_URL``, its former name, still works)."""
    return os.environ.get("X402MW_PLATFORM_URL") or os.environ.get("X402MW_BASE_URL") or "http://127.0.0.1:4402/v1"


def open_link(browser: httpx.Client, url: str) -> str:
    """What a buyer's browser does with the link: open it; the id of the order its page shows."""
    reply = browser.get(url)
    if reply.status_code != 200 or 'data-payment-id="' not in reply.text:
        raise RuntimeError(f"the link answered {reply.status_code}: {reply.text[:200]}")
    return reply.text.split('data-payment-id="', 1)[1].split('"', 1)[0]


def run(base_url: str, api_key: str, say: Callable[[str], None] = print) -> dict[str, Any]:
    with MerchantClient(api_key, base_url) as client:
        link = client.payment_links.create(
            name="Concert ticket",
            amount="25.00",
            currency="USDC",
            success_url="https://shop.example/thanks",
            slug=f"concert-{uuid.uuid4().hex[:8]}",
        )
        say(f"1. link {link.id}: {link.checkout_url} (also {link.slug_url}), {link.amount} {link.currency}")
        orders = []
        for buyer in ("alice", "bob"):
            with httpx.Client(timeout=60) as browser:  # each buyer's own cookies
                order_id = open_link(browser, link.slug_url or link.checkout_url)
                again = open_link(browser, link.checkout_url)
            say(f"2. {buyer} opened it: order {order_id} (reloading gave {'the same' if again == order_id else again})")
            client.sandbox.simulate_payment(order_id)
            orders.append(client.payment_intents.retrieve(order_id))
        for order in orders:
            say(f"3. order {order.id}: {order.status}, {order.amount} {order.currency}, link {order.payment_link_id}")
        closed = client.payment_links.update(link.id, active=False)
        say(f"4. link deactivated (active={closed.active}): its page now says it takes no payments")
        return {"link": closed, "orders": orders}


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
            merchant = server.call(lambda p: create_merchant(p.engine, "Links shop"))
            _, key = server.call(lambda p: create_api_key(p.engine, merchant.id))
            yield server.url, key


def main() -> None:
    key = os.environ.get("X402MW_API_KEY")
    if key:
        run(platform_url(), key)
        return
    with embedded_platform() as (base_url, api_key):
        run(base_url, api_key)


if __name__ == "__main__":
    main()
