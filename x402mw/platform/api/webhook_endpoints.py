"""``/webhook-endpoints``: where a merchant receives events, with an event filter and a signing secret.

The secret (``whsec_…``) is answered only by create and ``rotate-secret``; it is stored, since every
delivery is signed with it, and never shown by reads.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, StrictInt, WithJsonSchema, field_validator
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncConnection
from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id, utcnow
from x402mw.platform.http.bodies import PatchBody, parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import HttpUrl, http_url
from x402mw.platform.http.pagination import list_answer
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import LIST_PARAMS, ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.webhooks import (
    DeletedWebhookEndpoint,
    WebhookEndpoint,
    WebhookEndpointEnvelope,
    WebhookEndpointList,
)
from x402mw.platform.services.merchants import Caller
from x402mw.platform.timestamps import iso
from x402mw.platform.webhooks import EVENT_TYPES
from x402mw.platform.webhooks.delivery import new_secret
from x402mw.platform.webhooks.destinations import blocked_reason

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

_MAX_PREVIOUS_SECRETS = 5


def _events(value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    for name in value:
        if name != "*" and name not in EVENT_TYPES:
            raise ValueError(f"unknown event type {name[:64]!r} (use one of {', '.join(EVENT_TYPES)}, or '*')")
    if "*" in value and len(value) > 1:
        raise ValueError("'*' must be alone")
    return list(dict.fromkeys(value))


EventTypes = Annotated[
    list[str],
    WithJsonSchema(
        {
            "type": "array",
            "items": {"type": "string", "enum": [*EVENT_TYPES, "*"]},
            "minItems": 1,
            "maxItems": len(EVENT_TYPES),
            "if": {"contains": {"const": "*"}},  # "*" stands alone
            "then": {"maxItems": 1},
        }
    ),
]


class _Fields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    _v_url = field_validator("url", check_fields=False)(http_url)
    _v_events = field_validator("enabledEvents", check_fields=False)(_events)


class WebhookEndpointCreate(_Fields):
    url: HttpUrl = Field(description="absolute http(s) URL receiving the POSTed events")
    enabledEvents: EventTypes = Field(
        min_length=1,
        max_length=len(EVENT_TYPES),
        description='event types to receive (e.g. `agent_payment.settled`), or `["*"]` for all',
    )
    description: str | None = Field(default=None, max_length=500, description="free text, at most 500 characters")


class WebhookEndpointUpdate(_Fields, PatchBody):
    CLEARABLE = frozenset({"description"})

    url: HttpUrl | None = Field(default=None, description="absolute http(s) URL receiving the POSTed events")
    enabledEvents: EventTypes | None = Field(
        default=None,
        min_length=1,
        max_length=len(EVENT_TYPES),
        description='event types to receive (e.g. `agent_payment.settled`), or `["*"]` for all',
    )
    description: str | None = Field(default=None, max_length=500, description="free text, at most 500 characters")
    status: Literal["enabled", "disabled"] | None = Field(
        default=None, description="`disabled` stops deliveries (pending ones wait); `enabled` resumes them"
    )


class SecretRotation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expiresInSeconds: StrictInt = Field(
        default=86400,
        ge=0,
        le=604800,
        description="how long the previous secret keeps signing deliveries next to the new one, 0–604800 (7 "
        "days); default 86400",
    )


def webhook_endpoint_of(row: Any, *, secret: str | None = None) -> WebhookEndpoint:
    """The public form of a webhook endpoint; with ``secret`` (create and rotate-secret only)."""
    return WebhookEndpoint(
        id=row.id,
        url=row.url,
        enabled_events=row.enabled_events,
        description=row.description,
        status=row.status,
        livemode=bool(row.livemode),
        created_at=row.created_at,
        updated_at=row.updated_at,
        secret=secret,
    )


def _answer(row: Any, *, secret: str | None = None, status_code: int = 200) -> ModelResponse:
    return ModelResponse(WebhookEndpointEnvelope(webhook_endpoint=webhook_endpoint_of(row, secret=secret)), status_code)


async def _load(conn: AsyncConnection, caller: Caller, endpoint_id: str) -> Any:
    table = tables.webhook_endpoints
    row = (await conn.execute(table.select().where(table.c.id == endpoint_id, *caller.owns(table)))).first()
    if row is None:
        raise HttpError.missing("webhook endpoint", endpoint_id)
    return row


def _allowed(platform: Platform, url: str, livemode: bool) -> None:
    allow_private = platform.settings.private_webhooks_allowed
    reason = blocked_reason(url, livemode=livemode, allow_private=allow_private)
    if reason is None:
        try:
            httpx.URL(url)
        except httpx.InvalidURL as exc:  # e.g. a host name IDNA refuses: no delivery could be sent
            reason = f"the HTTP client cannot send to it ({exc})"
    if reason is not None:
        raise HttpError(400, "url_not_allowed", f"Webhooks cannot be sent there: {reason}", param="url")


async def create(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(WebhookEndpointCreate, await read_json(request))
    row, secret = await create_endpoint(platform_of(request), caller, body)
    return _answer(row, secret=secret, status_code=201)


async def create_endpoint(platform: Platform, caller: Caller, body: WebhookEndpointCreate) -> tuple[Any, str]:
    """A new endpoint of the caller's, and its signing secret (the API's create, and the dashboard's)."""
    _allowed(platform, body.url, caller.livemode)
    now = platform.clock.now()  # the platform's clock: events are owed from then on
    secret = new_secret()
    table = tables.webhook_endpoints
    endpoint_id = new_id()
    values = {
        "id": endpoint_id,
        "merchant_id": caller.merchant_id,
        "livemode": caller.livemode,
        "url": body.url,
        "enabled_events": body.enabledEvents,
        "description": body.description,
        "status": "enabled",
        "secret": platform.secrets.seal(secret),
        "previous_secrets": [],
        "created_at": now,
        "updated_at": now,
    }
    async with platform.engine.begin() as conn:
        await conn.execute(table.insert(), values)
        row = await _load(conn, caller, endpoint_id)
    return row, secret


async def retrieve(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    async with platform_of(request).engine.connect() as conn:
        row = await _load(conn, caller, path_uuid(request, "webhook_endpoint_id", "webhook endpoint"))
    return _answer(row)


async def update(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(WebhookEndpointUpdate, await read_json(request))
    endpoint_id = path_uuid(request, "webhook_endpoint_id", "webhook endpoint")
    return _answer(await update_endpoint(platform_of(request), caller, endpoint_id, body))


async def update_endpoint(platform: Platform, caller: Caller, endpoint_id: str, body: WebhookEndpointUpdate) -> Any:
    """The endpoint with ``body``'s changes (the API's update, and the dashboard's)."""
    names = {"url": "url", "enabledEvents": "enabled_events", "description": "description", "status": "status"}
    values: dict[str, Any] = {"updated_at": utcnow()}
    for key, value in body.changes().items():
        values[names[key]] = value
    if "url" in values:
        _allowed(platform, values["url"], caller.livemode)
    table = tables.webhook_endpoints
    async with platform.engine.begin() as conn:
        row = await _load(conn, caller, endpoint_id)
        await conn.execute(table.update().where(table.c.id == row.id).values(**values))
        return await _load(conn, caller, row.id)


async def remove(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    table = tables.webhook_endpoints
    async with platform_of(request).engine.begin() as conn:
        row = await _load(conn, caller, path_uuid(request, "webhook_endpoint_id", "webhook endpoint"))
        deliveries = tables.webhook_deliveries
        await conn.execute(delete(deliveries).where(deliveries.c.endpoint_id == row.id))
        await conn.execute(delete(table).where(table.c.id == row.id))
    return ModelResponse(DeletedWebhookEndpoint(id=row.id))


async def rotate_secret(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(SecretRotation, await read_json(request, allow_empty=True))
    endpoint_id = path_uuid(request, "webhook_endpoint_id", "webhook endpoint")
    row, secret = await rotate_endpoint_secret(platform_of(request), caller, endpoint_id, body.expiresInSeconds)
    return _answer(row, secret=secret)


async def rotate_endpoint_secret(
    platform: Platform, caller: Caller, endpoint_id: str, keep_seconds: int
) -> tuple[Any, str]:
    """A new signing secret; the old one still signs for ``keep_seconds`` (the API's rotate-secret,
    and the dashboard's)."""
    now = utcnow()
    secret = new_secret()
    table = tables.webhook_endpoints
    async with platform.engine.begin() as conn:
        row = await _load(conn, caller, endpoint_id)
        previous = [old for old in row.previous_secrets or () if old["expiresAt"] > iso(now)]
        if keep_seconds > 0:
            expires = iso(now + timedelta(seconds=keep_seconds))
            previous.append({"secret": row.secret, "expiresAt": expires})
        previous = previous[-_MAX_PREVIOUS_SECRETS:]
        await conn.execute(
            table.update()
            .where(table.c.id == row.id)
            .values(secret=platform.secrets.seal(secret), previous_secrets=previous, updated_at=now)
        )
        row = await _load(conn, caller, row.id)
    return row, secret


async def list_webhook_endpoints(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    table = tables.webhook_endpoints
    return await list_answer(
        platform_of(request).engine, table, caller.owns(table), request, webhook_endpoint_of, WebhookEndpointList
    )


_TAG = "Webhook endpoints"
routes = [
    ApiRoute(
        "POST",
        "/webhook-endpoints",
        create,
        Operation(
            id="createWebhookEndpoint",
            tag=_TAG,
            summary="Create a webhook endpoint",
            description="Answers the signing `secret` (`whsec_…`): store it now, reads never show it again.",
            answer=WebhookEndpointEnvelope,
            status=201,
            body=WebhookEndpointCreate,
        ),
    ),
    ApiRoute(
        "GET",
        "/webhook-endpoints",
        list_webhook_endpoints,
        Operation(
            id="listWebhookEndpoints",
            tag=_TAG,
            summary="List webhook endpoints",
            description="Newest first.",
            answer=WebhookEndpointList,
            parameters=LIST_PARAMS,
            errors=(400, 404),
        ),
    ),
    ApiRoute(
        "GET",
        "/webhook-endpoints/{webhook_endpoint_id}",
        retrieve,
        Operation(
            id="retrieveWebhookEndpoint",
            tag=_TAG,
            summary="Retrieve a webhook endpoint",
            answer=WebhookEndpointEnvelope,
            errors=(404,),
        ),
    ),
    ApiRoute(
        "PATCH",
        "/webhook-endpoints/{webhook_endpoint_id}",
        update,
        Operation(
            id="updateWebhookEndpoint",
            tag=_TAG,
            summary="Update a webhook endpoint",
            description="An endpoint answering 410 is disabled by the platform; enable it again here.",
            answer=WebhookEndpointEnvelope,
            body=WebhookEndpointUpdate,
            errors=(404,),
        ),
    ),
    ApiRoute(
        "DELETE",
        "/webhook-endpoints/{webhook_endpoint_id}",
        remove,
        Operation(
            id="deleteWebhookEndpoint",
            tag=_TAG,
            summary="Delete a webhook endpoint",
            description="Its pending deliveries are dropped.",
            answer=DeletedWebhookEndpoint,
            errors=(404,),
        ),
    ),
    ApiRoute(
        "POST",
        "/webhook-endpoints/{webhook_endpoint_id}/rotate-secret",
        rotate_secret,
        Operation(
            id="rotateWebhookSecret",
            tag=_TAG,
            summary="Rotate the signing secret",
            description="Answers the new secret. Until `expiresInSeconds` have passed, deliveries carry one "
            "signature per valid secret, so receivers can switch without dropping events.",
            answer=WebhookEndpointEnvelope,
            body=SecretRotation,
            errors=(404,),
        ),
    ),
]
