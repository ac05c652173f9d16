"""The events a merchant's account recorded (``payment_intent.succeeded``, ``refund.completed``…), as
the dashboard shows them: the newest, one with its webhook deliveries, an order's own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Row, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db import tables


async def newest_events(engine: AsyncEngine, merchant_id: str, livemode: bool, limit: int = 100) -> list[Row[Any]]:
    """The merchant's events of this mode (id, type, created_at), newest first."""
    t = tables.events
    query = select(t.c.id, t.c.type, t.c.created_at).where(t.c.merchant_id == merchant_id, t.c.livemode == livemode)
    async with engine.connect() as conn:
        return list(await conn.execute(query.order_by(t.c.created_at.desc()).limit(limit)))


async def find_event(engine: AsyncEngine, merchant_id: str, livemode: bool, event_id: str) -> Mapping[Any, Any] | None:
    """The merchant's event of this mode, or None."""
    t = tables.events
    query = select(t).where(t.c.id == event_id, t.c.merchant_id == merchant_id, t.c.livemode == livemode)
    async with engine.connect() as conn:
        return (await conn.execute(query)).mappings().first()


async def event_deliveries(engine: AsyncEngine, event_id: str) -> list[Row[Any]]:
    """The event's webhook deliveries, each with its endpoint's ``url``, oldest first."""
    d, e = tables.webhook_deliveries, tables.webhook_endpoints
    query = select(d, e.c.url).join(e, e.c.id == d.c.endpoint_id).where(d.c.event_id == event_id)
    async with engine.connect() as conn:
        return list(await conn.execute(query.order_by(d.c.created_at)))


async def order_events(
    engine: AsyncEngine, merchant_id: str, livemode: bool, order_id: str, limit: int = 200
) -> list[Row[Any]]:
    """The events (id, type, created_at) about an order, oldest first: those whose data names it
    (``{"paymentIntent": {"id"}}``, ``{"refund": {"paymentId"}}``)."""
    events = tables.events
    about = or_(
        events.c.data["paymentIntent"]["id"].as_string() == order_id,
        events.c.data["refund"]["paymentId"].as_string() == order_id,
    )
    query = (
        select(events.c.id, events.c.type, events.c.created_at)
        .where(events.c.merchant_id == merchant_id, events.c.livemode == livemode, about)
        .order_by(events.c.created_at, events.c.id)
        .limit(limit)
    )
    async with engine.connect() as conn:
        return list(await conn.execute(query))
