"""Test clocks (test mode only): a clock a merchant moves by hand, on which subscriptions live.

A subscription opened with a test clock takes its times from it; the worker leaves it alone.
Advancing the clock (forward only) runs every action of its subscriptions that falls due up to the
new time, in order, with the due times as their times, and returns when they are done.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Row, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.subscriptions.renewals import RenewalRunner
from x402mw.platform.services.subscriptions.steps import aware


class TestClockError(ServiceError):
    """A test clock request the rules refuse."""

    __test__ = False  # not a pytest test class, whatever its name


async def create_clock(engine: AsyncEngine, merchant_id: str, frozen_time: datetime, now: datetime) -> dict[str, Any]:
    row = {
        "id": new_id(),
        "merchant_id": merchant_id,
        "livemode": False,
        "frozen_time": frozen_time,
        "created_at": now,
        "updated_at": now,
    }
    async with engine.begin() as conn:
        await conn.execute(tables.test_clocks.insert(), row)
    return row


async def find_clock(engine: AsyncEngine, merchant_id: str, clock_id: str) -> dict[str, Any] | None:
    clocks = tables.test_clocks
    async with engine.connect() as conn:
        found = (
            await conn.execute(select(clocks).where(clocks.c.id == clock_id, clocks.c.merchant_id == merchant_id))
        ).mappings()
        row = found.first()
    return None if row is None else aware(row)


async def advance_clock(
    engine: AsyncEngine, runner: RenewalRunner, merchant_id: str, clock_id: str, frozen_time: datetime, now: datetime
) -> Mapping[str, Any] | None:
    """Move the merchant's clock to ``frozen_time`` and run what falls due on it; the clock, or None
    when the merchant has no such clock. 409 ``test_clock_backwards`` for a time before the clock's."""
    clocks = tables.test_clocks
    owned = (clocks.c.id == clock_id) & (clocks.c.merchant_id == merchant_id)
    async with engine.begin() as conn:
        current = await conn.scalar(select(clocks.c.frozen_time).where(owned).with_for_update())
        if current is None:
            return None
        moved = await conn.execute(
            update(clocks)
            .where(owned, clocks.c.frozen_time <= frozen_time)
            .values(frozen_time=frozen_time, updated_at=now)
        )
        if moved.rowcount != 1:
            shown = aware({"at": current})["at"].isoformat().replace("+00:00", "Z")
            raise TestClockError(
                409,
                "test_clock_backwards",
                f"A test clock only moves forward: frozenTime must be at or after {shown}",
                param="frozenTime",
            )
    await runner.run_due(test_clock_id=clock_id, now=frozen_time)
    return await find_clock(engine, merchant_id, clock_id)


async def newest_clocks(engine: AsyncEngine, merchant_id: str, limit: int = 50) -> list[Row[Any]]:
    """The merchant's test clocks, newest first."""
    t = tables.test_clocks
    query = select(t).where(t.c.merchant_id == merchant_id).order_by(t.c.created_at.desc()).limit(limit)
    async with engine.connect() as conn:
        return list(await conn.execute(query))
