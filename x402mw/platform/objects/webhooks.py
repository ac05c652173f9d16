"""The webhook objects of the API: endpoints, events, and their deliveries."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from x402mw.platform.objects.base import Envelope, ListPage, ResponseModel, Timestamp, Url, Uuid, omitted_if_none


class WebhookEndpoint(ResponseModel):
    """A URL receiving the merchant's events, signed with Standard Webhooks."""

    id: str
    object: Literal["webhook_endpoint"] = "webhook_endpoint"
    url: Url
    enabled_events: list[str]
    description: str | None
    status: Literal["enabled", "disabled"]
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp
    secret: str | None = omitted_if_none(
        pattern="^whsec_", description="the signing secret; answered only by create and rotate-secret"
    )


class WebhookEndpointEnvelope(Envelope):
    """A webhook endpoint, as its operations answer it."""

    webhook_endpoint: WebhookEndpoint


class WebhookEndpointList(ListPage[WebhookEndpoint]):
    """A page of WebhookEndpoint objects, newest first."""


class DeletedWebhookEndpoint(ResponseModel):
    """A webhook endpoint that was deleted."""

    id: str
    object: Literal["webhook_endpoint"] = "webhook_endpoint"
    deleted: Literal[True] = True


class Event(ResponseModel):
    """Something that happened, as delivered to webhooks."""

    id: Uuid = Field(description="also the `webhook-id` header of its deliveries")
    object: Literal["event"] = "event"
    type: str = Field(description="e.g. `agent_payment.settled`, `payment_intent.canceled`")
    created_at: Timestamp
    livemode: bool
    data: dict[str, Any] = Field(description="the objects the event is about, e.g. `agentPayment`")


class EventList(ListPage[Event]):
    """A page of Event objects, newest first."""


class DeliveryAttempt(ResponseModel):
    """One POST of an event to an endpoint."""

    at: Timestamp
    status_code: int | None
    error: str | None = Field(description="the network error when there was no answer")
    duration_ms: int
    response_excerpt: str | None = Field(
        default=None, description="the first 300 bytes of the receiver's answer (as UTF-8, invalid bytes replaced)"
    )


class WebhookDelivery(ResponseModel):
    """One event owed to one webhook endpoint."""

    id: str
    endpoint_id: str
    status: Literal["pending", "delivered", "failed"]
    attempts: list[DeliveryAttempt] = Field(description="the latest 50 attempts")
    last_status_code: int | None
    next_attempt_at: Timestamp | None
    delivered_at: Timestamp | None


class EventWithDeliveries(Event):
    """An event and its delivery to each endpoint."""

    deliveries: list[WebhookDelivery]


class EventWithDeliveriesEnvelope(Envelope):
    """An event, as its operation answers it."""

    event: EventWithDeliveries


class Redelivery(ResponseModel):
    """How many endpoints an event is owed to again."""

    object: Literal["event"] = "event"
    id: str
    redelivered: int
