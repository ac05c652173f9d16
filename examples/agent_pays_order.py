"""An agent pays a payment order over x402, runnable.

The merchant creates an order and hands its ``x402_url`` to an agent (instead of, or beside, the
``checkout_url`` a person would use). The agent pays it with `X402Auth` like any x402 resource: a
402 with the amount due, a signed EIP-3009 authorization, the platform relays it (the agent holds
the coin and no ETH), and the answer carries the order, now paid, and the signed receipt. A second
payment is refused before anything is signed.

Against your platform, with a test key::

    X402MW_PLATFORM_URL=http://127.0.0.1:4402/v1 X402MW_API_KEY=sk_test_... python examples/agent_pays_order.py

Without ``X402MW_API_KEY`` it starts an embedded platform (SQLite, in-process dev chain).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from x402mw.client import MerchantClient, Wallet, X402Auth
from x402mw.evm.keys import new_private_key
from x402mw.protocol import decode_payment_required


def platform_url() -> str:
    """The platform's API: ``X402MW_PLATFORM_URL`` (``X402MW_BASE_URL``, its former name, still works)."""
    return os.environ.get("X402MW_PLATFORM_URL") or os.environ.get("X402MW_BASE_URL") or "http://127.0.0.1:4402/v1"


def run(base_url: str, api_key: str, say: Callable[[str], None] = print) -> dict[str, Any]:
    agent = Wallet(new_private_key())
    with MerchantClient(api_key, base_url) as client:
        order = client.payment_intents.create(order_id=f"agent-{uuid.uuid4().hex[:8]}", amount="0.50", currency="USDC")
        say(f"1. order {order.id} for {order.amount} {order.currency}; agents pay it at {order.x402_url}")
        offer = decode_payment_required(httpx.get(str(order.x402_url), timeout=60).headers["PAYMENT-REQUIRED"])
        network = offer.accepts[0].network
        client.sandbox.faucet(network=network, currency="USDC", address=agent.address, amount="0.50")  # no ETH
        say(f"2. the order asks {offer.accepts[0].amount} minor units on {network}; the agent holds 0.50 USDC")
        signer = httpx.get(f"{base_url}/health", timeout=60).json()["receiptSigner"]  # the platform's receipt key
        auth = X402Auth(agent, max_amount="1.00", receipt_signer=signer)
        with httpx.Client(auth=auth, timeout=60) as http:
            paid = http.get(str(order.x402_url))
            receipt = auth.payments[-1]
            say(f"3. paid: {paid.status_code}, order {paid.json()['status']}, tx {receipt.transaction}")
            say(f"   the receipt is signed by the platform: {receipt.verified}")
            again = http.get(str(order.x402_url))
            say(f"4. paying again: {again.status_code} {again.json()['error']['code']} (nothing signed)")
        seen = client.payment_intents.retrieve(order.id)
        say(f"5. the merchant sees {seen.status}, paid by {seen.payer}")
        return {"order": seen, "paid": paid, "again": again, "payments": list(auth.payments)}


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
            merchant = server.call(lambda p: create_merchant(p.engine, "Agent shop"))
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
