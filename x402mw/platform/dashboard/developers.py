"""Developers: API keys, webhook endpoints, events with each delivery attempt, the API request log."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError
from starlette.responses import Response
from starlette.routing import Route

from x402mw.platform.dashboard.web import Ctx, missing, page, problem, see
from x402mw.platform.http.fields import is_uuid
from x402mw.platform.http.request_models.webhook_endpoints import WebhookEndpointCreate, WebhookEndpointUpdate
from x402mw.platform.services.api_requests import newest_api_requests
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.events import event_deliveries, find_event, newest_events
from x402mw.platform.services.merchants import create_api_key, has_api_key, newest_api_keys, revoke_api_key
from x402mw.platform.services.webhook_endpoints import (
    create_webhook_endpoint,
    newest_webhook_endpoints,
    rotate_webhook_secret,
    update_webhook_endpoint,
)
from x402mw.platform.webhooks import EVENT_TYPES
from x402mw.platform.webhooks.delivery import redeliver


def _uuid_param(ctx: Ctx, name: str, kind: str) -> str:
    value = ctx.request.path_params[name]
    if not is_uuid(value):
        raise missing(kind)
    return str(value).lower()


async def _keys_page(ctx: Ctx, new_key: str | None) -> Response:
    rows = await newest_api_keys(ctx.platform.engine, ctx.merchant_id, ctx.livemode)
    return ctx.page("keys.html", rows=rows, new_key=new_key)


@page()
async def keys(ctx: Ctx) -> Response:
    return await _keys_page(ctx, None)


@page("developers")
async def keys_create(ctx: Ctx) -> Response:
    row, key = await create_api_key(ctx.platform.engine, ctx.merchant_id, livemode=ctx.livemode)
    await ctx.audit("api_key_created", row.id)
    return await _keys_page(ctx, key)


@page("developers")
async def keys_revoke(ctx: Ctx) -> Response:
    key_id = _uuid_param(ctx, "key_id", "API key")
    if not await has_api_key(ctx.platform.engine, ctx.merchant_id, ctx.livemode, key_id):
        raise missing("API key")
    await revoke_api_key(ctx.platform.engine, key_id)
    await ctx.audit("api_key_revoked", key_id)
    return see("/dashboard/developers/keys?notice=" + quote("Key revoked."))


async def _webhooks_page(ctx: Ctx, status: int = 200, *, secret: str | None = None, error: str = "") -> Response:
    rows = await newest_webhook_endpoints(ctx.platform.engine, ctx.merchant_id, ctx.livemode)
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
        platform = ctx.platform
        row, secret = await create_webhook_endpoint(
            platform.engine,
            platform.secrets,
            ctx.caller,
            body.model_dump(),
            platform.clock.now(),
            allow_private=platform.settings.private_webhooks_allowed,
        )
    except (ValidationError, ServiceError) as exc:
        return await _webhooks_page(ctx, 400, error=problem(exc))
    await ctx.audit("webhook_endpoint_created", row.id)
    return await _webhooks_page(ctx, secret=secret)


@page("developers")
async def webhooks_rotate(ctx: Ctx) -> Response:
    endpoint_id = _uuid_param(ctx, "endpoint_id", "webhook endpoint")
    try:
        row, secret = await rotate_webhook_secret(
            ctx.platform.engine, ctx.platform.secrets, ctx.caller, endpoint_id, 86400
        )
    except ServiceError as exc:
        raise missing("webhook endpoint") from exc
    await ctx.audit("webhook_secret_rotated", row.id)
    return await _webhooks_page(ctx, secret=secret)


@page("developers")
async def webhooks_status(ctx: Ctx) -> Response:
    endpoint_id = _uuid_param(ctx, "endpoint_id", "webhook endpoint")
    status = "disabled" if ctx.field("status") == "disabled" else "enabled"
    try:
        changes = WebhookEndpointUpdate(status=status).changes()
        allowed = ctx.platform.settings.private_webhooks_allowed
        await update_webhook_endpoint(ctx.platform.engine, ctx.caller, endpoint_id, changes, allow_private=allowed)
    except ServiceError as exc:
        raise missing("webhook endpoint") from exc
    await ctx.audit(f"webhook_endpoint_{status}", endpoint_id)
    return see("/dashboard/developers/webhooks?notice=" + quote(f"Endpoint {status}."))


@page()
async def events(ctx: Ctx) -> Response:
    rows = await newest_events(ctx.platform.engine, ctx.merchant_id, ctx.livemode)
    return ctx.page("events.html", rows=rows)


async def _event(ctx: Ctx) -> Any:
    event_id = _uuid_param(ctx, "event_id", "event")
    row = await find_event(ctx.platform.engine, ctx.merchant_id, ctx.livemode, event_id)
    if row is None:
        raise missing("event")
    return row


@page()
async def event(ctx: Ctx) -> Response:
    row = await _event(ctx)
    deliveries = await event_deliveries(ctx.platform.engine, row["id"])
    return ctx.page("event.html", e=row, deliveries=deliveries, data=json.dumps(row["data"], indent=2, sort_keys=True))


@page("developers")
async def event_redeliver(ctx: Ctx) -> Response:
    row = await _event(ctx)
    count = await redeliver(ctx.platform.engine, row, ctx.platform.clock.now())
    await ctx.audit("event_redelivered", row["id"], detail=str(count))
    return see(f"/dashboard/developers/events/{row['id']}?notice=" + quote(f"Queued to {count} endpoint(s)."))


@page()
async def requests(ctx: Ctx) -> Response:
    wanted = ctx.request.query_params.get("request_id", "").strip()[:64]
    rows = await newest_api_requests(ctx.platform.engine, ctx.merchant_id, ctx.livemode, wanted or None)
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
