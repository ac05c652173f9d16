"""The reports equal the same figures computed by direct SQL aggregates over the raw rows, on
SQLite and PostgreSQL, for random payments (agent settlements and orders), refunds, subscriptions
and challenges, including payments settled days after they were made and refunds on later days.

The rows are written as the platform writes them: challenges through `record_challenges`, events
through the transactional outbox (`insert_events`) with the data the services build, so that the
rollups are updated by the real hooks in the same transactions."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy import and_, case, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from tests.harness import postgres_database
from x402mw.platform.db import tables
from x402mw.platform.db.engine import create_engine_for
from x402mw.platform.db.models import AgentPayment, new_id
from x402mw.platform.db.schema import migrate
from x402mw.platform.objects.agents import AgentPaymentEnvelope
from x402mw.platform.objects.payments import RefundEnvelope
from x402mw.platform.services.challenges import record_challenges
from x402mw.platform.services.outbox import event_row, insert_events
from x402mw.platform.services.payment_intents import payment_intent_event_data
from x402mw.platform.services.refunds import refund_of
from x402mw.platform.services.reports import ReportQuery, export_csv, periods, run_report
from x402mw.platform.services.settlement.outcomes import payment_of
from x402mw.platform.services.settlement.writes import SettlementWrites
from x402mw.platform.services.subscriptions.objects import subscription_event

pytestmark = pytest.mark.anyio
T0 = datetime(2026, 3, 1, tzinfo=UTC)
BASE = "http://checkout.test"
COINS = ("USDC", "EURC")
PAYERS = [f"0x{n:040x}" for n in range(1, 6)]
INTERVALS = ("weekly", "monthly", "quarterly", "yearly")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('reports') / 'reports.sqlite3'}"
        migrate(url)
        yield url
    else:
        with postgres_database() as url:
            migrate(url)
            yield url


hours = st.integers(min_value=0, max_value=24 * 20)
delays = st.integers(min_value=0, max_value=24 * 4)
amounts = st.integers(min_value=1, max_value=10**9)
agent_payments = st.lists(
    st.tuples(st.integers(0, 1), st.booleans(), amounts, hours, delays, st.sampled_from(PAYERS)), max_size=8
)
orders = st.lists(
    st.tuples(st.sampled_from(COINS), amounts, hours, st.sampled_from(PAYERS), st.none() | delays, st.booleans()),
    max_size=6,
)
challenges = st.lists(st.tuples(st.integers(0, 1), hours), max_size=8)
subscriptions = st.lists(
    st.tuples(st.sampled_from(INTERVALS), amounts, hours, st.none() | delays, st.sampled_from(("canceled", "expired"))),
    max_size=5,
)


async def _merchant(conn: AsyncConnection) -> tuple[str, list[str]]:
    merchant = new_id()
    await conn.execute(insert(tables.merchants).values(id=merchant, name="m", created_at=T0))
    endpoints = []
    for coin in COINS:
        endpoint = new_id()
        endpoints.append(endpoint)
        await conn.execute(
            insert(tables.agent_endpoints).values(
                id=endpoint, merchant_id=merchant, livemode=False, name=coin, resource_url="https://x.test/r",
                chain_id=31337, currency=coin, payout_address=PAYERS[0], payout_history=[], pricing_mode="fixed",
                amount_minor=1, created_at=T0, updated_at=T0,
            )
        )  # fmt: skip
    return merchant, endpoints


def _events(conn: AsyncConnection, rows: list[dict[str, Any]]) -> Any:
    return conn.run_sync(insert_events, rows)


async def _challenges(
    conn: AsyncConnection, merchant: str, endpoints: list[str], given: list[Any]
) -> list[tuple[str, int]]:
    ids = []
    rows = []
    for n, (endpoint, hour) in enumerate(given):
        ident = f"ch_{merchant}_{n}"
        ids.append((ident, endpoint))
        rows.append(
            {
                "id": ident, "merchant_id": merchant, "endpoint_id": endpoints[endpoint], "livemode": False,
                "network": "eip155:31337", "asset": PAYERS[1], "pay_to": PAYERS[0], "amount_minor": 1,
                "resource": "", "expires_at": T0 + timedelta(hours=hour + 1),
                "created_at": T0 + timedelta(hours=hour, minutes=17),
            }
        )  # fmt: skip
    await record_challenges(conn, rows)
    await record_challenges(conn, rows[:1])  # recorded again: counted once
    return ids


async def _agent_payments(
    conn: AsyncConnection, merchant: str, endpoints: list[str], challenge_ids: list[tuple[str, int]], given: list[Any]
) -> None:
    used: set[str] = set()
    for n, (endpoint, answers, amount, hour, delay, payer) in enumerate(given):
        mine = [c for c, e in challenge_ids if e == endpoint and c not in used]
        challenge = mine[0] if answers and mine else None  # the payment answers one of its endpoint's
        if challenge:
            used.add(challenge)
        created = T0 + timedelta(hours=hour, minutes=40, seconds=n)
        settled = created + timedelta(hours=delay, seconds=n * 7)  # late settlement: another day
        row = AgentPayment(
            id=new_id(), merchant_id=merchant, endpoint_id=endpoints[endpoint], challenge_id=challenge,
            chain_id=31337, asset=PAYERS[1], currency=COINS[endpoint], payer=payer.upper().replace("0X", "0x"),
            nonce="0x" + uuid4().hex * 2, pay_to=PAYERS[0], amount_minor=amount, payload_hash="0" * 64,
            status="settled", transaction="0x" + "ab" * 32, created_at=created, settled_at=settled,
        )  # fmt: skip
        values = row.model_dump()
        await conn.execute(insert(tables.agent_payments).values(values))
        if challenge:
            await conn.execute(
                update(tables.agent_challenges)
                .where(tables.agent_challenges.c.id == challenge)
                .values(payment_id=row.id)
            )
        data = AgentPaymentEnvelope(agent_payment=payment_of(row)).model_dump(mode="json")
        await _events(
            conn, [event_row(merchant_id=merchant, livemode=False, type="agent_payment.settled", data=data, at=settled)]
        )


async def _order(
    conn: AsyncConnection, merchant: str, coin: str, amount: int, paid_at: datetime, payer: str
) -> dict[str, Any]:
    row = {
        "id": new_id(), "merchant_id": merchant, "livemode": False, "order_id": new_id(), "status": "succeeded",
        "amount_minor": amount, "amount_received_minor": amount, "currency": coin, "accepted_currencies": [coin],
        "payment_methods": {"wallet": True, "transfer": False, "transferDefaultOpen": False},
        "order_metadata": {}, "exceptions": [], "paid_at": paid_at, "chain_id": 31337,
        "paid_currency": coin, "payer": payer, "tx_hash": "0x" + "cd" * 32,
        "created_at": paid_at - timedelta(minutes=5), "updated_at": paid_at,
    }  # fmt: skip
    await conn.execute(insert(tables.payment_intents).values(row))
    order = (
        (await conn.execute(select(tables.payment_intents).where(tables.payment_intents.c.id == row["id"])))
        .mappings()
        .one()
    )
    data = payment_intent_event_data(order, BASE)
    await _events(
        conn, [event_row(merchant_id=merchant, livemode=False, type="payment_intent.succeeded", data=data, at=paid_at)]
    )
    return dict(order)


async def _orders(conn: AsyncConnection, merchant: str, given: list[Any]) -> None:
    for n, (coin, amount, hour, payer, refund_delay, refund_fails) in enumerate(given):
        paid_at = T0 + timedelta(hours=hour, minutes=50, seconds=n)
        order = await _order(conn, merchant, coin, amount, paid_at, payer)
        if refund_delay is None:
            continue
        at = paid_at + timedelta(hours=refund_delay, minutes=3)  # a refund days later
        status = "failed" if refund_fails else "completed"
        refund = {
            "id": new_id(), "merchant_id": merchant, "livemode": False, "payment_intent_id": order["id"],
            "hold": None if refund_fails else order["id"], "chain_id": 31337, "currency": coin, "token": PAYERS[1],
            "amount_minor": amount, "destination": payer, "status": status, "created_at": at, "updated_at": at,
            "completed_at": None if refund_fails else at, "failure_reason": "reverted" if refund_fails else None,
        }  # fmt: skip
        await conn.execute(insert(tables.refunds).values(refund))
        stored = (
            (await conn.execute(select(tables.refunds).where(tables.refunds.c.id == refund["id"]))).mappings().one()
        )
        data = RefundEnvelope(refund=refund_of(stored)).model_dump(mode="json")
        await _events(
            conn, [event_row(merchant_id=merchant, livemode=False, type=f"refund.{status}", data=data, at=at)]
        )


async def _subscriptions(conn: AsyncConnection, merchant: str, given: list[Any]) -> None:
    for n, (interval, amount, hour, ends_after, how) in enumerate(given):
        plan = new_id()
        coin = COINS[n % 2]
        await conn.execute(
            insert(tables.subscription_plans).values(
                id=plan, merchant_id=merchant, livemode=False, name="p", amount_minor=amount, currency=coin,
                interval=interval, created_at=T0, updated_at=T0,
            )
        )  # fmt: skip
        paid_at = T0 + timedelta(hours=hour, minutes=30)
        order = await _order(conn, merchant, coin, amount, paid_at, PAYERS[n % len(PAYERS)])
        sub = {
            "id": new_id(), "merchant_id": merchant, "livemode": False, "plan_id": plan,
            "merchant_customer_id": f"c{n}",
            "customer_email": None, "status": "active", "cancel_at_period_end": False, "periods_paid": 1,
            "current_period_start": paid_at, "current_period_end": paid_at + timedelta(days=7), "open_invoice_id": None,
            "past_due_at": None, "canceled_at": None, "ended_at": None, "test_clock_id": None,
            "created_at": paid_at - timedelta(minutes=9), "updated_at": paid_at,
        }  # fmt: skip
        invoice = {
            "id": new_id(), "subscription_id": sub["id"], "merchant_id": merchant, "livemode": False, "period": 1,
            "status": "paid", "amount_minor": amount, "currency": coin, "payment_intent_id": order["id"],
            "period_start": paid_at, "period_end": sub["current_period_end"], "paid_at": paid_at,
            "voided_at": None, "created_at": sub["created_at"], "updated_at": paid_at,
        }  # fmt: skip
        await conn.execute(insert(tables.subscriptions).values(sub))
        await conn.execute(insert(tables.subscription_invoices).values(invoice))
        await _events(conn, [subscription_event("created", sub, invoice, None, BASE, paid_at)])
        if ends_after is not None:
            ended = paid_at + timedelta(hours=ends_after, minutes=1)
            sub = {**sub, "status": how, "ended_at": ended, "canceled_at": ended if how == "canceled" else None}
            await conn.execute(
                update(tables.subscriptions)
                .where(tables.subscriptions.c.id == sub["id"])
                .values(status=how, ended_at=ended, canceled_at=sub["canceled_at"])
            )
            await _events(conn, [subscription_event(how, sub, None, None, BASE, ended)])


def _bounds(q: ReportQuery) -> list[tuple[Any, datetime, datetime]]:
    starts = periods(q)
    out = []
    for n, day in enumerate(starts):
        lo = datetime(day.year, day.month, day.day, tzinfo=q.tz)
        if n + 1 < len(starts):
            nxt = starts[n + 1]
            hi = datetime(nxt.year, nxt.month, nxt.day, tzinfo=q.tz)
        else:
            hi = q.end
        out.append((day, max(lo, q.start), hi))
    return out


async def _direct_revenue(
    conn: AsyncConnection, q: ReportQuery, coin: str, lo: datetime, hi: datetime
) -> tuple[int, int]:
    p, t, r = tables.agent_payments, tables.payment_intents, tables.refunds
    mine = (p.c.merchant_id == q.merchant_id, p.c.livemode == q.livemode)
    agents = await conn.scalar(
        select(func.coalesce(func.sum(p.c.amount_minor), 0)).where(
            *mine, p.c.status == "settled", p.c.currency == coin, p.c.settled_at >= lo, p.c.settled_at < hi
        )
    )
    paid = await conn.scalar(
        select(func.coalesce(func.sum(t.c.amount_received_minor), 0)).where(
            t.c.merchant_id == q.merchant_id, t.c.paid_at.is_not(None), t.c.paid_currency == coin,
            t.c.paid_at >= lo, t.c.paid_at < hi,
        )
    )  # fmt: skip
    refunded = await conn.scalar(
        select(func.coalesce(func.sum(r.c.amount_minor), 0)).where(
            r.c.merchant_id == q.merchant_id, r.c.status == "completed", r.c.currency == coin,
            r.c.completed_at >= lo, r.c.completed_at < hi,
        )
    )  # fmt: skip
    return int(agents) + int(paid), int(refunded)


def _monthly_sql(plans: Any) -> Any:
    return case(
        (plans.c.interval == "weekly", plans.c.amount_minor * 52 // 12),
        (plans.c.interval == "quarterly", plans.c.amount_minor // 3),
        (plans.c.interval == "yearly", plans.c.amount_minor // 12),
        else_=plans.c.amount_minor,
    )


async def _direct_subscriptions(
    conn: AsyncConnection, q: ReportQuery, coin: str, lo: datetime, hi: datetime
) -> dict[str, int]:
    s, i, plans = tables.subscriptions, tables.subscription_invoices, tables.subscription_plans
    joined = s.join(i, and_(i.c.subscription_id == s.c.id, i.c.period == 1)).join(plans, plans.c.id == s.c.plan_id)
    mine = (s.c.merchant_id == q.merchant_id, plans.c.currency == coin, i.c.status == "paid")
    new = await conn.scalar(select(func.count()).select_from(joined).where(*mine, i.c.paid_at >= lo, i.c.paid_at < hi))
    churned = await conn.scalar(
        select(func.count()).select_from(joined).where(*mine, s.c.ended_at >= lo, s.c.ended_at < hi)
    )
    alive = (*mine, i.c.paid_at < hi, (s.c.ended_at.is_(None)) | (s.c.ended_at >= hi))
    active, mrr = (
        await conn.execute(
            select(func.count(), func.coalesce(func.sum(_monthly_sql(plans)), 0)).select_from(joined).where(*alive)
        )
    ).one()
    return {"new": int(new or 0), "churned": int(churned or 0), "active": int(active), "mrr": int(mrr)}


async def _direct_conversion(
    conn: AsyncConnection, q: ReportQuery, lo: datetime, hi: datetime
) -> dict[str, tuple[int, int]]:
    c, p = tables.agent_challenges, tables.agent_payments
    query = (
        select(c.c.endpoint_id, func.count(c.c.id), func.count(p.c.id))
        .select_from(c.outerjoin(p, and_(p.c.id == c.c.payment_id, p.c.status == "settled")))
        .where(c.c.merchant_id == q.merchant_id, c.c.created_at >= lo, c.c.created_at < hi)
        .group_by(c.c.endpoint_id)
    )
    return {str(e): (int(n), int(paid)) for e, n, paid in await conn.execute(query)}


async def _direct_top_payers(conn: AsyncConnection, q: ReportQuery) -> list[tuple[str, str, int, int]]:
    p, t = tables.agent_payments, tables.payment_intents
    totals: dict[tuple[str, str], list[int]] = {}
    agents = (
        select(func.lower(p.c.payer), p.c.currency, func.sum(p.c.amount_minor), func.count())
        .where(
            p.c.merchant_id == q.merchant_id, p.c.status == "settled", p.c.settled_at >= q.start, p.c.settled_at < q.end
        )
        .group_by(func.lower(p.c.payer), p.c.currency)
    )
    orders = (
        select(func.lower(t.c.payer), t.c.paid_currency, func.sum(t.c.amount_received_minor), func.count())
        .where(t.c.merchant_id == q.merchant_id, t.c.paid_at >= q.start, t.c.paid_at < q.end)
        .group_by(func.lower(t.c.payer), t.c.paid_currency)
    )
    for query in (agents, orders):
        for payer, coin, amount, n in await conn.execute(query):
            cell = totals.setdefault((payer, coin), [0, 0])
            cell[0] += int(amount)
            cell[1] += int(n)
    return sorted(((k[0], k[1], v[0], v[1]) for k, v in totals.items()), key=lambda x: (-x[2], x[0], x[1]))


async def _check(engine: AsyncEngine, q: ReportQuery) -> None:
    revenue = await run_report(engine, "revenue", q)
    conversion = await run_report(engine, "conversion", q)
    subscriptions = await run_report(engine, "subscriptions", q)
    failures = await run_report(engine, "failures", q)
    payers = await run_report(engine, "top_payers", q)
    async with engine.connect() as conn:
        for day, lo, hi in _bounds(q):
            for coin in COINS:
                gross, refunded = await _direct_revenue(conn, q, coin, lo, hi)
                got = [row for row in revenue if row["period"] == day and row["currency"] == coin]
                figures = (got[0]["gross"], got[0]["refunded"], got[0]["net"]) if got else (0, 0, 0)
                assert figures == (gross, refunded, gross - refunded), (day, coin)
                subs = [
                    {k: row[k] for k in ("new", "churned", "active", "mrr")}
                    for row in subscriptions
                    if row["period"] == day and row["currency"] == coin
                ]
                want = await _direct_subscriptions(conn, q, coin, lo, hi)
                assert (subs[0] if subs else {"new": 0, "churned": 0, "active": 0, "mrr": 0}) == want, (day, coin)
            direct = await _direct_conversion(conn, q, lo, hi)
            got_conv = {row["endpoint"]: (row["issued"], row["paid"]) for row in conversion if row["period"] == day}
            assert got_conv == direct, day
            r = tables.refunds
            failed = await conn.scalar(
                select(func.count()).where(
                    r.c.merchant_id == q.merchant_id, r.c.status == "failed", r.c.created_at >= lo, r.c.created_at < hi
                )
            )
            got_failed = sum(
                row["count"] for row in failures if row["period"] == day and row["reason"] == "refund_failed"
            )
            assert got_failed == failed, day
        want_payers = await _direct_top_payers(conn, q)
    assert [(p["payer"], p["currency"], p["amount"], p["payments"]) for p in payers] == want_payers[: q.limit]


@settings(
    max_examples=20,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    agent_payments=agent_payments,
    orders=orders,
    challenges=challenges,
    subscriptions=subscriptions,
    group=st.sampled_from(("day", "week", "month")),
    zone=st.sampled_from(("UTC", "Asia/Tokyo", "America/New_York")),
)
def test_reports_equal_direct_aggregates(
    database_url: str,
    agent_payments: list[Any],
    orders: list[Any],
    challenges: list[Any],
    subscriptions: list[Any],
    group: Any,
    zone: str,
) -> None:
    async def run() -> None:
        engine = create_engine_for(database_url, pool_size=2)
        try:
            async with engine.begin() as conn:
                merchant, endpoints = await _merchant(conn)
                challenge_ids = await _challenges(conn, merchant, endpoints, challenges)
                await _agent_payments(conn, merchant, endpoints, challenge_ids, agent_payments)
                await _orders(conn, merchant, orders)
                await _subscriptions(conn, merchant, subscriptions)
            tz = ZoneInfo(zone)
            start = datetime(2026, 3, 1, tzinfo=tz)
            q = ReportQuery(merchant, False, start, start + timedelta(days=40), group=group, tz=tz, limit=100)
            await _check(engine, q)
            # a window that starts mid-range: what came before counts toward the active subscriptions
            later = start + timedelta(days=9)
            await _check(
                engine, ReportQuery(merchant, False, later, later + timedelta(days=10), group=group, tz=tz, limit=3)
            )
        finally:
            await engine.dispose()

    asyncio.run(run())


def test_nothing_outside_the_range_or_another_mode(database_url: str) -> None:
    async def run() -> None:
        engine = create_engine_for(database_url, pool_size=2)
        try:
            async with engine.begin() as conn:
                merchant, _ = await _merchant(conn)
                await _order(conn, merchant, "USDC", 5_000_000, T0 + timedelta(days=2, hours=3), PAYERS[2])
            q = ReportQuery(merchant, True, T0, T0 + timedelta(days=5))
            assert all(row["gross"] == 0 for row in await run_report(engine, "revenue", q))
            q = ReportQuery(merchant, False, T0, T0 + timedelta(days=2))
            assert all(row["gross"] == 0 for row in await run_report(engine, "revenue", q))
            q = ReportQuery(merchant, False, T0, T0 + timedelta(days=5))
            assert sum(row["gross"] for row in await run_report(engine, "revenue", q)) == 5_000_000
        finally:
            await engine.dispose()

    asyncio.run(run())


def test_a_large_export_streams_in_bounded_memory(tmp_path: Path) -> None:
    """An export of 10,000 orders holds them all, and the peak memory traced while streaming it is
    about that of an export of 2,000 (pages of 1,000 rows are read and written out one at a time):
    memory does not grow with the range."""
    url = f"sqlite:///{tmp_path / 'export.sqlite3'}"
    migrate(url)

    async def export(engine: AsyncEngine, merchant: str) -> tuple[int, int, bytes, int]:
        tracemalloc.start()
        size = lines = 0
        last = b""
        async for chunk in export_csv(engine, "payments", merchant, False, T0, T0 + timedelta(days=1)):
            size += len(chunk)
            lines += chunk.count(b"\n")
            last = chunk
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return size, lines, last, peak

    async def run() -> list[tuple[int, int, bytes, int]]:
        engine = create_engine_for(url, pool_size=2)
        results = []
        try:
            for count in (2_000, 10_000):
                async with engine.begin() as conn:
                    merchant, _ = await _merchant(conn)
                    rows = [
                        {
                            "id": new_id(),
                            "merchant_id": merchant,
                            "livemode": False,
                            "order_id": f"order-{n}",
                            "status": "succeeded",
                            "amount_minor": 1_000_001 + n,
                            "amount_received_minor": 1_000_001 + n,
                            "currency": "USDC",
                            "accepted_currencies": ["USDC"],
                            "payment_methods": {},
                            "order_metadata": {"note": "x" * 200},
                            "exceptions": [],
                            "created_at": T0 + timedelta(seconds=n),
                            "updated_at": T0,
                        }
                        for n in range(count)
                    ]
                    await conn.execute(insert(tables.payment_intents), rows)
                await export(engine, merchant)  # caches warmed
                results.append(await export(engine, merchant))
        finally:
            await engine.dispose()
        return results

    (small_size, small_lines, _, small_peak), (size, lines, last, peak) = asyncio.run(run())
    assert (small_lines, lines) == (2_001, 10_001)
    assert b",1010000,1.01," in last  # the last order: base units, then a decimal string
    assert size > 4 * small_size
    assert peak < 1.5 * small_peak, (peak, small_peak)


def test_agent_payment_failures_are_counted_once_by_reason(database_url: str) -> None:
    """Failures written by the settlement's own writes (`SettlementWrites.failed`), one of them
    written twice (a retry of the record): each counted once, by reason, on the day the payment was
    made, as a direct count over the payments says."""

    async def run() -> None:
        engine = create_engine_for(database_url, pool_size=2)
        writes = SettlementWrites(engine)
        try:
            async with engine.begin() as conn:
                merchant, endpoints = await _merchant(conn)
                ids = []
                for n, hours in enumerate((1, 2, 30, 50)):
                    row = AgentPayment(
                        id=new_id(), merchant_id=merchant, endpoint_id=endpoints[0], chain_id=31337,
                        asset=PAYERS[1], currency="USDC", payer=PAYERS[2], nonce="0x" + uuid4().hex * 2,
                        pay_to=PAYERS[0], amount_minor=1000 + n, payload_hash="0" * 64, status="claimed",
                        created_at=T0 + timedelta(hours=hours),
                    )  # fmt: skip
                    await conn.execute(insert(tables.agent_payments).values(row.model_dump()))
                    ids.append(row.id)
            reasons = ["invalid_exact_evm_payload_signature", "insufficient_funds", "insufficient_funds", "nonce_used"]
            for payment_id, reason in zip(ids, reasons, strict=True):
                await writes.failed(payment_id, reason)
            await writes.failed(ids[1], "insufficient_funds")  # again: already failed, not counted again
            q = ReportQuery(merchant, False, T0, T0 + timedelta(days=4))
            got = {(r["period"].isoformat(), r["reason"]): r["count"] for r in await run_report(engine, "failures", q)}
            p = tables.agent_payments
            async with engine.connect() as conn:
                direct = {}
                for day, lo, hi in _bounds(q):
                    query = (
                        select(p.c.error_reason, func.count())
                        .where(
                            p.c.merchant_id == merchant,
                            p.c.status == "failed",
                            p.c.created_at >= lo,
                            p.c.created_at < hi,
                        )
                        .group_by(p.c.error_reason)
                    )
                    for reason, count in await conn.execute(query):
                        direct[(day.isoformat(), reason)] = count
            assert got == direct
            assert sum(got.values()) == 4
        finally:
            await writes.aclose()
            await engine.dispose()

    asyncio.run(run())
