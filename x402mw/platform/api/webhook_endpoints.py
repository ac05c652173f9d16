"""``/webhook-endpoints``: where a merchant receives events, with an event filter and a signing secret.

The secret (``whsec_…``) is answered only by create and ``rotate-secret``; it is stored, since every
delivery is signed with it, and never shown by reads.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.db import tables
from x402mw.platform.http.bodies import parse_body, path_uuid, read_json
from x402mw.platform.http.pagination import list_answer
from x402mw.platform.http.request_models.webhook_endpoints import (
    SecretRotation,
    WebhookEndpointCreate,
    WebhookEndpointUpdate,
)
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import LIST_PARAMS, ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.webhooks import (
    DeletedWebhookEndpoint,
    WebhookEndpoint,
    WebhookEndpointEnvelope,
    WebhookEndpointList,
)
from x402mw.platform.services.webhook_endpoints import (
    create_webhook_endpoint,
    delete_webhook_endpoint,
    find_webhook_endpoint,
    rotate_webhook_secret,
    update_webhook_endpoint,
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


def _endpoint_id(request: Request) -> str:
    return path_uuid(request, "webhook_endpoint_id", "webhook endpoint")


async def create(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(WebhookEndpointCreate, await read_json(request))
    platform = platform_of(request)
    row, secret = await create_webhook_endpoint(
        platform.engine,
        platform.secrets,
        caller,
        body.model_dump(),
        platform.clock.now(),  # the platform's clock: events are owed from then on
        allow_private=platform.settings.private_webhooks_allowed,
    )
    return _answer(row, secret=secret, status_code=201)


async def retrieve(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    return _answer(await find_webhook_endpoint(platform_of(request).engine, caller, _endpoint_id(request)))


async def update(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(WebhookEndpointUpdate, await read_json(request))
    endpoint_id = _endpoint_id(request)
    platform = platform_of(request)
    allow_private = platform.settings.private_webhooks_allowed
    row = await update_webhook_endpoint(
        platform.engine, caller, endpoint_id, body.changes(), allow_private=allow_private
    )
    return _answer(row)


async def remove(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    row = await delete_webhook_endpoint(platform_of(request).engine, caller, _endpoint_id(request))
    return ModelResponse(DeletedWebhookEndpoint(id=row.id))


async def rotate_secret(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(SecretRotation, await read_json(request, allow_empty=True))
    endpoint_id = _endpoint_id(request)
    platform = platform_of(request)
    row, secret = await rotate_webhook_secret(
        platform.engine, platform.secrets, caller, endpoint_id, body.expiresInSeconds
    )
    return _answer(row, secret=secret)


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
