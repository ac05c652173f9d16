"""``/webhook-endpoints``: where the platform delivers the merchant's events, and their secrets."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import Field

from x402mw.client.merchant.calls import Call, Listing, path
from x402mw.client.merchant.resource import (
    NOT_GIVEN,
    APIObject,
    Collection,
    Mode,
    NotGiven,
    Resource,
    operation,
    paginated,
    present,
)


class WebhookEndpoint(APIObject):
    """``enabled_events`` lists event types, or ``["*"]`` for all; ``status`` is ``enabled`` or
    ``disabled``. ``secret`` (``whsec_...``, verify deliveries with it) is set only in the answers of
    `WebhookEndpoints.create` and `WebhookEndpoints.rotate_secret`, and never shown in ``repr``."""

    id: str
    object: str = "webhook_endpoint"
    url: str
    enabled_events: list[str]
    description: str | None = None
    status: str
    livemode: bool
    created_at: datetime
    updated_at: datetime
    secret: str | None = Field(default=None, repr=False)


class DeletedWebhookEndpoint(APIObject):
    id: str
    object: str = "webhook_endpoint"
    deleted: bool


_endpoints = Collection("/webhook-endpoints", WebhookEndpoint, "webhookEndpoint")


class WebhookEndpoints(Resource[Mode]):
    """``client.webhook_endpoints``: create, retrieve, update, delete and list endpoints, and rotate
    their signing secrets."""

    @operation
    def create(
        self,
        *,
        url: str,
        enabled_events: Sequence[str],
        description: str | None = None,
        idempotency_key: str | None = None,
    ) -> Call[WebhookEndpoint]:
        """Start delivering ``enabled_events`` to ``url``; keep the answer's ``secret``."""
        body = present(url=url, enabled_events=list(enabled_events), description=description)
        return _endpoints.create(body, idempotency_key)

    @operation
    def retrieve(self, webhook_endpoint_id: str) -> Call[WebhookEndpoint]:
        return _endpoints.retrieve(webhook_endpoint_id)

    @operation
    def update(
        self,
        webhook_endpoint_id: str,
        *,
        url: str | None = None,
        enabled_events: Sequence[str] | None = None,
        description: str | NotGiven | None = NOT_GIVEN,
        status: Literal["enabled", "disabled"] | None = None,
    ) -> Call[WebhookEndpoint]:
        """Change the given fields only; ``description=None`` clears the description, ``status`` is
        ``enabled`` or ``disabled``."""
        body = present(url=url, enabled_events=None if enabled_events is None else list(enabled_events), status=status)
        if not isinstance(description, NotGiven):
            body["description"] = description
        return _endpoints.update(webhook_endpoint_id, body)

    @operation
    def delete(self, webhook_endpoint_id: str) -> Call[DeletedWebhookEndpoint]:
        return Call("DELETE", path("/webhook-endpoints/{}", webhook_endpoint_id), DeletedWebhookEndpoint.model_validate)

    @operation
    def rotate_secret(
        self,
        webhook_endpoint_id: str,
        *,
        expires_in_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> Call[WebhookEndpoint]:
        """A new secret (in the answer's ``secret``). Deliveries stay signed with the old one as well
        for ``expires_in_seconds`` (default one day, at most a week, 0 to drop it at once)."""
        body = present(expires_in_seconds=expires_in_seconds)
        return _endpoints.action(webhook_endpoint_id, "rotate-secret", body=body, idempotency_key=idempotency_key)

    @paginated
    def list(
        self, *, limit: int | None = None, starting_after: str | None = None, ending_before: str | None = None
    ) -> Call[Listing[WebhookEndpoint]]:
        return _endpoints.list(limit=limit, starting_after=starting_after, ending_before=ending_before)
