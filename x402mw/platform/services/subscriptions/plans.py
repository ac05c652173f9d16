"""Subscription plans (spec 2.3): a name, a price per interval, and whether new subscriptions may open.

A plan's amount applies to invoices opened after it is set; open invoices keep theirs. An inactive
plan opens no new subscriptions, while the open ones keep renewing.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Row, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.merchants import newest_rows
from x402mw.platform.services.slugs import find_by_slug
from x402mw.platform.services.subscriptions.steps import aware

SLUG_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$"
"""A plan's slug: 1-32 lower-case letters, digits and inner hyphens (never a UUID's 36 characters)."""
_SLUG = re.compile(SLUG_PATTERN)


class PlanError(ServiceError):
    """A plan request the rules refuse."""


def _slug_taken(slug: str) -> PlanError:
    message = f"You already have a plan with the slug {slug!r}; choose another"
    return PlanError(409, "slug_taken", message, param="slug")


async def create_plan(engine: AsyncEngine, row: Mapping[str, Any]) -> dict[str, Any]:
    """Store the plan ``row``; 409 ``slug_taken`` when another plan of the same merchant has its slug
    (slugs are per merchant: another merchant's plans never refuse one, `services.slugs`)."""
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
    """The plan a checkout link names (``su_<id>``, ``su_<slug>.<merchant id>`` or an old bare
    ``su_<slug>``, without the prefix), of any merchant; None for anything that names none."""
    plans = tables.subscription_plans
    found: Mapping[Any, Any] | None
    async with engine.connect() as conn:
        if len(ref) == 36 and ref.isascii() and "." not in ref:
            try:
                plan_id = str(uuid.UUID(ref))
            except ValueError:
                return None
            if plan_id != ref.lower():
                return None
            found = (await conn.execute(select(plans).where(plans.c.id == plan_id))).mappings().first()
        elif _SLUG.fullmatch(ref.partition(".")[0]):
            found = await find_by_slug(conn, plans, ref)
        else:
            return None
    return None if found is None else aware(found)


async def newest_plans(engine: AsyncEngine, merchant_id: str, livemode: bool) -> list[Row[Any]]:
    """The merchant's plans of this mode, newest first."""
    return await newest_rows(engine, tables.subscription_plans, merchant_id, livemode)
