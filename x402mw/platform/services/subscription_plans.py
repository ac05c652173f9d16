"""Subscription plans (spec 2.3): a name, a price per interval, and whether new subscriptions may open.

A plan's amount applies to invoices opened after it is set; open invoices keep theirs. An inactive
plan opens no new subscriptions, while the open ones keep renewing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.services.errors import Refused
from x402mw.platform.services.subscription_steps import aware

__all__ = ["PlanError", "create_plan", "find_plan", "find_plan_by_ref", "update_plan"]


class PlanError(Refused):
    """A plan request the rules refuse."""


def _slug_taken(slug: str) -> PlanError:
    return PlanError(409, "slug_taken", f"The slug {slug!r} is taken; choose another", param="slug")


async def create_plan(engine: AsyncEngine, row: Mapping[str, Any]) -> dict[str, Any]:
    """Store the plan ``row``; 409 ``slug_taken`` when another plan has its slug (slugs name plans in
    checkout links, so they are unique across merchants)."""
    plans = tables.subscription_plans
    try:
        async with engine.begin() as conn:
            await conn.execute(plans.insert(), dict(row))
    except IntegrityError:
        raise _slug_taken(str(row["slug"])) from None
    return dict(row)


async def update_plan(
    engine: AsyncEngine, merchant_id: str, livemode: bool, plan_id: str, changes: Mapping[str, Any], now: datetime
) -> dict[str, Any] | None:
    """Apply ``changes`` (``name``, ``amount_minor``, ``active``, ``grace_days``; none: only read it) to
    the merchant's plan; the plan as it now is, or None when the merchant has no such plan."""
    plans = tables.subscription_plans
    owned = (plans.c.id == plan_id) & (plans.c.merchant_id == merchant_id) & (plans.c.livemode == livemode)
    async with engine.begin() as conn:
        if changes:
            await conn.execute(update(plans).where(owned).values(**changes, updated_at=now))
        found = (await conn.execute(select(plans).where(owned))).mappings().first()
    return None if found is None else aware(found)


async def find_plan(engine: AsyncEngine, merchant_id: str, livemode: bool, plan_id: str) -> dict[str, Any] | None:
    """The merchant's plan, or None (another merchant's plan is indistinguishable from none)."""
    return await update_plan(engine, merchant_id, livemode, plan_id, {}, datetime.min)


async def find_plan_by_ref(engine: AsyncEngine, ref: str) -> dict[str, Any] | None:
    """The plan a checkout link names (``su_<id or slug>``, without the prefix), of any merchant."""
    import uuid

    plans = tables.subscription_plans
    try:
        column, value = plans.c.id, str(uuid.UUID(ref))
        if value != ref.lower():
            column, value = plans.c.slug, ref
    except ValueError:
        column, value = plans.c.slug, ref
    async with engine.connect() as conn:
        found = (await conn.execute(select(plans).where(column == value))).mappings().first()
    return None if found is None else aware(found)
