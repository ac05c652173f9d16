"""The overview: balances per chain and coin, agent income paid to the payout addresses, volume and
count per day of every kind of payment (an SVG drawn here), and the month's agent settlements with
the fee they would cost."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from markupsafe import Markup, escape
from starlette.responses import Response
from starlette.routing import Route

from x402mw.platform.dashboard.web import Ctx, page
from x402mw.platform.services.metering import monthly_usage
from x402mw.platform.services.payments import overview_figures
from x402mw.protocol.prices import format_amount

DAYS = 14


def chart_svg(days: list[tuple[str, int, int]], coin: str) -> Markup:
    """Bars of each day's paid volume of ``coin`` (minor units), labelled with its count; no script."""
    width, height, pad = 700, 220, 30
    top = max((v for _, v, _ in days), default=0) or 1
    bar = (width - 2 * pad) / max(len(days), 1)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-labelledby="chart-{escape(coin)}">',
        f'<title id="chart-{escape(coin)}">{escape(coin)} paid per day</title>',
    ]
    for i, (day, volume, count) in enumerate(days):
        h = (height - 2 * pad) * volume / top
        x = pad + i * bar
        y = height - pad - h
        parts.append(
            f'<rect x="{x + 2:.1f}" y="{y:.1f}" width="{bar - 4:.1f}" height="{h:.1f}">'
            f"<title>{escape(day)}: {count} payments, {format_amount(volume, 6)} {escape(coin)}</title></rect>"
        )
        parts.append(f'<text x="{x + bar / 2:.1f}" y="{height - 10}" text-anchor="middle">{escape(day[8:])}</text>')
        if count:
            parts.append(f'<text x="{x + bar / 2:.1f}" y="{y - 4:.1f}" text-anchor="middle">{count}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


@page()
async def overview(ctx: Ctx) -> Response:
    now = ctx.platform.clock.now()
    start = (now - timedelta(days=DAYS - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    figures = await overview_figures(ctx.platform.engine, ctx.merchant_id, ctx.livemode, start)
    charts = []
    for coin in sorted({c for c, _ in figures.per_day}) or ["USDC"]:
        days = []
        for i in range(DAYS):
            key = (start + timedelta(days=i)).strftime("%Y-%m-%d")
            volume, count = figures.per_day.get((coin, key), [0, 0])
            days.append((key, volume, count))
        charts.append((coin, chart_svg(days, coin)))
    month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    usage = await monthly_usage(ctx.platform.engine, ctx.merchant_id, ctx.livemode, month)
    chains: dict[int, Any] = {c.network.chain_id: c.network for c in ctx.platform.chains}
    return ctx.page(
        "overview.html",
        balances=figures.balances,
        agent_income=figures.agent_income,
        charts=charts,
        usage=usage,
        counts=figures.counts,
        total=sum(figures.counts.values()),
        chains=chains,
        fmt=lambda v: format_amount(int(v), 6),
    )


routes = [Route("/", overview, methods=["GET"], include_in_schema=False)]
