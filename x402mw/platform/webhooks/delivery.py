"""The webhook outbox worker: from ``events`` rows to signed POSTs, at least once.

Each round (`WebhookSender.deliver_due`) first *fans out* new events: one ``webhook_deliveries`` row per enabled
endpoint of the event's merchant and mode whose filter matches and that existed when the event was
recorded, in the transaction that marks the event ``fanned_out_at`` (an event of an account without
an enabled endpoint is recorded fanned out already: see :mod:`x402mw.platform.services.outbox`).
It then *claims* due deliveries (``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL, and everywhere
a conditional UPDATE of ``locked_until``, so two workers never send the same delivery at once) and
POSTs them. A 2xx marks a delivery delivered; anything else schedules a retry after
``5 s × 2^attempt`` (capped at 6 h, ±20 % jitter) until ``expires_at``, three days after the event,
when it is marked failed. A 410 disables the endpoint and fails its pending deliveries.

A `WebhookSender` holds what sending takes (the database, the clock, the sealed secrets' box, the HTTP
client, two settings); the platform (`x402mw.platform.runtime`) builds one and closes it.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import and_, exists, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from x402mw._version import __version__
from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.metrics import WEBHOOK_ATTEMPTS, WEBHOOK_SECONDS
from x402mw.platform.objects.webhooks import Event
from x402mw.platform.sealing import SecretBox
from x402mw.platform.services.webhook_destinations import resolved_blocked_reason
from x402mw.platform.timestamps import iso
from x402mw.protocol.webhook_signatures import sign_payload

RETRY_WINDOW = timedelta(days=3)
TIMEOUT_SECONDS = 10.0
_BASE_SECONDS = 5.0
_CAP_SECONDS = 6 * 3600.0
_BATCH = 100
_FAN_OUT_BATCH, _FAN_OUT_BATCHES = 500, 20  # up to 10,000 events a round
_CONCURRENCY = 10
_ATTEMPT_LOG = 50
EXCERPT_BYTES = 300  # how much of a receiver's answer each attempt keeps
_USER_AGENT = f"x402mw-webhooks/{__version__}"


def matches(enabled_events: Sequence[str], event_type: str) -> bool:
    return "*" in enabled_events or event_type in enabled_events


# Jitter from a generator of our own: the process-wide `random` state belongs to the application.
_JITTER = random.Random()


def backoff_seconds(attempt: int, rng: random.Random | None = None) -> float:
    """Delay after the ``attempt``-th failure (1-based): 5 s, 10 s, 20 s … capped at 6 h, ±20 %."""
    base = min(_BASE_SECONDS * 2 ** min(attempt - 1, 32), _CAP_SECONDS)
    return float(base * (rng or _JITTER).uniform(0.8, 1.2))


def event_of(event: Mapping[Any, Any]) -> Event:
    """The public form of an ``events`` row (``GET /events``)."""
    return Event(
        id=event["id"],
        type=event["type"],
        created_at=event["created_at"],
        livemode=bool(event["livemode"]),
        data=event["data"],
    )


def envelope(event: Mapping[Any, Any]) -> dict[str, Any]:
    """The delivered body: the event as the API answers it, but for ``object``:
    ``{id, type, createdAt, livemode, data}``."""
    return event_of(event).model_dump(mode="json", exclude={"object"})


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)  # SQLite answers naive UTC


def signing_secrets(endpoint: Mapping[Any, Any], now: datetime, box: SecretBox) -> list[str]:
    """The current secret, then every rotated-out one still inside its overlap (stored sealed)."""
    valid = [box.open(endpoint["secret"])]
    for old in endpoint["previous_secrets"] or ():
        if datetime.fromisoformat(old["expiresAt"]) > now:
            valid.append(box.open(old["secret"]))
    return valid


def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(follow_redirects=False)  # a 3xx is a failed attempt, never followed


@dataclass
class WebhookSender:
    """Delivers the webhooks that are due: `deliver_due` is one worker round."""

    engine: AsyncEngine
    clock: Clock
    secrets: SecretBox  # opens the endpoints' signing secrets, sealed at rest
    takeover_seconds: float  # after this, another worker takes over deliveries claimed by one that stopped
    private_allowed: bool  # whether endpoints may be on private networks (`resolved_blocked_reason`)
    client: httpx.AsyncClient = field(default_factory=_client)

    async def deliver_due(self, *, now: datetime | None = None) -> int:
        """One worker round: fan out new events, then send every due delivery. Returns how many were sent."""
        now = now or self.clock.now()
        await _fan_out(self.engine, now)
        # A worker owns the deliveries it claims while it sends them (each takes up to TIMEOUT_SECONDS);
        # should it stop, another worker takes them over after the platform's takeover time.
        claim = timedelta(seconds=TIMEOUT_SECONDS + self.takeover_seconds)
        claimed = await _claim(self.engine, now, claim)
        gate = asyncio.Semaphore(_CONCURRENCY)

        async def send(delivery_id: str) -> None:
            async with gate:
                await self._attempt(delivery_id, now)

        await asyncio.gather(*(send(delivery_id) for delivery_id in claimed))
        return len(claimed)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def _attempt(self, delivery_id: str, now: datetime) -> None:
        deliveries, endpoints, events = tables.webhook_deliveries, tables.webhook_endpoints, tables.events
        async with self.engine.connect() as conn:
            delivery = (await conn.execute(select(deliveries).where(deliveries.c.id == delivery_id))).mappings().one()
            endpoint = (
                (await conn.execute(select(endpoints).where(endpoints.c.id == delivery["endpoint_id"])))
                .mappings()
                .one()
            )
            event = (await conn.execute(select(events).where(events.c.id == delivery["event_id"]))).mappings().one()
        body = json.dumps(envelope(event), ensure_ascii=False, separators=(",", ":")).encode()
        stamp = int(self.clock.time())
        secrets = signing_secrets(endpoint, now, self.secrets)
        signature = " ".join(sign_payload(secret, event["id"], stamp, body) for secret in secrets)
        headers = {
            "webhook-id": event["id"],
            "webhook-timestamp": str(stamp),
            "webhook-signature": signature,
            "content-type": "application/json",
            "user-agent": _USER_AGENT,
        }
        status_code: int | None = None
        error: str | None = None
        excerpt = b""
        started = time.perf_counter()
        blocked = await resolved_blocked_reason(
            endpoint["url"], livemode=bool(endpoint["livemode"]), allow_private=self.private_allowed
        )
        if blocked is not None:
            error = f"BlockedDestination: {blocked}"
        else:
            try:
                async with self.client.stream(
                    "POST", endpoint["url"], content=body, headers=headers, timeout=TIMEOUT_SECONDS
                ) as response:
                    status_code = response.status_code
                    async for chunk in response.aiter_bytes():  # the start of the answer, for the dashboard
                        excerpt += chunk
                        if len(excerpt) >= EXCERPT_BYTES:
                            break
            except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL: stored before registration refused it
                error = type(exc).__name__
        log = {
            "at": iso(now),
            "statusCode": status_code,
            "error": error,
            "durationMs": round((time.perf_counter() - started) * 1000),
            "responseExcerpt": excerpt[:EXCERPT_BYTES].decode("utf-8", "replace") if excerpt else None,
        }
        attempt_count = delivery["attempt_count"] + 1
        values: dict[str, Any] = {
            "attempt_count": attempt_count,
            "attempts": [*delivery["attempts"], log][-_ATTEMPT_LOG:],
            "last_status_code": status_code,
            "locked_until": None,
            "updated_at": now,
        }
        if status_code is not None and 200 <= status_code < 300:
            values |= {"status": "delivered", "delivered_at": now, "next_attempt_at": None}
        elif status_code == 410:
            values |= {"status": "failed", "next_attempt_at": None}
        else:
            retry_at = now + timedelta(seconds=backoff_seconds(attempt_count))
            if retry_at > _aware(delivery["expires_at"]):
                values |= {"status": "failed", "next_attempt_at": None}
            else:
                values["next_attempt_at"] = retry_at
        WEBHOOK_ATTEMPTS.labels(values.get("status", "retrying")).inc()
        WEBHOOK_SECONDS.observe(time.perf_counter() - started)
        async with self.engine.begin() as conn:
            await conn.execute(update(deliveries).where(deliveries.c.id == delivery_id).values(**values))
            if status_code == 410:
                await conn.execute(
                    update(endpoints).where(endpoints.c.id == endpoint["id"]).values(status="disabled", updated_at=now)
                )
                await conn.execute(
                    update(deliveries)
                    .where(deliveries.c.endpoint_id == endpoint["id"], deliveries.c.status == "pending")
                    .values(status="failed", next_attempt_at=None, locked_until=None, updated_at=now)
                )


async def redeliver(engine: AsyncEngine, event: Mapping[Any, Any], now: datetime) -> int:
    """Owe ``event`` again, from now, to every enabled endpoint whose filter matches; returns their count."""
    events, deliveries = tables.events, tables.webhook_deliveries
    async with engine.begin() as conn:
        await conn.execute(
            update(events).where(events.c.id == event["id"], events.c.fanned_out_at.is_(None)).values(fanned_out_at=now)
        )
        targets = await _matching_endpoints(conn, event)
        existing = {
            row.endpoint_id: row.id
            for row in await conn.execute(
                select(deliveries.c.id, deliveries.c.endpoint_id).where(deliveries.c.event_id == event["id"])
            )
        }
        for endpoint_id in targets:
            if endpoint_id in existing:
                await conn.execute(
                    update(deliveries)
                    .where(deliveries.c.id == existing[endpoint_id])
                    .values(
                        status="pending",
                        next_attempt_at=now,
                        expires_at=now + RETRY_WINDOW,
                        locked_until=None,
                        updated_at=now,
                    )
                )
            else:
                await conn.execute(deliveries.insert(), _new_delivery(event, endpoint_id, now, now))
    return len(targets)


async def _matching_endpoints(conn: AsyncConnection, event: Mapping[Any, Any]) -> list[str]:
    endpoints = tables.webhook_endpoints
    rows = await conn.execute(
        select(endpoints.c.id, endpoints.c.enabled_events).where(
            endpoints.c.merchant_id == event["merchant_id"],
            endpoints.c.livemode == event["livemode"],
            endpoints.c.status == "enabled",
        )
    )
    return [row.id for row in rows if matches(row.enabled_events, event["type"])]


def _new_delivery(event: Mapping[Any, Any], endpoint_id: str, now: datetime, start: datetime) -> dict[str, Any]:
    return {
        "id": new_id(),
        "event_id": event["id"],
        "endpoint_id": endpoint_id,
        "merchant_id": event["merchant_id"],
        "livemode": event["livemode"],
        "status": "pending",
        "attempt_count": 0,
        "attempts": [],
        "next_attempt_at": now,
        "expires_at": start + RETRY_WINDOW,
        "created_at": now,
        "updated_at": now,
    }


async def _fan_out(engine: AsyncEngine, now: datetime) -> int:
    """Owe each new event to the matching endpoints; how many events were fanned out. A batch costs
    three statements however many events and endpoints it holds; a round takes batches until it has
    caught up or has taken `_FAN_OUT_BATCHES` of them (the rest waits for the next round)."""
    events, endpoints = tables.events, tables.webhook_endpoints
    # One statement takes a batch: the oldest events not yet fanned out (skipping those another
    # worker holds), marked and returned at once.
    oldest = (
        select(events.c.id)
        .where(events.c.fanned_out_at.is_(None))
        .order_by(events.c.created_at, events.c.id)
        .limit(_FAN_OUT_BATCH)
        .with_for_update(skip_locked=True)  # PostgreSQL; SQLite renders nothing
    )
    take = (
        update(events)
        .where(events.c.id.in_(oldest), events.c.fanned_out_at.is_(None))
        .values(fanned_out_at=now)
        .returning(events.c.id, events.c.merchant_id, events.c.livemode, events.c.type, events.c.created_at)
    )
    # Events of an account with no enabled endpoint are owed to nobody: marked in batches of their
    # own, without a row coming back.
    unheard = (
        select(events.c.id)
        .where(
            events.c.fanned_out_at.is_(None),
            ~exists().where(
                endpoints.c.merchant_id == events.c.merchant_id,
                endpoints.c.livemode == events.c.livemode,
                endpoints.c.status == "enabled",
            ),
        )
        .limit(_FAN_OUT_BATCH * 4)
        .with_for_update(skip_locked=True)
    )
    mark_unheard = (
        update(events).where(events.c.id.in_(unheard), events.c.fanned_out_at.is_(None)).values(fanned_out_at=now)
    )
    done = 0
    for _ in range(_FAN_OUT_BATCHES):
        async with engine.begin() as conn:
            skipped = (await conn.execute(mark_unheard)).rowcount
        done += skipped
        if skipped < _FAN_OUT_BATCH * 4:
            break
    for _ in range(_FAN_OUT_BATCHES):
        async with engine.begin() as conn:
            marked = (await conn.execute(take)).mappings().all()
            if not marked:
                break
            listening: dict[tuple[str, bool], list[tuple[str, list[str], datetime]]] = {}
            found = await conn.execute(
                select(
                    endpoints.c.id,
                    endpoints.c.merchant_id,
                    endpoints.c.livemode,
                    endpoints.c.enabled_events,
                    endpoints.c.created_at,
                )
                .where(endpoints.c.merchant_id.in_({event["merchant_id"] for event in marked}))
                .where(endpoints.c.status == "enabled")
                .order_by(endpoints.c.created_at)
            )
            for endpoint in found:
                owner = (endpoint.merchant_id, bool(endpoint.livemode))
                listening.setdefault(owner, []).append(
                    (endpoint.id, endpoint.enabled_events, _aware(endpoint.created_at))
                )
            owed = [
                # an event older than the retry window (a late fan-out) still gets half a window
                _new_delivery(event, endpoint_id, now, max(recorded, now - RETRY_WINDOW / 2))
                for event in marked
                for recorded in (_aware(event["created_at"]),)
                for endpoint_id, enabled_events, created in listening.get(
                    (event["merchant_id"], bool(event["livemode"])), []
                )
                # an endpoint is owed the events recorded once it exists (see x402mw.platform.services.outbox)
                if created <= recorded and matches(enabled_events, event["type"])
            ]
            if owed:
                await conn.execute(tables.webhook_deliveries.insert(), owed)
        done += len(marked)
        if len(marked) < _FAN_OUT_BATCH:
            break
    return done


async def _claim(engine: AsyncEngine, now: datetime, claim: timedelta) -> list[str]:
    deliveries, endpoints = tables.webhook_deliveries, tables.webhook_endpoints
    unlocked = or_(deliveries.c.locked_until.is_(None), deliveries.c.locked_until < now)
    due = and_(deliveries.c.status == "pending", deliveries.c.next_attempt_at <= now, unlocked)
    claimed = []
    async with engine.begin() as conn:
        candidates = await conn.execute(
            select(deliveries.c.id)
            .join(endpoints, endpoints.c.id == deliveries.c.endpoint_id)
            .where(due, endpoints.c.status == "enabled")
            .order_by(deliveries.c.next_attempt_at)
            .limit(_BATCH)
            .with_for_update(of=deliveries, skip_locked=True)  # PostgreSQL; SQLite renders nothing
        )
        for (delivery_id,) in list(candidates):
            taken = await conn.execute(
                update(deliveries).where(deliveries.c.id == delivery_id, due).values(locked_until=now + claim)
            )
            if taken.rowcount == 1:
                claimed.append(delivery_id)
    return claimed
