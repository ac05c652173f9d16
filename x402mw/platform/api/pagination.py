"""Cursor pagination shared by every list endpoint: ``limit`` (1-100, default 10),
``starting_after`` / ``ending_before`` ids, newest first; answers ``{object, data, hasMore}``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Table, and_, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement
from starlette.requests import Request

from x402mw.platform.api.errors import ApiError

__all__ = ["list_page", "page_params"]


def page_params(request: Request) -> tuple[int, str | None, str | None]:
    raw = request.query_params.get("limit", "10")
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise ApiError(400, "parameter_invalid", "limit must be an integer from 1 to 100", param="limit")
    after = request.query_params.get("starting_after") or None
    before = request.query_params.get("ending_before") or None
    if after and before:
        raise ApiError(400, "parameter_invalid", "use starting_after or ending_before, not both", param="ending_before")
    return int(raw), after, before


async def list_page(
    conn: AsyncConnection,
    table: Table,
    filters: Sequence[ColumnElement[bool]],
    request: Request,
    render: Callable[[Any], dict[str, Any]],
) -> dict[str, Any]:
    """One page of ``table`` rows matching ``filters`` (which must include the merchant filter)."""
    limit, after, before = page_params(request)
    created, ident = table.c.created_at, table.c.id
    query = select(table).where(*filters)
    cursor_id = after or before
    if cursor_id:
        anchor = (await conn.execute(select(created).where(ident == cursor_id, *filters))).first()
        if anchor is None:
            param = "starting_after" if after else "ending_before"
            raise ApiError(404, "resource_missing", f"No such object: '{cursor_id[:80]}'", param=param)
        if after:
            query = query.where(or_(created < anchor[0], and_(created == anchor[0], ident < cursor_id)))
        else:
            query = query.where(or_(created > anchor[0], and_(created == anchor[0], ident > cursor_id)))
    if before:
        rows = list((await conn.execute(query.order_by(created.asc(), ident.asc()).limit(limit + 1))).mappings())
        more = len(rows) > limit
        rows = list(reversed(rows[:limit]))
    else:
        rows = list((await conn.execute(query.order_by(created.desc(), ident.desc()).limit(limit + 1))).mappings())
        more = len(rows) > limit
        rows = rows[:limit]
    return {"object": "list", "data": [render(r) for r in rows], "hasMore": more}
