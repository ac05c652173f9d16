"""The transactional outbox: an event is written in the transaction that makes the change it reports,
and the webhook worker (:mod:`x402mw.platform.webhooks.delivery`) delivers it afterwards.

An event is owed to the endpoints of its merchant and mode that exist, enabled, when it is recorded.
An event recorded while its account has no enabled endpoint is owed to nobody, so it is written
already fanned out: the worker never has to touch it (most accounts have no endpoint, and for them
this spares a second write of every event).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Insert, bindparam, case, exists, null
from sqlalchemy.ext.asyncio import AsyncConnection

from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.services.reports.rollups import apply_events

EVENT_TYPES: tuple[str, ...] = (
    "agent_payment.settled",
    "channel.claimed",
    "channel.settled",
    "channel.refunded",
    "payment_intent.created",
    "payment_intent.canceled",
    "payment_intent.expired",
    "payment_intent.processing",
    "payment_intent.succeeded",
    "payment_intent.refunded",
    "payment_intent.reverted",
    "refund.processing",
    "refund.completed",
    "refund.failed",
    "subscription.created",
    "subscription.renewed",
    "subscription.past_due",
    "subscription.canceled",
    "subscription.expired",
    "email.failed",
)
"""The types of event the platform records, which merchants subscribe their webhook endpoints to."""


def event_row(*, merchant_id: str, livemode: bool, type: str, data: dict[str, Any], at: datetime) -> dict[str, Any]:
    """The ``events`` row of a new event ``type`` (one of `EVENT_TYPES`, which merchants subscribe to)."""
    if type not in EVENT_TYPES:
        raise ValueError(f"{type!r} is not in EVENT_TYPES")
    return {
        "id": new_id(),
        "merchant_id": merchant_id,
        "livemode": livemode,
        "type": type,
        "data": data,
        "created_at": at,
    }


def _insert_statement() -> Insert:
    events, endpoints = tables.events, tables.webhook_endpoints
    listened = exists().where(
        endpoints.c.merchant_id == bindparam("owner"),
        endpoints.c.livemode == bindparam("owner_livemode", type_=events.c.livemode.type),
        endpoints.c.status == "enabled",
    )
    # One statement: which events nobody listens to is decided row by row, without a round trip.
    return events.insert().values(
        fanned_out_at=case((listened, null()), else_=bindparam("recorded_at", type_=events.c.created_at.type))
    )


_INSERT = _insert_statement()


def _parameters(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**row, "owner": row["merchant_id"], "owner_livemode": row["livemode"], "recorded_at": row["created_at"]}
        for row in rows
    ]


def insert_events(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Write ``rows`` (from `event_row`) in ``conn``'s transaction; those of an account without an
    enabled endpoint are written fanned out already."""
    if rows:
        conn.execute(_INSERT, _parameters(rows))
        apply_events(conn, rows)  # the reports' rollups, in the same transaction


async def record_event(
    conn: AsyncConnection, *, merchant_id: str, livemode: bool, type: str, data: dict[str, Any], at: datetime
) -> str:
    """Write the event ``type`` with ``data`` for the merchant, in ``conn``'s transaction; its id."""
    row = event_row(merchant_id=merchant_id, livemode=livemode, type=type, data=data, at=at)
    await conn.execute(_INSERT, _parameters([row])[0])
    await conn.run_sync(apply_events, [row])  # the reports' rollups, in the same transaction
    return str(row["id"])
