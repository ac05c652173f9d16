"""``/agent/endpoints``: the resources a merchant sells to agents per request (spec 2.5)."""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection
from starlette.requests import Request
from starlette.responses import Response

from x402mw.platform.api.auth import authenticate
from x402mw.platform.db import tables
from x402mw.platform.http.bodies import parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.pagination import list_answer
from x402mw.platform.http.request_models.agent_endpoints import (
    EndpointCreate,
    EndpointUpdate,
)
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import ETAG, IF_NONE_MATCH, LIST_PARAMS, NOT_MODIFIED, ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects import agents as objects
from x402mw.platform.services.chains import ChainHandle
from x402mw.platform.services.endpoints import create_endpoint, find_endpoint, update_endpoint
from x402mw.platform.services.merchants import Caller


def endpoint_of(row: Any, chain: ChainHandle | None) -> objects.AgentEndpoint:
    """The public form of an agent endpoint; its token's details come from ``chain`` (None: a
    chain the platform no longer serves)."""
    asset = chain.asset(row.currency) if chain else None
    metered = row.pricing_mode == "metered"  # its amount_minor column holds the ceiling
    return objects.AgentEndpoint(
        id=row.id,
        name=row.name,
        resource_url=row.resource_url,
        chain_id=row.chain_id,
        network=f"eip155:{row.chain_id}",
        currency=row.currency,
        asset=asset.address if asset else None,
        asset_name=asset.eip712_name if asset else None,
        asset_version=asset.eip712_version if asset else None,
        decimals=asset.decimals if asset else 6,
        payout_address=row.payout_address,
        pricing_mode=row.pricing_mode,
        amount_minor=None if metered else row.amount_minor,
        max_amount_minor=row.amount_minor if metered else None,
        facilitator_address=chain.facilitator.address if metered and chain else None,
        release_policy=row.release_policy,
        max_timeout_seconds=row.max_timeout_seconds,
        discoverable=bool(row.discoverable),
        channel=_channel_of(row),
        livemode=bool(row.livemode),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _channel_of(row: Any) -> objects.AgentEndpointChannel | None:
    if row.channel_withdraw_delay is None or row.channel_receiver_authorizer is None:
        return None
    return objects.AgentEndpointChannel(
        receiver_authorizer=row.channel_receiver_authorizer,
        min_deposit_minor=row.channel_min_deposit,
        withdraw_delay_seconds=row.channel_withdraw_delay,
        only=bool(row.channel_only),
        idle_refund_seconds=row.channel_idle_refund_seconds,
    )


def _answer(row: Any, chain: ChainHandle | None, status_code: int = 200) -> ModelResponse:
    return ModelResponse(objects.AgentEndpointEnvelope(endpoint=endpoint_of(row, chain)), status_code)


async def load_endpoint(conn: AsyncConnection, caller: Caller, endpoint_id: str) -> Row[Any]:
    """The caller's endpoint, or 404 (another merchant's endpoint is indistinguishable from none)."""
    row = await find_endpoint(conn, caller.merchant_id, caller.livemode, endpoint_id)
    if row is None:
        raise HttpError.missing("agent endpoint", endpoint_id)
    return row


async def create(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(EndpointCreate, await read_json(request))
    platform = platform_of(request)
    networks = (chain.network for chain in platform.chains)
    authorizer = None
    if body.channel is not None:
        authorizer = await platform.channels.authorizers.address(caller.merchant_id, caller.livemode)
    row = await create_endpoint(
        platform.engine, networks, caller.merchant_id, caller.livemode, body.model_dump(), channel_authorizer=authorizer
    )
    return _answer(row, platform.chains.get(row.chain_id), 201)


async def retrieve(request: Request) -> Response:
    """The endpoint, with an ``ETag`` of its answer; ``304`` without a body when ``If-None-Match``
    names the current one (the seller middleware revalidates its endpoints' terms every second)."""
    caller = await authenticate(request)
    platform = platform_of(request)
    async with platform.engine.connect() as conn:
        row = await load_endpoint(conn, caller, path_uuid(request, "endpoint_id", "agent endpoint"))
    answer = _answer(row, platform.chains.get(row.chain_id))
    etag = '"' + hashlib.sha256(answer.body).hexdigest()[:32] + '"'
    if etag in (tag.strip().removeprefix("W/") for tag in request.headers.get("if-none-match", "").split(",")):
        return Response(status_code=304, headers={"ETag": etag})
    answer.headers["ETag"] = etag
    return answer


async def update(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(EndpointUpdate, await read_json(request))
    platform = platform_of(request)
    endpoint_id = path_uuid(request, "endpoint_id", "agent endpoint")
    changes = body.changes()
    authorizer = None
    if changes.get("channel") is not None:
        authorizer = await platform.channels.authorizers.address(caller.merchant_id, caller.livemode)
    row = await update_endpoint(
        platform.engine, caller.merchant_id, caller.livemode, endpoint_id, changes, channel_authorizer=authorizer
    )
    platform.endpoints.invalidate()
    return _answer(row, platform.chains.get(row.chain_id))


async def list_endpoints(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    platform = platform_of(request)
    table = tables.agent_endpoints
    return await list_answer(
        platform.engine,
        table,
        caller.owns(table),
        request,
        lambda r: endpoint_of(r, platform.chains.get(r.chain_id)),
        objects.AgentEndpointList,
    )


_TAG = "Agent endpoints"
routes = [
    ApiRoute(
        "POST",
        "/agent/endpoints",
        create,
        Operation(
            id="createAgentEndpoint",
            tag=_TAG,
            summary="Create an agent endpoint",
            description="A test key may only use test networks, a live key only live ones (`400 livemode_mismatch`).",
            answer=objects.AgentEndpointEnvelope,
            status=201,
            body=EndpointCreate,
        ),
    ),
    ApiRoute(
        "GET",
        "/agent/endpoints",
        list_endpoints,
        Operation(
            id="listAgentEndpoints",
            tag=_TAG,
            summary="List agent endpoints",
            description="Newest first. An unknown cursor id is a 404.",
            answer=objects.AgentEndpointList,
            parameters=LIST_PARAMS,
            errors=(400, 404),
        ),
    ),
    ApiRoute(
        "GET",
        "/agent/endpoints/{endpoint_id}",
        retrieve,
        Operation(
            id="retrieveAgentEndpoint",
            tag=_TAG,
            summary="Retrieve an agent endpoint",
            description="The answer carries an `ETag`; sent back in `If-None-Match`, it is answered `304` without "
            "a body while the endpoint is unchanged (the seller middleware revalidates its terms so).",
            answer=objects.AgentEndpointEnvelope,
            parameters=[IF_NONE_MATCH],
            errors=(404,),
            headers=ETAG,
            answers=[NOT_MODIFIED],
        ),
    ),
    ApiRoute(
        "PATCH",
        "/agent/endpoints/{endpoint_id}",
        update,
        Operation(
            id="updateAgentEndpoint",
            tag=_TAG,
            summary="Update an agent endpoint",
            description="Any field but `chainId` and `currency`. A new `payoutAddress` applies to challenges issued "
            "afterwards; payments of challenges issued before still settle to the old one. 409 "
            "`endpoint_needs_amount` when the endpoint would be `fixed` without `amountMinor`.",
            answer=objects.AgentEndpointEnvelope,
            body=EndpointUpdate,
            errors=(404, 409),
        ),
    ),
]
