"""Developers: API keys, webhook endpoints, events with each delivery attempt, the API request log."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from sqlalchemy import select
from starlette.responses import Response
from starlette.routing import Route

from x402mw.platform.api.fields import is_uuid
from x402mw.platform.dashboard.web import Ctx, missing, page, see
from x402mw.platform.db import tables
from x402mw.platform.services.merchants import create_api_key, revoke_api_key
from x402mw.platform.webhooks.delivery import redeliver

__all__ = ["routes"]


def _uuid_param(ctx: Ctx, name: str, kind: str) -> str:
    value = ctx.request.path_params[name]
    if not is_uuid(value):
        raise missing(kind)
    return str(value).lower()


@page()
async def keys(ctx: Ctx) -> Response:
    t = tables.api_keys
    async with ctx.platform.engine.connect() as conn:
        query = select(t).where(t.c.merchant_id == ctx.merchant_id, t.c.livemode == ctx.livemode)
        rows = list(await conn.execute(query.order_by(t.c.created_at.desc())))
    return ctx.page("keys.html", rows=rows, new_key=None)


@page("developers")
async def keys_create(ctx: Ctx) -> Response:
    row, key = await create_api_key(ctx.platform.engine, ctx.merchant_id, livemode=ctx.livemode)
    await ctx.audit("api_key_created", row.id)
    t = tables.api_keys
    async with ctx.platform.engine.connect() as conn:
        query = select(t).where(t.c.merchant_id == ctx.merchant_id, t.c.livemode == ctx.livemode)
        rows = list(await conn.execute(query.order_by(t.c.created_at.desc())))
    return ctx.page("keys.html", rows=rows, new_key=key)


@page("developers")
async def keys_revoke(ctx: Ctx) -> Response:
    key_id = _uuid_param(ctx, "key_id", "API key")
    t = tables.api_keys
    async with ctx.platform.engine.connect() as conn:
        query = select(t.c.id).where(t.c.id == key_id, t.c.merchant_id == ctx.merchant_id, t.c.livemode == ctx.livemode)
        if (await conn.execute(query)).first() is None:
            raise missing("API key")
    await revoke_api_key(ctx.platform.engine, key_id)
    await ctx.audit("api_key_revoked", key_id)
    return see("/dashboard/developers/keys?notice=" + quote("Key revoked."))


@page()
async def events(ctx: Ctx) -> Response:
    t = tables.events
    async with ctx.platform.engine.connect() as conn:
        query = select(t.c.id, t.c.type, t.c.created_at).where(t.c.merchant_id == ctx.merchant_id, t.c.livemode == ctx.livemode)
        rows = list(await conn.execute(query.order_by(t.c.created_at.desc()).limit(100)))
    return ctx.page("events.html", rows=rows)


async def _event(ctx: Ctx) -> Any:
    event_id = _uuid_param(ctx, "event_id", "event")
    t = tables.events
    async with ctx.platform.engine.connect() as conn:
        query = select(t).where(t.c.id == event_id, t.c.merchant_id == ctx.merchant_id, t.c.livemode == ctx.livemode)
        row = (await conn.execute(query)).mappings().first()
    if row is None:
        raise missing("event")
    return row


@page()
async def event(ctx: Ctx) -> Response:
    row = await _event(ctx)
    d, e = tables.webhook_deliveries, tables.webhook_endpoints
    async with ctx.platform.engine.connect() as conn:
        query = select(d, e.c.url).join(e, e.c.id == d.c.endpoint_id).where(d.c.event_id == row["id"])
        deliveries = list(await conn.execute(query.order_by(d.c.created_at)))
    import json

    return ctx.page("event.html", e=row, deliveries=deliveries, data=json.dumps(row["data"], indent=2, sort_keys=True))


@page("developers")
async def event_redeliver(ctx: Ctx) -> Response:
    row = await _event(ctx)
    count = await redeliver(ctx.platform.engine, row, ctx.platform.clock.now())
    await ctx.audit("event_redelivered", row["id"], detail=str(count))
    return see(f"/dashboard/developers/events/{row['id']}?notice=" + quote(f"Queued to {count} endpoint(s)."))


@page()
async def requests(ctx: Ctx) -> Response:
    t = tables.api_requests
    wanted = ctx.request.query_params.get("request_id", "").strip()[:64]
    where = [t.c.merchant_id == ctx.merchant_id, t.c.livemode == ctx.livemode]
    if wanted:
        where.append(t.c.request_id == wanted)
    async with ctx.platform.engine.connect() as conn:
        rows = list(await conn.execute(select(t).where(*where).order_by(t.c.created_at.desc()).limit(100)))
    return ctx.page("requests.html", rows=rows, wanted=wanted)


routes = [
    Route("/developers/keys", keys, methods=["GET"]),
    Route("/developers/keys", keys_create, methods=["POST"]),
    Route("/developers/keys/{key_id}/revoke", keys_revoke, methods=["POST"]),
    Route("/developers/events", events, methods=["GET"]),
    Route("/developers/events/{event_id}", event, methods=["GET"]),
    Route("/developers/events/{event_id}/redeliver", event_redeliver, methods=["POST"]),
    Route("/developers/requests", requests, methods=["GET"]),
]
