"""Recording challenges that sellers' middleware issued (idempotent: known ones are left alone)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from x402mw.platform.db import tables


async def record_challenges(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    """Insert ``agent_challenges`` rows, skipping ids already recorded."""
    if not rows:
        return
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    await conn.execute(dialect.insert(tables.agent_challenges).on_conflict_do_nothing(), rows)
