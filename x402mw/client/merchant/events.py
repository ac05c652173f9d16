"""``/events``: what happened to the merchant's objects (the webhook outbox), and redelivery."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from x402mw.client.merchant.calls import Call, Listing, path
from x402mw.client.merchant.resource import (
    APIObject,
    Collection,
    Mode,
    Resource,
    operation,
    paginated,
)


class EventDelivery(APIObject):
    """The delivery of an event to one webhook endpoint. ``status`` is ``pending``, ``delivered`` or
    ``failed``; ``attempts`` holds one entry per try."""

    id: str
    endpoint_id: str
    status: str
    attempts: list[dict[str, Any]] = []
    last_status_code: int | None = None
    next_attempt_at: datetime | None = None
    delivered_at: datetime | None = None


class Event(APIObject):
    """An event, as delivered to webhooks: ``type`` (``payment_intent.succeeded``, ...) and ``data``
    (e.g. ``{"paymentIntent": {...}}``, as JSON). ``deliveries`` is set by `Events.retrieve` only."""

    id: str
    object: str = "event"
    type: str
    created_at: datetime
    livemode: bool
    data: dict[str, Any]
    deliveries: list[EventDelivery] | None = None


class EventRedelivery(APIObject):
    """The answer of `Events.redeliver`: ``redelivered`` deliveries were scheduled again."""

    id: str
    object: str = "event"
    redelivered: int


_events = Collection("/events", Event, "event")


class Events(Resource[Mode]):
    """``client.events``: retrieve and list events, and deliver one again."""

    @operation
    def retrieve(self, event_id: str) -> Call[Event]:
        return _events.retrieve(event_id)

    @operation
    def redeliver(self, event_id: str, *, idempotency_key: str | None = None) -> Call[EventRedelivery]:
        """Deliver the event again to every endpoint that subscribes to it now."""
        return Call(
            "POST",
            path("/events/{}/redeliver", event_id),
            EventRedelivery.model_validate,
            idempotency_key=idempotency_key,
        )

    @paginated
    def list(
        self,
        *,
        type: str | None = None,
        limit: int | None = None,
        starting_after: str | None = None,
        ending_before: str | None = None,
    ) -> Call[Listing[Event]]:
        """Events, newest first; ``type`` keeps one event type."""
        return _events.list(type=type, limit=limit, starting_after=starting_after, ending_before=ending_before)
