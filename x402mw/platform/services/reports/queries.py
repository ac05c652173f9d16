"""The reports, read from the rollups (`x402mw.platform.services.reports.rollups`) only: a report
sums the hourly rows of its range with one indexed query and cuts them into periods (day, ISO week
from Monday, month) at the midnights of the asked time zone. It never reads the payments.

Amounts are integers in the coin's minor units (6 decimals); ``period`` is the first local day of
each period, every period of the range listed even when nothing happened in it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal, NamedTuple
from zoneinfo import ZoneInfo

from sqlalchemy import and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.services.reports import rollups as r

Group = Literal["day", "week", "month"]
GROUPS: tuple[Group, ...] = ("day", "week", "month")
REPORTS: tuple[str, ...] = ("revenue", "conversion", "failures", "subscriptions", "top_payers", "settlement_latency")
MAX_RANGE = timedelta(days=3 * 366)


@dataclass(frozen=True)
class ReportQuery:
    """What a report covers: ``start`` to ``end`` (exclusive, aware instants), in ``currency`` and
    ``dimension`` (an endpoint's or a plan's id) when set, cut into ``group`` periods in ``tz``."""

    merchant_id: str
    livemode: bool
    start: datetime
    end: datetime
    currency: str | None = None
    dimension: str | None = None
    group: Group = "day"
    tz: ZoneInfo = field(default_factory=lambda: ZoneInfo("UTC"))
    limit: int = 10


def period_start(day: date, group: Group) -> date:
    if group == "week":
        return day - timedelta(days=day.weekday())
    if group == "month":
        return day.replace(day=1)
    return day


def _next(day: date, group: Group) -> date:
    if group == "week":
        return day + timedelta(days=7)
    if group == "month":
        return (day.replace(day=28) + timedelta(days=4)).replace(day=1)
    return day + timedelta(days=1)


def periods(q: ReportQuery) -> list[date]:
    """Every period the range touches, in order."""
    first = period_start(q.start.astimezone(q.tz).date(), q.group)
    last = (q.end - timedelta(microseconds=1)).astimezone(q.tz).date()
    out = []
    day = first
    while day <= last:
        out.append(day)
        day = _next(day, q.group)
    return out


def _period_of(q: ReportQuery, hour: datetime) -> date:
    return period_start(hour.astimezone(q.tz).date(), q.group)


class Sum(NamedTuple):
    metric: str
    currency: str
    hour: datetime  # the start of the UTC hour, or of the UTC day, summed
    dimension: str
    amount: int
    n: int  # rows summed (payments, challenges, ...)


Span = tuple[datetime, datetime]


def _utc_day(at: datetime, *, up: bool) -> datetime:
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day + timedelta(days=1) if up and day < at else day


def _merge(spans: list[Span]) -> list[Span]:
    out: list[Span] = []
    for lo, hi in spans:
        if lo >= hi:
            continue
        if out and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def spans(q: ReportQuery) -> tuple[list[Span], list[Span]]:
    """What to read the range from: whole UTC days inside a single period (from the day rows), and
    the hours left at each period's edges (from the hour rows). A period starts at a local
    midnight, which is a UTC hour in a whole-hour zone: the sums are exact."""
    days: list[Span] = []
    hours: list[Span] = []
    starts = periods(q)
    for n, day in enumerate(starts):
        lo = max(datetime(day.year, day.month, day.day, tzinfo=q.tz), q.start).astimezone(UTC)
        if n + 1 < len(starts):
            nxt = starts[n + 1]
            hi = min(datetime(nxt.year, nxt.month, nxt.day, tzinfo=q.tz), q.end).astimezone(UTC)
        else:
            hi = q.end.astimezone(UTC)
        first, last = _utc_day(lo, up=True), _utc_day(hi, up=False)
        if first < last:
            hours += [(r.hour_of(lo), first), (last, hi)]
            days.append((first, last))
        else:
            hours.append((r.hour_of(lo), hi))
    return _merge(days), _merge(hours)


def _within(column: Any, ranges: list[Span]) -> Any:
    return or_(*(and_(column >= lo, column < hi) for lo, hi in ranges))


async def _sums(
    engine: AsyncEngine, q: ReportQuery, metrics: Sequence[str], *, by_dimension: bool, by_hour: bool = True
) -> list[Sum]:
    """The rollups of ``metrics`` over the range, summed per (metric, coin, hour or day[, dimension])
    (per (metric, coin[, dimension]) without ``by_hour``): day rows where a whole UTC day lies in
    one period, hour rows at the periods' edges."""
    t = tables.report_rollups
    days, hours = spans(q)
    out: list[Sum] = []
    async with engine.connect() as conn:
        for level, ranges, names in ((r.DAY, days, [m + r.DAY for m in metrics]), ("", hours, list(metrics))):
            if not ranges:
                continue
            keys: list[Any] = [t.c.metric, t.c.currency]
            if by_hour:
                keys.append(t.c.hour)
            if by_dimension:
                keys.append(t.c.dimension)
            where = [t.c.merchant_id == q.merchant_id, t.c.livemode == q.livemode, t.c.metric.in_(names)]
            where.append(_within(t.c.hour, ranges))
            if q.currency:
                where.append(t.c.currency == q.currency)
            if q.dimension:
                where.append(t.c.dimension == q.dimension)
            query = select(*keys, func.sum(t.c.amount_minor), func.sum(t.c.count)).where(*where).group_by(*keys)
            for row in await conn.execute(query):
                values = dict(row._mapping)
                out.append(
                    Sum(
                        metric=str(values["metric"]).removesuffix(level) if level else str(values["metric"]),
                        currency=str(values["currency"]),
                        hour=values.get("hour") or q.start,
                        dimension=str(values.get("dimension") or ""),
                        amount=int(row[-2]),
                        n=int(row[-1]),
                    )
                )
    return out


def _row_period(q: ReportQuery, row: Sum) -> date:
    return _period_of(q, row.hour)


async def revenue(engine: AsyncEngine, q: ReportQuery) -> list[dict[str, Any]]:
    """Per period and coin: ``gross`` paid, ``refunded``, ``net`` (gross less refunds, each on its
    own day), ``payments`` and ``refunds`` counted."""
    cells: dict[tuple[date, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    coins: set[str] = {q.currency} if q.currency else set()
    for row in await _sums(engine, q, (r.GROSS, r.REFUNDED), by_dimension=False):
        coins.add(row.currency)
        cell = cells[(_row_period(q, row), row.currency)]
        offset = 0 if row.metric == r.GROSS else 1
        cell[offset] += row.amount
        cell[offset + 2] += row.n
    out = []
    for period in periods(q):
        for coin in sorted(coins) or [""]:  # "": nothing was paid in the range, in no coin
            gross, refunded, payments, refunds = cells.get((period, coin), [0, 0, 0, 0])
            out.append(
                {
                    "period": period,
                    "currency": coin,
                    "gross": gross,
                    "refunded": refunded,
                    "net": gross - refunded,
                    "payments": payments,
                    "refunds": refunds,
                }
            )
    return out


async def conversion(engine: AsyncEngine, q: ReportQuery) -> list[dict[str, Any]]:
    """Per period and endpoint: 402 challenges ``issued`` and ``paid`` (counted on the day the
    challenge was issued, however late it was paid)."""
    cells: dict[tuple[date, str], list[int]] = defaultdict(lambda: [0, 0])
    for row in await _sums(engine, q, (r.CHALLENGED, r.CHALLENGE_PAID), by_dimension=True):
        cells[(_row_period(q, row), row.dimension)][0 if row.metric == r.CHALLENGED else 1] += row.n
    return [
        {"period": period, "endpoint": endpoint, "issued": issued, "paid": paid}
        for (period, endpoint), (issued, paid) in sorted(cells.items())
    ]


async def failures(engine: AsyncEngine, q: ReportQuery) -> list[dict[str, Any]]:
    """Per period and reason: failures counted and the amounts they were for."""
    cells: dict[tuple[date, str], list[int]] = defaultdict(lambda: [0, 0])
    for row in await _sums(engine, q, (r.FAILED,), by_dimension=True):
        cell = cells[(_row_period(q, row), row.dimension)]
        cell[0] += row.n
        cell[1] += row.amount
    return [
        {"period": period, "reason": reason, "count": count, "amount": amount}
        for (period, reason), (count, amount) in sorted(cells.items())
    ]


async def subscriptions(engine: AsyncEngine, q: ReportQuery) -> list[dict[str, Any]]:
    """Per period and coin: subscriptions ``new`` and ``churned``, and at the period's end those
    ``active`` and the ``mrr`` (their plans' prices per month)."""
    t = tables.report_rollups
    where = [
        t.c.merchant_id == q.merchant_id,
        t.c.livemode == q.livemode,
    ]
    # all before the range: the day rows of the whole UTC days, then the hour rows of the last one
    floor = _utc_day(q.start, up=False)
    where.append(
        or_(
            and_(t.c.metric.in_([r.SUBSCRIBED + r.DAY, r.CHURNED + r.DAY]), t.c.hour < floor),
            and_(t.c.metric.in_([r.SUBSCRIBED, r.CHURNED]), t.c.hour >= floor, t.c.hour < r.hour_of(q.start)),
        )
    )
    if q.currency:
        where.append(t.c.currency == q.currency)
    if q.dimension:
        where.append(t.c.dimension == q.dimension)
    before = select(t.c.metric, t.c.currency, func.sum(t.c.amount_minor), func.sum(t.c.count)).where(*where)
    base: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    async with engine.connect() as conn:
        for metric, coin, amount, count in await conn.execute(before.group_by(t.c.metric, t.c.currency)):
            sign = 1 if metric.removesuffix(r.DAY) == r.SUBSCRIBED else -1
            base[coin][0] += sign * int(count)
            base[coin][1] += sign * int(amount)
    cells: dict[tuple[date, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    coins: set[str] = set(base) | ({q.currency} if q.currency else set())
    for row in await _sums(engine, q, (r.SUBSCRIBED, r.CHURNED), by_dimension=False):
        coins.add(row.currency)
        cell = cells[(_row_period(q, row), row.currency)]
        if row.metric == r.SUBSCRIBED:
            cell[0] += row.n
            cell[2] += row.amount
        else:
            cell[1] += row.n
            cell[3] += row.amount
    out = []
    for coin in sorted(coins) or [""]:
        active, mrr = base[coin]
        for period in periods(q):
            new, churned, gained, lost = cells.get((period, coin), [0, 0, 0, 0])
            active += new - churned
            mrr += gained - lost
            out.append(
                {"period": period, "currency": coin, "new": new, "churned": churned, "active": active, "mrr": mrr}
            )
    out.sort(key=lambda row: (row["period"], row["currency"]))
    return out


async def top_payers(engine: AsyncEngine, q: ReportQuery) -> list[dict[str, Any]]:
    """The payers who paid the most over the whole range (per coin), at most ``q.limit``."""
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for row in await _sums(engine, q, (r.PAYER,), by_dimension=True, by_hour=False):
        cell = totals[(row.dimension, row.currency)]
        cell[0] += row.amount
        cell[1] += row.n
    ranked = sorted(totals.items(), key=lambda item: (-item[1][0], item[0][0], item[0][1]))[: q.limit]
    return [{"payer": p, "currency": c, "amount": a, "payments": n} for (p, c), (a, n) in ranked]


def _percentile(histogram: list[tuple[str, int]], fraction: float) -> int | None:
    total = sum(n for _, n in histogram)
    if total == 0:
        return None
    rank = total * fraction
    seen = 0
    for bucket, n in sorted(histogram):
        seen += n
        if seen >= rank:
            return int(bucket) if bucket != "inf" else None
    return None


async def settlement_latency(engine: AsyncEngine, q: ReportQuery) -> list[dict[str, Any]]:
    """Per period: agent payments settled, and the settlement latency (authorization received to
    settled) at the 50th and 95th percentiles, as the upper bound in ms of the histogram bucket it
    falls in (None beyond the last bound)."""
    cells: dict[date, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in await _sums(engine, q, (r.LATENCY,), by_dimension=True):
        cells[_row_period(q, row)][row.dimension] += row.n
    out = []
    for period in periods(q):
        histogram = sorted(cells.get(period, {}).items())
        out.append(
            {
                "period": period,
                "settled": sum(n for _, n in histogram),
                "p50Ms": _percentile(histogram, 0.5),
                "p95Ms": _percentile(histogram, 0.95),
            }
        )
    return out


RUNNERS = {
    "revenue": revenue,
    "conversion": conversion,
    "failures": failures,
    "subscriptions": subscriptions,
    "top_payers": top_payers,
    "settlement_latency": settlement_latency,
}


async def run_report(engine: AsyncEngine, name: str, q: ReportQuery) -> list[dict[str, Any]]:
    """The rows of the report ``name`` (one of `REPORTS`)."""
    return await RUNNERS[name](engine, q)
