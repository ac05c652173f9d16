"""The reports page: revenue, conversion, subscriptions, failures and top payers of a period (day,
week, month or custom dates), each figure beside the previous period of the same length. Read from
the reports service (the rollups), drawn as SVG here: no script, and a table of each chart's numbers
for screen readers and small screens."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from markupsafe import Markup, escape
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from x402mw.platform.dashboard.web import Ctx, page
from x402mw.platform.services.reports import EXPORT_KINDS, ReportQuery, export_csv, run_report
from x402mw.protocol.prices import format_amount

Period = Literal["day", "week", "month", "custom"]
PERIODS: dict[str, tuple[str, int]] = {"day": ("Today", 1), "week": ("Last 7 days", 7), "month": ("Last 30 days", 30)}
MAX_CUSTOM_DAYS = 366


@dataclass(frozen=True)
class Window:
    period: Period
    start: date
    end: date  # exclusive

    @property
    def days(self) -> int:
        return (self.end - self.start).days

    def previous(self) -> Window:
        return Window(self.period, self.start - timedelta(days=self.days), self.start)


def _day(value: str) -> date | None:
    try:
        return date.fromisoformat(value) if len(value) == 10 else None
    except ValueError:
        return None


def window_of(params: Any, today: date) -> tuple[Window, str | None]:
    """The period the picker asks for, and what was wrong with a custom one (then the last 30 days)."""
    period = params.get("period", "week")
    if period in PERIODS:
        days = PERIODS[period][1]
        return Window(period, today - timedelta(days=days - 1), today + timedelta(days=1)), None
    if period == "custom":
        start, end = _day(params.get("from", "")), _day(params.get("to", ""))
        if start is None or end is None:
            problem = "Give both dates as YYYY-MM-DD."
        elif end < start:
            problem = "The end date comes before the start date."
        elif (end - start).days >= MAX_CUSTOM_DAYS:
            problem = "A custom period covers at most a year."
        else:
            return Window("custom", start, end + timedelta(days=1)), None
        return Window("month", today - timedelta(days=29), today + timedelta(days=1)), problem
    return Window("week", today - timedelta(days=6), today + timedelta(days=1)), None


def _instant(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _money(minor: int) -> str:
    return format_amount(minor, 6) if minor >= 0 else "-" + format_amount(-minor, 6)


def bars_svg(title: str, bars: list[tuple[str, int]], ident: str) -> Markup:
    """Bars of each period's value (minor units), labelled under each bar; the numbers are in the
    table beside the chart. Negative values (a net below zero) are drawn as empty bars."""
    width, height, pad = 700, 220, 30
    top = max((v for _, v in bars), default=0) or 1
    step = (width - 2 * pad) / max(len(bars), 1)
    every = max(1, len(bars) // 10)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-labelledby="{ident}">',
        f'<title id="{ident}">{escape(title)}</title>',
    ]
    for i, (label, value) in enumerate(bars):
        h = (height - 2 * pad) * max(value, 0) / top
        x = pad + i * step
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{height - pad - h:.1f}" width="{max(step - 2, 1):.1f}" height="{h:.1f}">'
            f"<title>{escape(label)}: {escape(_money(value))}</title></rect>"
        )
        if i % every == 0:
            parts.append(
                f'<text x="{x + step / 2:.1f}" y="{height - 10}" text-anchor="middle">{escape(label[5:])}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def _change(now: int, before: int) -> str:
    if before == 0:
        return "new" if now else "—"
    percent = (now - before) * 100 // abs(before)
    return f"{'+' if percent >= 0 else ''}{percent}%"


async def _figures(ctx: Ctx, window: Window, tz: ZoneInfo) -> dict[str, list[dict[str, Any]]]:
    start = datetime(window.start.year, window.start.month, window.start.day, tzinfo=tz)
    end = datetime(window.end.year, window.end.month, window.end.day, tzinfo=tz)
    q = ReportQuery(ctx.merchant_id, ctx.livemode, start, end, group="day", tz=tz, limit=10)
    engine = ctx.platform.engine
    return {
        name: await run_report(engine, name, q)
        for name in ("revenue", "conversion", "subscriptions", "failures", "top_payers")
    }


def _totals(rows: list[dict[str, Any]], keys: tuple[str, ...], by: str = "currency") -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        cell = out.setdefault(str(row.get(by) or ""), dict.fromkeys(keys, 0))
        for key in keys:
            cell[key] += int(row[key])
    return out


@page()
async def reports(ctx: Ctx) -> Response:
    tz = ZoneInfo("UTC")
    today = ctx.platform.clock.now().astimezone(tz).date()
    window, problem = window_of(ctx.request.query_params, today)
    now, before = await _figures(ctx, window, tz), await _figures(ctx, window.previous(), tz)
    keys = ("gross", "refunded", "net", "payments", "refunds")
    revenue_now, revenue_before = _totals(now["revenue"], keys), _totals(before["revenue"], keys)
    coins = sorted(c for c in revenue_now if c) or sorted(c for c in revenue_before if c)
    revenue = []
    for coin in coins:
        cur = revenue_now.get(coin, dict.fromkeys(keys, 0))
        old = revenue_before.get(coin, dict.fromkeys(keys, 0))
        days = [(r["period"].isoformat(), int(r["net"])) for r in now["revenue"] if r["currency"] == coin]
        revenue.append(
            {
                "coin": coin,
                "rows": [(k, cur[k], old[k], _change(cur[k], old[k])) for k in keys],
                "chart": bars_svg(f"Net revenue in {coin} per day", days, f"chart-net-{coin}"),
                "days": days,
            }
        )
    conversion_now = _totals(now["conversion"], ("issued", "paid"), by="endpoint")
    conversion_before = _totals(before["conversion"], ("issued", "paid"), by="endpoint")
    subs_last = {r["currency"]: r for r in now["subscriptions"] if r["currency"]}
    subs_prev = {r["currency"]: r for r in before["subscriptions"] if r["currency"]}
    subscriptions = [
        {
            "coin": coin,
            "new": sum(int(r["new"]) for r in now["subscriptions"] if r["currency"] == coin),
            "churned": sum(int(r["churned"]) for r in now["subscriptions"] if r["currency"] == coin),
            "active": int(row["active"]),
            "mrr": int(row["mrr"]),
            "mrr_before": int(subs_prev[coin]["mrr"]) if coin in subs_prev else 0,
        }
        for coin, row in sorted(subs_last.items())
    ]
    failures = _totals(now["failures"], ("count", "amount"), by="reason")
    return ctx.page(
        "reports.html",
        window=window,
        previous=window.previous(),
        periods=PERIODS,
        problem=problem,
        revenue=revenue,
        conversion=[
            (e, c, conversion_before.get(e, {"issued": 0, "paid": 0})) for e, c in sorted(conversion_now.items())
        ],
        subscriptions=subscriptions,
        failures=sorted(failures.items()),
        payers=now["top_payers"],
        fmt=_money,
        change=_change,
    )


@page()
async def export(ctx: Ctx) -> Response:
    """A CSV export of the period's rows (the same stream as the API's ``/v1/exports``)."""
    kind = ctx.request.query_params.get("kind", "")
    start, end = _day(ctx.request.query_params.get("from", "")), _day(ctx.request.query_params.get("to", ""))
    if kind not in EXPORT_KINDS or start is None or end is None or end <= start:
        return ctx.page("error.html", status=404, title="Not found", message="No such export.")
    body = export_csv(ctx.platform.engine, kind, ctx.merchant_id, ctx.livemode, _instant(start), _instant(end))
    filename = f"{kind}-{start.isoformat()}-{end.isoformat()}.csv"
    return StreamingResponse(
        body,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


routes = [
    Route("/reports", reports, methods=["GET"], include_in_schema=False),
    Route("/reports/export", export, methods=["GET"], include_in_schema=False),
]
