"""``/events``: the merchant's events (the webhook outbox), their deliveries, and redelivery."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection
from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.db import tables
from x402mw.platform.http.bodies import path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.pagination import list_answer
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import LIST_PARAMS, ApiRoute, Operation, enum, query
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.webhooks import (
    EventList,
    EventWithDeliveries,
    EventWithDeliveriesEnvelope,
    Redelivery,
    WebhookDelivery,
)
from x402mw.platform.services.merchants import Caller
from x402mw.platform.webhooks import EVENT_TYPES
from x402mw.platform.webhooks.delivery import event_of, redeliver


def _delivery_of(row: Any) -> WebhookDelivery:
    return WebhookDelivery(
        id=row.id,
        endpoint_id=row.endpoint_id,
        status=row.status,
        attempts=row.attempts,
        last_status_code=row.last_status_code,
        next_attempt_at=row.next_attempt_at,
        delivered_at=row.delivered_at,
    )


async def _load(conn: AsyncConnection, caller: Caller, event_id: str) -> Any:
    table = tables.events
    row = (await conn.execute(select(table).where(table.c.id == event_id, *caller.owns(table)))).mappings().first()
    if row is None:
        raise HttpError.missing("event", event_id)
    return row


async def list_events(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    table = tables.events
    filters = caller.owns(table)
    kind = request.query_params.get("type")
    if kind is not None:
        if kind not in EVENT_TYPES:
            raise HttpError(
                400, "parameter_invalid", f"type must be an event type: {', '.join(EVENT_TYPES)}", param="type"
            )
        filters.append(table.c.type == kind)
    platform = platform_of(request)
    return await list_answer(platform.engine, table, filters, request, event_of, EventList)


async def retrieve(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    deliveries = tables.webhook_deliveries
    async with platform_of(request).engine.connect() as conn:
        row = await _load(conn, caller, path_uuid(request, "event_id", "event"))
        attempts = await conn.execute(
            select(deliveries).where(deliveries.c.event_id == row["id"]).order_by(deliveries.c.created_at)
        )
    event = EventWithDeliveries(**dict(event_of(row)), deliveries=[_delivery_of(d) for d in attempts])
    return ModelResponse(EventWithDeliveriesEnvelope(event=event))


async def redeliver_event(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    for name in await read_json(request, allow_empty=True):
        raise HttpError(400, "parameter_unknown", f"Received unknown parameter: {name[:80]}", param=name[:80])
    platform = platform_of(request)
    async with platform.engine.connect() as conn:
        row = await _load(conn, caller, path_uuid(request, "event_id", "event"))
    count = await redeliver(platform.engine, row, platform.clock.now())
    return ModelResponse(Redelivery(id=row["id"], redelivered=count))


_TAG = "Events"
routes = [
    ApiRoute(
        "GET",
        "/events",
        list_events,
        Operation(
            id="listEvents",
            tag=_TAG,
            summary="List events",
            description="Newest first.",
            answer=EventList,
            parameters=[*LIST_PARAMS, query("type", "only events of this type", enum(*EVENT_TYPES))],
            errors=(400, 404),
        ),
    ),
    ApiRoute(
        "GET",
        "/events/{event_id}",
        retrieve,
        Operation(
            id="retrieveEvent",
            tag=_TAG,
            summary="Retrieve an event and its deliveries",
            answer=EventWithDeliveriesEnvelope,
            errors=(404,),
        ),
    ),
    ApiRoute(
        "POST",
        "/events/{event_id}/redeliver",
        redeliver_event,
        Operation(
            id="redeliverEvent",
            tag=_TAG,
            summary="Redeliver an event",
            description="Owes the event again, from now and for three more days, to every enabled endpoint whose "
            "filter matches; `redelivered` counts them. Takes no parameters.",
            answer=Redelivery,
            errors=(404,),
        ),
    ),
]
