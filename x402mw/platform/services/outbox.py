"""The transactional outbox: an event is written in the transaction that makes the change it reports,
and the webhook worker (:mod:`x402mw.platform.webhooks.delivery`) delivers it afterwards."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.webhooks import EVENT_TYPES

__all__ = ["event_row", "record_event"]


def event_row(*, merchant_id: str, livemode: bool, type: str, data: dict[str, Any], at: datetime) -> dict[str, Any]:
    """The ``events`` row of a new event ``type`` (one of `EVENT_TYPES`, which merchants subscribe to)."""
    if type not in EVENT_TYPES:
        raise ValueError(f"{type!r} is not in x402mw.platform.webhooks.EVENT_TYPES")
    return {
        "id": new_id(),
        "merchant_id": merchant_id,
        "livemode": livemode,
        "type": type,
        "data": data,
        "created_at": at,
    }


async def record_event(
    conn: AsyncConnection, *, merchant_id: str, livemode: bool, type: str, data: dict[str, Any], at: datetime
) -> str:
    """Write the event ``type`` with ``data`` for the merchant, in ``conn``'s transaction; its id."""
    row = event_row(merchant_id=merchant_id, livemode=livemode, type=type, data=data, at=at)
    await conn.execute(tables.events.insert(), row)
    return str(row["id"])
