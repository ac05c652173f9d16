"""Recording challenges that sellers' middleware issued (idempotent: known ones are left alone), and
counting those recorded for the first time in the reports' rollups, in the same transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from x402mw.platform.db import tables
from x402mw.platform.services.reports.rollups import apply_challenges


async def record_challenges(conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
    """Insert ``agent_challenges`` rows, skipping ids already recorded."""
    if not rows:
        return
    table = tables.agent_challenges
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(table).on_conflict_do_nothing().returning(table.c.id)
    inserted = set((await conn.execute(statement, rows)).scalars())
    if inserted:
        await conn.run_sync(apply_challenges, [r for r in rows if r["id"] in inserted])
