"""The reports on PostgreSQL with many payments: each report's p50 and p99, read from the rollups,
beside the direct aggregate over the raw rows that computes the same figure, in the same run; and
the peak memory of CSV exports of a short and a ten-times-longer range.

The database is filled by ``INSERT ... SELECT FROM generate_series``: PAYMENTS settled agent
payments of one merchant over a year (10 endpoints, 2 coins, 5,000 payers) and SUBSCRIPTIONS
subscriptions on 20 plans (a fifth of them ended), with another merchant's rows beside them; the
rollups are then summed from those rows as the platform's writes would have kept them::

    python -m bench.bench_reports [PAYMENTS] [SUBSCRIPTIONS] [REQUESTS]   # defaults: 1000000 100000 200
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db.engine import create_engine_for
from x402mw.platform.db.schema import migrate
from x402mw.platform.services.reports import ReportQuery, export_csv, run_report

POSTGRES_URL = os.environ.get("X402MW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BUDGET_MS = 150.0
END = datetime(2026, 11, 1, tzinfo=UTC)
START = END - timedelta(days=365)

_FILL = [
    "SET TIME ZONE 'UTC'",  # the rollups' hours and days are UTC ones
    """INSERT INTO merchants (id, name, created_at) VALUES (CAST(:merchant AS varchar), 'bench', now()),
        (CAST(:other AS varchar), 'other', now())""",
    """INSERT INTO agent_endpoints (id, merchant_id, livemode, name, resource_url, chain_id, currency,
        payout_address, payout_history, pricing_mode, amount_minor, release_policy, max_timeout_seconds,
        created_at, updated_at, discoverable)
    SELECT md5(CAST(:merchant AS varchar) || 'e' || i)::uuid::text, CAST(:merchant AS varchar), false,
        'e' || i, 'https://x.test/' || i, 8453,
        CASE WHEN i % 2 = 0 THEN 'USDC' ELSE 'EURC' END, '0x' || lpad('1', 40, '0'), '[]', 'fixed', 1000,
        'included', 300, now(), now(), false
    FROM generate_series(0, 9) AS i""",
    """INSERT INTO agent_payments (id, merchant_id, endpoint_id, livemode, chain_id, asset, currency, payer,
        nonce, pay_to, amount_minor, payload_hash, resource, release_policy, status, created_at, settled_at,
        scheme)
    SELECT md5(:salt || i::text)::uuid::text,
        CASE WHEN i % 20 = 0 THEN CAST(:other AS varchar) ELSE CAST(:merchant AS varchar) END,
        md5(CAST(:merchant AS varchar) || 'e' || (i % 10))::uuid::text, false, 8453, '0x' || lpad('2', 40, '0'),
        CASE WHEN i % 10 % 2 = 0 THEN 'USDC' ELSE 'EURC' END, '0x' || lpad(to_hex(i % 5000), 40, '0'),
        '0x' || md5(:salt || i::text) || md5(i::text), '0x' || lpad('1', 40, '0'), 1000 + (i % 997) * 10,
        md5(i::text), '', 'included', 'settled',
        CAST(:start AS timestamptz) + (i::double precision / CAST(:count AS integer)) * interval '365 days'
            - interval '2 seconds',
        CAST(:start AS timestamptz) + (i::double precision / CAST(:count AS integer)) * interval '365 days', 'exact'
    FROM generate_series(1, :count) AS i""",
    """INSERT INTO subscription_plans (id, merchant_id, livemode, name, amount_minor, currency, interval, active,
        created_at, updated_at)
    SELECT md5(CAST(:merchant AS varchar) || 'p' || i)::uuid::text, CAST(:merchant AS varchar), false,
        'p' || i, 5000000 + i * 1000000,
        CASE WHEN i % 2 = 0 THEN 'USDC' ELSE 'EURC' END,
        (ARRAY['weekly', 'monthly', 'quarterly', 'yearly'])[1 + i % 4], true, now(), now()
    FROM generate_series(0, 19) AS i""",
    """INSERT INTO subscriptions (id, merchant_id, livemode, plan_id, merchant_customer_id, customer_vouched,
        status, cancel_at_period_end, periods_paid, current_period_start, ended_at, created_at, updated_at)
    SELECT md5('s' || CAST(:salt AS varchar) || i::text)::uuid::text, CAST(:merchant AS varchar), false,
        md5(CAST(:merchant AS varchar) || 'p' || (i % 20))::uuid::text, 'c' || i,
        true, CASE WHEN i % 5 = 0 THEN 'canceled' ELSE 'active' END, false, 1,
        CAST(:start AS timestamptz) + (i::double precision / CAST(:subs AS integer)) * interval '300 days',
        CASE WHEN i % 5 = 0 THEN CAST(:start AS timestamptz)
            + (i::double precision / CAST(:subs AS integer)) * interval '300 days' + interval '40 days' END,
        CAST(:start AS timestamptz) + (i::double precision / CAST(:subs AS integer)) * interval '300 days', now()
    FROM generate_series(1, :subs) AS i""",
    # the rollups, as the writes of those rows would have kept them
    """INSERT INTO report_rollups (merchant_id, livemode, metric, hour, currency, dimension, amount_minor, count)
    SELECT merchant_id, livemode, 'gross', date_trunc('hour', settled_at), currency, endpoint_id,
        sum(amount_minor), count(*)
    FROM agent_payments GROUP BY 1, 2, 4, 5, 6""",
    """INSERT INTO report_rollups (merchant_id, livemode, metric, hour, currency, dimension, amount_minor, count)
    SELECT merchant_id, livemode, 'payer', date_trunc('hour', settled_at), currency, lower(payer),
        sum(amount_minor), count(*)
    FROM agent_payments GROUP BY 1, 2, 4, 5, 6""",
    """INSERT INTO report_rollups (merchant_id, livemode, metric, hour, currency, dimension, amount_minor, count)
    SELECT s.merchant_id, s.livemode, 'subscribed', date_trunc('hour', s.current_period_start), p.currency, p.id,
        sum(CASE p.interval WHEN 'weekly' THEN p.amount_minor * 52 / 12 WHEN 'quarterly' THEN p.amount_minor / 3
            WHEN 'yearly' THEN p.amount_minor / 12 ELSE p.amount_minor END), count(*)
    FROM subscriptions s JOIN subscription_plans p ON p.id = s.plan_id GROUP BY 1, 2, 4, 5, 6""",
    """INSERT INTO report_rollups (merchant_id, livemode, metric, hour, currency, dimension, amount_minor, count)
    SELECT s.merchant_id, s.livemode, 'churned', date_trunc('hour', s.ended_at), p.currency, p.id,
        sum(CASE p.interval WHEN 'weekly' THEN p.amount_minor * 52 / 12 WHEN 'quarterly' THEN p.amount_minor / 3
            WHEN 'yearly' THEN p.amount_minor / 12 ELSE p.amount_minor END), count(*)
    FROM subscriptions s JOIN subscription_plans p ON p.id = s.plan_id WHERE s.ended_at IS NOT NULL
    GROUP BY 1, 2, 4, 5, 6""",
    # and each figure again per UTC day
    """INSERT INTO report_rollups (merchant_id, livemode, metric, hour, currency, dimension, amount_minor, count)
    SELECT merchant_id, livemode, metric || chr(58) || 'd', date_trunc('day', hour), currency, dimension,
        sum(amount_minor), sum(count)
    FROM report_rollups GROUP BY 1, 2, 3, 4, 5, 6""",
    "ANALYZE",
]

_DIRECT = {
    "revenue": """SELECT date_trunc('day', settled_at AT TIME ZONE :tz), currency, sum(amount_minor), count(*)
        FROM agent_payments WHERE merchant_id = :merchant AND livemode = false AND status = 'settled'
        AND settled_at >= :start AND settled_at < :end GROUP BY 1, 2""",
    "top_payers": """SELECT lower(payer), currency, sum(amount_minor) AS total, count(*) FROM agent_payments
        WHERE merchant_id = :merchant AND livemode = false AND status = 'settled'
        AND settled_at >= :start AND settled_at < :end GROUP BY 1, 2 ORDER BY total DESC LIMIT 10""",
    "subscriptions": """SELECT date_trunc('month', s.current_period_start AT TIME ZONE :tz), p.currency, count(*),
        count(s.ended_at) FROM subscriptions s JOIN subscription_plans p ON p.id = s.plan_id
        WHERE s.merchant_id = :merchant AND s.livemode = false AND s.current_period_start < :end GROUP BY 1, 2""",
}


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def _time(action: Callable[[], Awaitable[object]], n: int) -> tuple[float, float]:
    for _ in range(5):
        await action()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await action()
        samples.append((time.perf_counter() - started) * 1000)
    return _percentiles(samples)


async def _export_peak(engine: AsyncEngine, merchant: str, days: int) -> tuple[int, int]:
    tracemalloc.start()
    size = 0
    async for chunk in export_csv(engine, "agent_settlements", merchant, False, END - timedelta(days=days), END):
        size += len(chunk)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return size, peak


async def _measure(
    url: str, count: int, subs: int, n: int
) -> tuple[list[tuple[str, Any, Any]], list[tuple[int, int, int]]]:
    engine = create_engine_for(url, pool_size=4)
    merchant, other = str(uuid.uuid4()), str(uuid.uuid4())
    try:
        params = {
            "merchant": merchant,
            "other": other,
            "salt": uuid.uuid4().hex,
            "start": START,
            "count": count,
            "subs": subs,
        }
        filled = time.perf_counter()
        async with engine.begin() as conn:
            for statement in _FILL:
                await conn.execute(text(statement), params)
        print(f"filled in {time.perf_counter() - filled:.1f} s")
        paris = ZoneInfo("Europe/Paris")
        month = ReportQuery(merchant, False, END - timedelta(days=30), END)
        year = ReportQuery(merchant, False, START, END, group="month", tz=paris)
        cases = [
            ("revenue 30 days by day", "revenue", month, "revenue", "UTC"),
            ("revenue a year by month", "revenue", year, "revenue", "Europe/Paris"),
            ("top_payers 30 days", "top_payers", month, "top_payers", "UTC"),
            ("subscriptions a year", "subscriptions", year, "subscriptions", "Europe/Paris"),
            ("conversion 30 days", "conversion", month, None, "UTC"),
            ("failures 30 days", "failures", month, None, "UTC"),
            ("settlement_latency 30 days", "settlement_latency", month, None, "UTC"),
        ]
        results = []
        for label, name, q, direct, tz in cases:

            async def ours(name: str = name, q: ReportQuery = q) -> None:
                await run_report(engine, name, q)

            mine = await _time(ours, n)
            bare = None
            if direct is not None:
                values = {"merchant": merchant, "start": q.start, "end": q.end, "tz": tz}

                async def baseline(sql: str = _DIRECT[direct], values: dict[str, object] = values) -> None:
                    async with engine.connect() as conn:
                        (await conn.execute(text(sql), values)).all()

                bare = await _time(baseline, max(5, n // 10))
            results.append((label, mine, bare))
        exports = []
        for days in (3, 30):
            size, peak = await _export_peak(engine, merchant, days)
            exports.append((days, size, peak))
        return results, exports
    finally:
        await engine.dispose()


def run(count: int = 1_000_000, subs: int = 100_000, n: int = 200) -> dict[str, float]:
    """Measure on a fresh PostgreSQL database and print the table; ``slowest_p99_ms`` is the highest
    p99 of a report."""
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"x402mw_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
        migrate(url)
        results, exports = asyncio.run(_measure(url, count, subs, n))
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"\nreports on PostgreSQL, {count:,} payments and {subs:,} subscriptions, {n} requests each (ms)")
    print(
        f"{'report':<28} {'p50':>8} {'p99':>8}   {'direct aggregate p50':>21} {'p99':>8} {'ratio p50':>10}"
        f"   ≤{BUDGET_MS:.0f} ms"
    )
    figures: dict[str, float] = {}
    for label, (p50, p99), bare in results:
        if bare is None:
            shown = f"{'—':>21} {'—':>8} {'—':>10}"
        else:
            shown = f"{bare[0]:>21.2f} {bare[1]:>8.2f} {bare[0] / p50:>9.1f}x"
            figures[f"{label}_direct_over_ours"] = bare[0] / p50
        print(f"{label:<28} {p50:>8.2f} {p99:>8.2f}   {shown}   {'yes' if p99 <= BUDGET_MS else 'NO'}")
    figures["slowest_p99_ms"] = max(p99 for _, (_, p99), _ in results)
    for days, size, peak in exports:
        print(
            f"export agent_settlements, {days} days: {size / 1e6:.1f} MB of CSV, peak traced memory {peak / 1e6:.2f} MB"
        )
        figures[f"export_{days}_days_peak_mb"] = peak / 1e6
    return figures


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    subs = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    figures = run(count, subs, n)
    sys.exit(0 if figures["slowest_p99_ms"] <= BUDGET_MS else 1)


if __name__ == "__main__":
    main()
