"""A merchant's subscriptions as the dashboard lists them: filtered by status or customer, each with
its plan's name, and one with its plan's interval and its invoices."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db import tables


async def newest_subscriptions(
    engine: AsyncEngine,
    merchant_id: str,
    livemode: bool,
    *,
    status: str | None = None,
    customer: str | None = None,
    limit: int = 100,
) -> list[Row[Any]]:
    """The merchant's subscriptions of this mode with ``plan_name``, newest first; only those of
    ``status``, only those whose merchant customer id or (lower-cased) email is ``customer``."""
    s, p = tables.subscriptions, tables.subscription_plans
    where = [s.c.merchant_id == merchant_id, s.c.livemode == livemode]
    if status:
        where.append(s.c.status == status)
    if customer:
        where.append((s.c.merchant_customer_id == customer) | (s.c.customer_email == customer.lower()))
    query = select(s, p.c.name.label("plan_name")).join(p, p.c.id == s.c.plan_id).where(*where)
    async with engine.connect() as conn:
        return list(await conn.execute(query.order_by(s.c.created_at.desc()).limit(limit)))


async def subscription_with_invoices(
    engine: AsyncEngine, merchant_id: str, livemode: bool, subscription_id: str
) -> tuple[Row[Any], list[Row[Any]]] | None:
    """The merchant's subscription of this mode (with ``plan_name`` and ``interval``) and its
    invoices, latest period first; None when it has no such subscription."""
    s, p, i = tables.subscriptions, tables.subscription_plans, tables.subscription_invoices
    query = (
        select(s, p.c.name.label("plan_name"), p.c.interval)
        .join(p, p.c.id == s.c.plan_id)
        .where(s.c.id == subscription_id, s.c.merchant_id == merchant_id, s.c.livemode == livemode)
    )
    async with engine.connect() as conn:
        row = (await conn.execute(query)).first()
        if row is None:
            return None
        invoices = list(
            await conn.execute(select(i).where(i.c.subscription_id == subscription_id).order_by(i.c.period.desc()))
        )
    return row, invoices
