"""Reports and exports, runnable: two orders paid (in the sandbox) and one refunded, then the
revenue report by day and the top payers read through the typed client, and the payments exported
as CSV.

Against your platform, with a test key::

    X402MW_PLATFORM_URL=http://127.0.0.1:4402/v1 X402MW_API_KEY=sk_test_... python examples/reports.py

Without ``X402MW_API_KEY`` it starts an embedded platform (SQLite, in-process dev chain).
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from x402mw.client import MerchantClient


def platform_url() -> str:
    """The platform's API: ``X402MW_PLATFORM_URL`` (``X402MW_BASE_URL``, its former name, still works)."""
    return os.environ.get("X402MW_PLATFORM_URL") or os.environ.get("X402MW_BASE_URL") or "http://127.0.0.1:4402/v1"


def run(base_url: str, api_key: str, say: Callable[[str], None] = print) -> dict[str, Any]:
    say(f"0. platform {base_url}")
    with MerchantClient(api_key, base_url) as client:
        orders = []
        for amount in ("12.50", "3.00"):
            order = client.payment_intents.create(
                order_id=f"report-{uuid.uuid4().hex[:8]}", amount=amount, currency="USDC"
            )
            client.sandbox.simulate_payment(order.id)
            orders.append(order)
        refund = client.refunds.create(orders[1].id)
        say(f"1. paid {', '.join(str(o.amount) for o in orders)} USDC; refund {refund.id} {refund.status}")
        for _ in range(60):  # the refund completes once its transfer is confirmed
            if client.refunds.retrieve(refund.id).status != "processing":
                break
            time.sleep(0.5)
        today = datetime.now(UTC).date()
        report = client.reports.retrieve("revenue", start=today - timedelta(days=6), end=today + timedelta(days=1))
        for row in report.data:
            if row.payments or row.refunds:
                say(f"2. {row.period} {row.currency}: gross {row.gross}, refunded {row.refunded}, net {row.net}")
        top = client.reports.retrieve("top_payers", limit=3)
        for row in top.data:
            say(f"3. top payer {row.payer}: {row.amount} {row.currency} in {row.payments} payment(s)")
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.stream("GET", f"{base_url}/exports/payments.csv", headers=headers, timeout=60) as reply:
        reply.raise_for_status()
        lines = list(csv.DictReader(io.StringIO(reply.read().decode())))
    say(f"4. exported {len(lines)} payments as CSV: " + ", ".join(line["amount_received"] for line in lines))
    return {"report": report, "top": top, "exported": lines}


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
            merchant = server.call(lambda p: create_merchant(p.engine, "Reports shop"))
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
