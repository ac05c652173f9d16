"""Developers: API keys, webhook endpoints, events with each delivery attempt, the API request log."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError
from sqlalchemy import select
from starlette.responses import Response
from starlette.routing import Route

from x402mw.platform.api.webhook_endpoints import (
    WebhookEndpointCreate,
    WebhookEndpointUpdate,
    create_endpoint,
    rotate_endpoint_secret,
    update_endpoint,
)
from x402mw.platform.dashboard.web import Ctx, missing, page, problem, see
from x402mw.platform.db import tables
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import is_uuid
from x402mw.platform.services.merchants import create_api_key, revoke_api_key
from x402mw.platform.webhooks import EVENT_TYPES
from x402mw.platform.webhooks.delivery import redeliver

__all__ = ["routes"]


def _uuid_param(ctx: Ctx, name: str, kind: str) -> str:
    value = ctx.request.path_params[name]
    if not is_uuid(value):
        raise missing(kind)
    return str(value).lower()


@page()
async def keys(ctx: Ctx) -> Response:
    return ctx.page("keys.html", rows=await ctx.newest(tables.api_keys), new_key=None)


@page("developers")
async def keys_create(ctx: Ctx) -> Response:
    row, key = await create_api_key(ctx.platform.engine, ctx.merchant_id, livemode=ctx.livemode)
    await ctx.audit("api_key_created", row.id)
    return ctx.page("keys.html", rows=await ctx.newest(tables.api_keys), new_key=key)


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


async def _webhooks_page(ctx: Ctx, status: int = 200, *, secret: str | None = None, error: str = "") -> Response:
    rows = await ctx.newest(tables.webhook_endpoints)
    return ctx.page("webhooks.html", status, rows=rows, secret=secret, error=error, event_types=EVENT_TYPES)


@page()
async def webhooks(ctx: Ctx) -> Response:
    return await _webhooks_page(ctx)


@page("developers")
async def webhooks_create(ctx: Ctx) -> Response:
    assert ctx.form is not None
    chosen = [str(v) for v in ctx.form.getlist("events")] or ["*"]
    try:
        body = WebhookEndpointCreate(
            url=ctx.field("url"), enabledEvents=chosen, description=ctx.field("description") or None
        )
        row, secret = await create_endpoint(ctx.platform, ctx.caller, body)
    except (ValidationError, HttpError) as exc:
        return await _webhooks_page(ctx, 400, error=problem(exc))
    await ctx.audit("webhook_endpoint_created", row.id)
    return await _webhooks_page(ctx, secret=secret)


@page("developers")
async def webhooks_rotate(ctx: Ctx) -> Response:
    endpoint_id = _uuid_param(ctx, "endpoint_id", "webhook endpoint")
    try:
        row, secret = await rotate_endpoint_secret(ctx.platform, ctx.caller, endpoint_id, 86400)
    except HttpError as exc:
        raise missing("webhook endpoint") from exc
    await ctx.audit("webhook_secret_rotated", row.id)
    return await _webhooks_page(ctx, secret=secret)


@page("developers")
async def webhooks_status(ctx: Ctx) -> Response:
    endpoint_id = _uuid_param(ctx, "endpoint_id", "webhook endpoint")
    status = "disabled" if ctx.field("status") == "disabled" else "enabled"
    try:
        await update_endpoint(ctx.platform, ctx.caller, endpoint_id, WebhookEndpointUpdate(status=status))
    except HttpError as exc:
        raise missing("webhook endpoint") from exc
    await ctx.audit(f"webhook_endpoint_{status}", endpoint_id)
    return see("/dashboard/developers/webhooks?notice=" + quote(f"Endpoint {status}."))


@page()
async def events(ctx: Ctx) -> Response:
    t = tables.events
    async with ctx.platform.engine.connect() as conn:
        query = select(t.c.id, t.c.type, t.c.created_at).where(
            t.c.merchant_id == ctx.merchant_id, t.c.livemode == ctx.livemode
        )
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
    Route("/developers/keys", keys, methods=["GET"], include_in_schema=False),
    Route("/developers/keys", keys_create, methods=["POST"], include_in_schema=False),
    Route("/developers/keys/{key_id}/revoke", keys_revoke, methods=["POST"], include_in_schema=False),
    Route("/developers/webhooks", webhooks, methods=["GET"], include_in_schema=False),
    Route("/developers/webhooks", webhooks_create, methods=["POST"], include_in_schema=False),
    Route(
        "/developers/webhooks/{endpoint_id}/rotate-secret", webhooks_rotate, methods=["POST"], include_in_schema=False
    ),
    Route("/developers/webhooks/{endpoint_id}/status", webhooks_status, methods=["POST"], include_in_schema=False),
    Route("/developers/events", events, methods=["GET"], include_in_schema=False),
    Route("/developers/events/{event_id}", event, methods=["GET"], include_in_schema=False),
    Route("/developers/events/{event_id}/redeliver", event_redeliver, methods=["POST"], include_in_schema=False),
    Route("/developers/requests", requests, methods=["GET"], include_in_schema=False),
]
