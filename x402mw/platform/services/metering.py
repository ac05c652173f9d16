"""Usage metering for agent payments: settlements and volume per merchant per month, and the
planned fee of spec section 8 (first 1,000 settlements a month free; beyond that, each costs the
larger of 0.005 and 0.3 % of its amount, in the settlement's coin). Computed and shown, not billed."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.objects.agents import AgentUsage
from x402mw.platform.objects.base import money

FREE_SETTLEMENTS = 1000
MIN_FEE_MINOR = 5_000  # 0.005 with 6 decimals
FEE_PER_MILLE = 3  # 0.3 %


def settlement_fee(amount_minor: int) -> int:
    """The planned fee of one settlement beyond the free allowance, in minor units (rounded up)."""
    return max(MIN_FEE_MINOR, -(-amount_minor * FEE_PER_MILLE // 1000))


def _next_month(start: datetime) -> datetime:
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)


async def monthly_usage(engine: AsyncEngine, merchant_id: str, livemode: bool, start: datetime) -> AgentUsage:
    table = tables.agent_payments
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(table.c.currency, table.c.amount_minor)
                .where(
                    table.c.merchant_id == merchant_id,
                    table.c.livemode == livemode,
                    table.c.status == "settled",
                    table.c.settled_at >= start,
                    table.c.settled_at < _next_month(start),
                )
                .order_by(table.c.settled_at, table.c.id)
            )
        ).all()
    volume: dict[str, int] = defaultdict(int)
    fees: dict[str, int] = defaultdict(int)
    for index, (currency, amount) in enumerate(rows):
        volume[currency] += amount
        if index >= FREE_SETTLEMENTS:
            fees[currency] += settlement_fee(amount)
    return AgentUsage(
        month=f"{start.year:04d}-{start.month:02d}",  # strftime's %Y drops a year's leading zeros
        livemode=livemode,
        settlements=len(rows),
        free_settlements=min(len(rows), FREE_SETTLEMENTS),
        volume={c: money(v) for c, v in sorted(volume.items())},
        planned_fee={c: money(v) for c, v in sorted(fees.items())},
        billed=False,
    )
