"""Cursor pagination shared by every list endpoint: ``limit`` (1-100, default 10),
``starting_after`` / ``ending_before`` ids (either, or both for the objects between them), newest
first; the handler answers the page as its list model (`x402mw.platform.objects.base.ListPage`:
``{object, data, hasMore}``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import Table, and_, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import ColumnElement
from starlette.requests import Request

from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import is_uuid
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.values import whole_number
from x402mw.platform.objects.base import ListPage

M = TypeVar("M", bound=BaseModel)


def page_params(request: Request) -> tuple[int, str | None, str | None]:
    """``limit`` (1-100, default 10) and the cursors, which are ids (UUIDs): 400 naming the first
    one that is malformed."""
    limit = whole_number(request.query_params.get("limit", "10"), high=100)
    if not limit:
        raise HttpError(400, "parameter_invalid", "limit must be an integer from 1 to 100", param="limit")
    return limit, query_id(request, "starting_after"), query_id(request, "ending_before")


def query_id(request: Request, name: str, *, prefix: str = "") -> str | None:
    """The query parameter ``name``, an id (a UUID, read in lower case; after ``prefix``, if one is
    given and the value has it), or None when it is absent; 400 ``parameter_invalid`` when it is not
    a UUID."""
    value = request.query_params.get(name)
    if value is None:
        return None
    if prefix:
        value = value.removeprefix(prefix)
    if not is_uuid(value):
        raise HttpError(400, "parameter_invalid", f"{name} must be an id (a UUID)", param=name)
    return value.lower()


async def list_answer(
    engine: AsyncEngine,
    table: Table,
    filters: Sequence[ColumnElement[bool]],
    request: Request,
    render: Callable[[Any], M],
    page: type[ListPage[M]],
) -> ModelResponse:
    """The answer of a list operation, as its list model ``page``: one page of ``table`` rows matching
    ``filters`` (which must include the merchant filter), each rendered, and whether more follow.
    With both cursors, the rows between them, newest first from ``starting_after``."""
    async with engine.connect() as conn:
        rows, more = await _page_rows(conn, table, filters, request)
    return ModelResponse(page(data=[render(r) for r in rows], has_more=more))


async def _page_rows(
    conn: AsyncConnection, table: Table, filters: Sequence[ColumnElement[bool]], request: Request
) -> tuple[list[Any], bool]:
    limit, after, before = page_params(request)
    created, ident = table.c.created_at, table.c.id
    query = select(table).where(*filters)
    for param, cursor_id in (("starting_after", after), ("ending_before", before)):
        if cursor_id is None:
            continue
        anchor = (await conn.execute(select(created).where(ident == cursor_id, *filters))).first()
        if anchor is None:
            raise HttpError(404, "resource_missing", f"No such object: '{cursor_id[:80]}'", param=param)
        if param == "starting_after":
            query = query.where(or_(created < anchor[0], and_(created == anchor[0], ident < cursor_id)))
        else:
            query = query.where(or_(created > anchor[0], and_(created == anchor[0], ident > cursor_id)))
    if before and not after:
        rows = list((await conn.execute(query.order_by(created.asc(), ident.asc()).limit(limit + 1))).mappings())
        more = len(rows) > limit
        rows = list(reversed(rows[:limit]))
    else:
        rows = list((await conn.execute(query.order_by(created.desc(), ident.desc()).limit(limit + 1))).mappings())
        more = len(rows) > limit
        rows = rows[:limit]
    return rows, more
