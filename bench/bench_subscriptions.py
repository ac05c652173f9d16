"""(f) The worker's subscription pass on PostgreSQL: 10,000 due subscriptions among 100,000, and a pass
with nothing due at 100,000 subscriptions against one at 1,000.

A fresh database holds 100,000 active subscriptions of one merchant (who has a webhook endpoint, so
that events are owed): 90,000 due in two weeks, and 10,000 due now, of every kind of action:

- 4,000 whose renewal opens (a renewal invoice, its payment order, ``payment_intent.created``, an email),
- 2,000 reminded (the invoice marked, an email),
- 2,000 whose period ends unpaid (``past_due``: ``subscription.past_due``, an email),
- 2,000 whose grace ends (``expired``: the invoice voided, its order cancelled with
  ``payment_intent.canceled``, ``subscription.expired``).

Ours: `RenewalRunner.run_due`, the worker's duty, until nothing is due; the bench then counts what it
wrote (every action's rows, and that nothing is left due). Target: <= 15 s here.

Then a pass with nothing due (the worker's every-2-seconds case), timed at 100,000 subscriptions and,
as the baseline, at 1,000 (a database of its own, built the same way): the pass reads the due index
only, so the two should be close. Target: within 2x. The median of 200 passes each::

    python -m bench.bench_subscriptions [TOTAL] [DUE]      # defaults: 100000 10000
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import create_engine, func, select

from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.engine import create_engine_for, sync_url
from x402mw.platform.db.models import new_id
from x402mw.platform.db.schema import migrate
from x402mw.platform.services.subscriptions.customer_links import CustomerLinks
from x402mw.platform.services.subscriptions.renewals import RenewalRunner
from x402mw.platform.services.subscriptions.steps import invoice_order_row, invoice_row

POSTGRES_URL = os.environ.get("X402MW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
TARGET_SECONDS, TARGET_RATIO = 15.0, 2.0
IDLE_PASSES = 200
BASE = "http://127.0.0.1:4402/checkout"
RETURN_URL = "https://shop.example.com/account"  # the plan's returnUrl: its invoices' orders lead back there
# Shares of the due subscriptions, by action.
MIX = {"open_renewal": 0.4, "remind": 0.2, "period_end": 0.2, "expire": 0.2}


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"x402mw_bench_subs_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _subscription(merchant_id: str, plan_id: str, n: int, now: datetime) -> dict[str, Any]:
    return {
        "id": new_id(),
        "merchant_id": merchant_id,
        "livemode": False,
        "plan_id": plan_id,
        "merchant_customer_id": f"cus_{n}",
        "customer_email": f"customer{n}@example.com",
        "open_key": f"cus_{n}",
        "status": "active",
        "cancel_at_period_end": False,
        "periods_paid": 1,
        "open_invoice_id": None,
        "past_due_at": None,
        "canceled_at": None,
        "ended_at": None,
        "test_clock_id": None,
        "created_at": now - timedelta(days=40),
        "updated_at": now - timedelta(days=40),
    }


def populate(url: str, total: int, due: int, now: datetime) -> None:
    """``total`` active subscriptions, ``due`` of them due at ``now`` in the shares of `MIX`."""
    engine = create_engine(sync_url(url))
    merchant_id, plan_id = new_id(), new_id()
    kinds = [kind for kind, share in MIX.items() for _ in range(round(due * share))]
    subs, invoices, orders = [], [], []
    with engine.begin() as conn:
        conn.execute(tables.merchants.insert(), {"id": merchant_id, "name": "Bench", "created_at": now})
        conn.execute(
            tables.webhook_endpoints.insert(),
            {
                "id": new_id(),
                "merchant_id": merchant_id,
                "livemode": False,
                "url": "https://hooks.example/x402",
                "enabled_events": ["*"],
                "status": "enabled",
                "secret": "whsec_bench",
                "previous_secrets": [],
                "created_at": now - timedelta(days=60),
                "updated_at": now - timedelta(days=60),
            },
        )
        conn.execute(
            tables.subscription_plans.insert(),
            {
                "id": plan_id,
                "merchant_id": merchant_id,
                "livemode": False,
                "name": "Pro",
                "amount_minor": 9_990_000,
                "currency": "USDC",
                "interval": "monthly",
                "active": True,
                "grace_days": None,
                "return_url": RETURN_URL,
                "created_at": now - timedelta(days=60),
                "updated_at": now - timedelta(days=60),
            },
        )
        for n in range(total):
            sub = _subscription(merchant_id, plan_id, n, now)
            kind = kinds[n] if n < len(kinds) else "future"
            end = {
                "future": now + timedelta(days=20),
                "open_renewal": now + timedelta(days=5),
                "remind": now + timedelta(hours=12),
                "period_end": now - timedelta(hours=1),
                "expire": now - timedelta(days=8),
            }[kind]
            start = end - timedelta(days=30)
            sub |= {"anchor_at": start, "current_period_start": start, "current_period_end": end}
            sub["next_action"], sub["due_at"] = {
                "future": ("open_renewal", end - timedelta(days=7)),
                "open_renewal": ("open_renewal", end - timedelta(days=7)),
                "remind": ("remind", end - timedelta(days=1)),
                "period_end": ("period_end", end),
                "expire": ("expire", end + timedelta(days=7)),
            }[kind]
            if kind == "expire":
                sub |= {"status": "past_due", "past_due_at": end}
            if kind in ("remind", "period_end", "expire"):
                invoice_id = new_id()
                order = invoice_order_row(
                    sub,
                    invoice_id=invoice_id,
                    period=2,
                    amount=9_990_000,
                    amount_text="9.99",
                    currency="USDC",
                    return_url=RETURN_URL,
                    at=now,
                )
                invoice = invoice_row(
                    sub, invoice_id=invoice_id, period=2, order=order, start=end, end=end + timedelta(days=30), at=now
                )
                if kind != "remind":
                    invoice["reminded_at"] = end - timedelta(days=1)
                sub["open_invoice_id"] = invoice_id
                orders.append(order)
                invoices.append(invoice)
            subs.append(sub)
        for start in range(0, len(subs), 5000):
            conn.execute(tables.subscriptions.insert(), subs[start : start + 5000])
        if orders:
            conn.execute(tables.payment_intents.insert(), orders)
            conn.execute(tables.subscription_invoices.insert(), invoices)
    with engine.connect() as conn:
        conn.exec_driver_sql("ANALYZE")
    engine.dispose()


async def _measure(url: str, now: datetime, *, idle_only: bool) -> dict[str, float]:
    engine = create_engine_for(url)
    runner = RenewalRunner(engine, Clock(), CustomerLinks(b"b" * 32, BASE), grace_days=7)
    result: dict[str, float] = {}
    try:
        started = time.perf_counter()
        result["actions"] = await runner.run_due(now=now)
        result["seconds"] = time.perf_counter() - started
        if not idle_only:
            result |= await _written(engine, now)
        for _ in range(20):  # warm-up: connections and prepared statements, as a running worker has them
            await runner.run_due(now=now)
        passes = []
        for _ in range(IDLE_PASSES):
            started = time.perf_counter()
            ran = await runner.run_due(now=now)
            passes.append(time.perf_counter() - started)
            assert ran == 0
        result["idle_ms"] = statistics.median(passes) * 1000
    finally:
        await engine.dispose()
    return result


async def _written(engine: Any, now: datetime) -> dict[str, float]:
    subs, invoices, intents = tables.subscriptions, tables.subscription_invoices, tables.payment_intents
    events, emails = tables.events, tables.subscription_emails
    async with engine.connect() as conn:

        async def count(query: Any) -> float:
            return float(await conn.scalar(query) or 0)

        return {
            "still_due": await count(select(func.count()).where(subs.c.test_clock_id.is_(None), subs.c.due_at <= now)),
            "renewal_invoices": await count(
                select(func.count())
                .select_from(invoices)
                .where(invoices.c.status == "open", invoices.c.reminded_at.is_(None))
            ),
            "orders": await count(
                select(func.count()).select_from(intents).where(intents.c.status == "requires_payment")
            ),
            "canceled_orders": await count(
                select(func.count()).select_from(intents).where(intents.c.status == "canceled")
            ),
            "past_due": await count(select(func.count()).where(subs.c.status == "past_due")),
            "expired": await count(select(func.count()).where(subs.c.status == "expired")),
            "events": await count(select(func.count()).select_from(events)),
            "emails": await count(select(func.count()).select_from(emails)),
        }


def run(total: int = 100_000, due: int = 10_000) -> dict[str, float]:
    now = datetime.now(UTC)
    small_total, small_due = total // 100, due // 100
    with fresh_database() as big, fresh_database() as small:
        started = time.perf_counter()
        for url, size, count in ((big, total, due), (small, small_total, small_due)):
            migrate(url)
            populate(url, size, count, now)
        loaded = time.perf_counter() - started
        ours = asyncio.run(_measure(big, now, idle_only=False))
        baseline = asyncio.run(_measure(small, now, idle_only=True))
    share = {kind: round(due * part) for kind, part in MIX.items()}
    ratio = ours["idle_ms"] / baseline["idle_ms"]
    print(f"bench_subscriptions: the worker's subscription pass on PostgreSQL (loaded in {loaded:.1f} s)")
    print(
        f"  {int(ours['actions']):,} due subscriptions among {total:,}: {ours['seconds']:.2f} s "
        f"({ours['actions'] / ours['seconds']:,.0f} actions/s; target <= {TARGET_SECONDS:.0f} s)"
    )
    print(
        f"    written: {int(ours['renewal_invoices']):,} renewal invoices, {int(ours['orders']):,} open payment "
        f"orders ({share['open_renewal']:,} new), {int(ours['past_due']):,} past_due, "
        f"{int(ours['expired']):,} expired with {int(ours['canceled_orders']):,} orders cancelled, "
        f"{int(ours['events']):,} events, "
        f"{int(ours['emails']):,} emails queued; {int(ours['still_due'])} still due"
    )
    print(
        f"  a pass with nothing due: {ours['idle_ms']:.2f} ms at {total:,} subscriptions, "
        f"{baseline['idle_ms']:.2f} ms at {small_total:,} (baseline): ratio {ratio:.2f} (target <= {TARGET_RATIO:.0f})"
    )
    expected_emails = share["open_renewal"] + share["remind"] + share["period_end"]
    assert ours["still_due"] == 0 and ours["emails"] == expected_emails, ours
    return {"seconds": ours["seconds"], "idle_ratio": ratio}


if __name__ == "__main__":
    args = [int(arg) for arg in sys.argv[1:3]]
    run(*args)
