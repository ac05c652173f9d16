"""Webhook endpoints: where a merchant receives events, with an event filter and a signing secret,
made and changed by the API and the dashboard.

The secret (``whsec_…``) is handed back only by `create_webhook_endpoint` and `rotate_webhook_secret`;
it is stored sealed, since every delivery is signed with it.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import Row, delete
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id, utcnow
from x402mw.platform.sealing import SecretBox
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.merchants import Caller, newest_rows
from x402mw.platform.services.webhook_destinations import blocked_reason
from x402mw.platform.timestamps import iso

_MAX_PREVIOUS_SECRETS = 5
_COLUMNS = {"url": "url", "enabledEvents": "enabled_events", "description": "description", "status": "status"}


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` + base64 of 24 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def _missing(endpoint_id: str) -> ServiceError:
    return ServiceError(404, "resource_missing", f"No such webhook endpoint: '{endpoint_id[:80]}'", param="id")


async def _load(conn: AsyncConnection, caller: Caller, endpoint_id: str) -> Row[Any]:
    table = tables.webhook_endpoints
    row = (await conn.execute(table.select().where(table.c.id == endpoint_id, *caller.owns(table)))).first()
    if row is None:
        raise _missing(endpoint_id)
    return row


async def find_webhook_endpoint(engine: AsyncEngine, caller: Caller, endpoint_id: str) -> Row[Any]:
    """The caller's endpoint; ServiceError 404 when it has none of that id in its mode."""
    async with engine.connect() as conn:
        return await _load(conn, caller, endpoint_id)


def _allowed(url: str, livemode: bool, allow_private: bool) -> None:
    reason = blocked_reason(url, livemode=livemode, allow_private=allow_private)
    if reason is None:
        try:
            httpx.URL(url)
        except httpx.InvalidURL as exc:  # e.g. a host name IDNA refuses: no delivery could be sent
            reason = f"the HTTP client cannot send to it ({exc})"
    if reason is not None:
        raise ServiceError(400, "url_not_allowed", f"Webhooks cannot be sent there: {reason}", param="url")


async def create_webhook_endpoint(
    engine: AsyncEngine,
    box: SecretBox,
    caller: Caller,
    fields: Mapping[str, Any],
    now: datetime,
    *,
    allow_private: bool,
) -> tuple[Row[Any], str]:
    """A new endpoint of the caller's from ``fields`` (as the API's create body names them: ``url``,
    ``enabledEvents``, ``description``), owed events from ``now``, and its signing secret.
    ServiceError 400 ``url_not_allowed``: a URL no delivery may go to (`blocked_reason`)."""
    _allowed(fields["url"], caller.livemode, allow_private)
    secret = new_secret()
    table = tables.webhook_endpoints
    endpoint_id = new_id()
    values = {
        "id": endpoint_id,
        "merchant_id": caller.merchant_id,
        "livemode": caller.livemode,
        "url": fields["url"],
        "enabled_events": fields["enabledEvents"],
        "description": fields.get("description"),
        "status": "enabled",
        "secret": box.seal(secret),
        "previous_secrets": [],
        "created_at": now,
        "updated_at": now,
    }
    async with engine.begin() as conn:
        await conn.execute(table.insert(), values)
        row = await _load(conn, caller, endpoint_id)
    return row, secret


async def update_webhook_endpoint(
    engine: AsyncEngine, caller: Caller, endpoint_id: str, changes: Mapping[str, Any], *, allow_private: bool
) -> Row[Any]:
    """The endpoint with ``changes`` (as the API's update body names them; only what was sent).
    ServiceError: 404 for an endpoint the caller does not have, 400 ``url_not_allowed``."""
    values: dict[str, Any] = {"updated_at": utcnow()}
    for key, value in changes.items():
        values[_COLUMNS[key]] = value
    if "url" in values:
        _allowed(values["url"], caller.livemode, allow_private)
    table = tables.webhook_endpoints
    async with engine.begin() as conn:
        row = await _load(conn, caller, endpoint_id)
        await conn.execute(table.update().where(table.c.id == row.id).values(**values))
        return await _load(conn, caller, row.id)


async def delete_webhook_endpoint(engine: AsyncEngine, caller: Caller, endpoint_id: str) -> Row[Any]:
    """Delete the endpoint and its pending deliveries; its last row. ServiceError 404 as above."""
    table, deliveries = tables.webhook_endpoints, tables.webhook_deliveries
    async with engine.begin() as conn:
        row = await _load(conn, caller, endpoint_id)
        await conn.execute(delete(deliveries).where(deliveries.c.endpoint_id == row.id))
        await conn.execute(delete(table).where(table.c.id == row.id))
    return row


async def rotate_webhook_secret(
    engine: AsyncEngine, box: SecretBox, caller: Caller, endpoint_id: str, keep_seconds: int
) -> tuple[Row[Any], str]:
    """A new signing secret; the old one still signs for ``keep_seconds``. ServiceError 404 as above."""
    now = utcnow()
    secret = new_secret()
    table = tables.webhook_endpoints
    async with engine.begin() as conn:
        row = await _load(conn, caller, endpoint_id)
        previous = [old for old in row.previous_secrets or () if old["expiresAt"] > iso(now)]
        if keep_seconds > 0:
            expires = iso(now + timedelta(seconds=keep_seconds))
            previous.append({"secret": row.secret, "expiresAt": expires})
        previous = previous[-_MAX_PREVIOUS_SECRETS:]
        await conn.execute(
            table.update()
            .where(table.c.id == row.id)
            .values(secret=box.seal(secret), previous_secrets=previous, updated_at=now)
        )
        row = await _load(conn, caller, row.id)
    return row, secret


async def newest_webhook_endpoints(engine: AsyncEngine, merchant_id: str, livemode: bool) -> list[Row[Any]]:
    """The merchant's endpoints in this mode, newest first."""
    return await newest_rows(engine, tables.webhook_endpoints, merchant_id, livemode)
