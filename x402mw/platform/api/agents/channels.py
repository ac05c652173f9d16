"""``/agent/channels``: the payment channels (``batch-settlement``) paying the merchant's endpoints."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from x402mw.platform.api.auth import authenticate
from x402mw.platform.db import tables
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.pagination import list_answer, query_id
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import LIST_PARAMS, UUID, ApiRoute, Operation, query
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects import channels as objects


def channel_of(row: Any) -> objects.AgentChannel:
    """The public form of a ``payment_channels`` row."""
    withdrawal = None
    if row.withdraw_requested_at:
        withdrawal = objects.ChannelWithdrawal(
            amount_minor=row.withdraw_amount,
            requested_at=row.withdraw_requested_at,
            finishes_at=row.withdraw_requested_at + row.withdraw_delay,
        )
    return objects.AgentChannel(
        id=row.id,
        endpoint_id=row.endpoint_id,
        network=f"eip155:{row.chain_id}",
        currency=row.currency,
        asset=row.token,
        payer=row.payer,
        payer_authorizer=row.payer_authorizer,
        receiver=row.receiver,
        receiver_authorizer=row.receiver_authorizer,
        withdraw_delay_seconds=row.withdraw_delay,
        deposited_minor=row.deposited,
        balance_minor=row.balance,
        charged_minor=row.charged,
        signed_max_minor=row.signed_max,
        claimed_minor=row.claimed,
        settled_minor=row.settled,
        refunded_minor=row.refunded,
        unclaimed_minor=max(0, row.charged - row.claimed),
        pending_withdrawal=withdrawal,
        last_request_at=row.last_request_at,
        livemode=bool(row.livemode),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def list_channels(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    table = tables.payment_channels
    filters = caller.owns(table)
    endpoint = query_id(request, "endpointId")
    if endpoint is not None:
        filters.append(table.c.endpoint_id == endpoint)
    platform = platform_of(request)
    return await list_answer(platform.engine, table, filters, request, channel_of, objects.AgentChannelList)


def _channel_id(request: Request) -> str:
    raw = str(request.path_params["channel_id"]).lower()
    body = raw[2:] if raw.startswith("0x") else ""
    if len(body) != 64 or any(c not in "0123456789abcdef" for c in body):
        raise HttpError.missing("channel", raw[:80])
    return raw


async def retrieve_channel(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    channel_id = _channel_id(request)
    row = await platform_of(request).channels.find(caller.merchant_id, caller.livemode, channel_id)
    if row is None:
        raise HttpError.missing("channel", channel_id)
    return ModelResponse(objects.AgentChannelEnvelope(channel=channel_of(row)))


_TAG = "Agent channels"
routes = [
    ApiRoute(
        "GET",
        "/agent/channels",
        list_channels,
        Operation(
            id="listAgentChannels",
            tag=_TAG,
            summary="List payment channels",
            description="The payment channels (`batch-settlement`) that paid the merchant's endpoints, newest "
            "first: what each was charged off-chain and what the chain claimed, settled and refunded.",
            answer=objects.AgentChannelList,
            parameters=[*LIST_PARAMS, query("endpointId", "only this endpoint's channels", UUID)],
            errors=(400, 404),
        ),
    ),
    ApiRoute(
        "GET",
        "/agent/channels/{channel_id}",
        retrieve_channel,
        Operation(
            id="retrieveAgentChannel",
            tag=_TAG,
            summary="Retrieve a payment channel",
            description="The channel by its id (0x and 64 hex digits).",
            answer=objects.AgentChannelEnvelope,
            errors=(404,),
        ),
    ),
]
