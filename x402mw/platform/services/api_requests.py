"""The merchant API's request log (what the dashboard's developers pages show): one row a request,
written by `x402mw.platform.api.request_log`, kept `RETENTION_DAYS` and at most `ROWS_PER_MERCHANT` a
merchant, purged by the worker (`purge_api_requests`); and the worker's purge of the dashboard's
ended sessions (`purge_dashboard_sessions`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.batching import Coalescer
from x402mw.platform.db import tables
from x402mw.platform.db.engine import HeldConnection

RETENTION_DAYS = 30
ROWS_PER_MERCHANT = 10_000


_INSERT = insert(tables.api_requests)


class ApiRequestLog:
    """Writes the log's rows with group commit (`Coalescer`): the requests answered at once share one
    multi-row INSERT, on a connection kept for it (`HeldConnection`: on SQLite, the process's writer
    thread), so that the log costs a busy API (settlement calls) a fraction of a write each."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._conn = HeldConnection(engine)
        self._writes: Coalescer[dict[str, Any], None] = Coalescer(self._insert)

    async def record(self, row: dict[str, Any]) -> None:
        """Write one request's row, with whatever other rows are waiting."""
        await self._writes.submit(row)

    async def _insert(self, rows: list[dict[str, Any]]) -> list[None]:
        await self._conn.run(lambda conn: conn.execute(_INSERT, rows), atomic=False)  # one statement
        return [None] * len(rows)

    async def aclose(self) -> None:
        """Give the held connection back (before the engine is disposed)."""
        await self._conn.aclose()


async def purge_api_requests(
    engine: AsyncEngine, now: datetime, *, days: int = RETENTION_DAYS, cap: int = ROWS_PER_MERCHANT
) -> int:
    """Delete rows older than ``days``, then each merchant's (per mode) beyond its newest ``cap``."""
    t = tables.api_requests
    async with engine.begin() as conn:
        purged = (await conn.execute(delete(t).where(t.c.created_at < now - timedelta(days=days)))).rowcount or 0
        over = await conn.execute(
            select(t.c.merchant_id, t.c.livemode).group_by(t.c.merchant_id, t.c.livemode).having(func.count() > cap)
        )
        for merchant_id, livemode in list(over):
            mine = (t.c.merchant_id == merchant_id, t.c.livemode == livemode)
            oldest_kept = (
                await conn.execute(
                    select(t.c.created_at).where(*mine).order_by(t.c.created_at.desc()).offset(cap - 1).limit(1)
                )
            ).scalar_one()
            result = await conn.execute(delete(t).where(*mine, t.c.created_at < oldest_kept))
            purged += result.rowcount or 0
    return int(purged)


async def purge_dashboard_sessions(engine: AsyncEngine, now: datetime) -> int:
    """Delete dashboard sessions past their absolute expiry by more than a day (the worker's
    housekeeping; x402mw.platform.services.dashboard_users writes them)."""
    sessions = tables.dashboard_sessions
    async with engine.begin() as conn:
        result = await conn.execute(delete(sessions).where(sessions.c.expires_at < now - timedelta(days=1)))
    return int(result.rowcount or 0)


async def newest_api_requests(
    engine: AsyncEngine, merchant_id: str, livemode: bool, request_id: str | None = None, limit: int = 100
) -> list[Row[Any]]:
    """The merchant's logged requests of this mode, newest first; only ``request_id``'s when given."""
    t = tables.api_requests
    where = [t.c.merchant_id == merchant_id, t.c.livemode == livemode]
    if request_id:
        where.append(t.c.request_id == request_id)
    async with engine.connect() as conn:
        return list(await conn.execute(select(t).where(*where).order_by(t.c.created_at.desc()).limit(limit)))
