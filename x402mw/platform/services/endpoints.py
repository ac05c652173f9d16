"""Agent endpoints as the settlement path reads them: one indexed read, cached briefly."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.services.cache import TTLCache


async def find_endpoint(conn: AsyncConnection, merchant_id: str, livemode: bool, endpoint_id: str) -> Row[Any] | None:
    """The merchant's endpoint row, or None (another merchant's endpoint is indistinguishable from none)."""
    table = tables.agent_endpoints
    return (
        await conn.execute(
            select(table).where(
                table.c.id == endpoint_id, table.c.merchant_id == merchant_id, table.c.livemode == livemode
            )
        )
    ).first()


class EndpointDirectory:
    """Endpoint reads for settlement, cached ``ttl`` seconds; `invalidate` after a change in this process."""

    def __init__(self, engine: AsyncEngine, *, ttl: float = 2.0) -> None:
        self.engine = engine
        self._cache: TTLCache[tuple[str, bool, str], Row[Any] | None] = TTLCache(ttl)

    async def get(self, merchant_id: str, livemode: bool, endpoint_id: str, *, fresh: bool = False) -> Row[Any] | None:
        """The merchant's endpoint row (read at most ``ttl`` seconds ago, or now when ``fresh``), or None."""

        async def load() -> Row[Any] | None:
            async with self.engine.connect() as conn:
                return await find_endpoint(conn, merchant_id, livemode, endpoint_id)

        key = (merchant_id, livemode, endpoint_id)
        if fresh:
            self._cache.invalidate(key)
        return await self._cache.get(key, load)

    def invalidate(self) -> None:
        self._cache.invalidate()
