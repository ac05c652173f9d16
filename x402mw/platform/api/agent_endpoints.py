"""``/agent/endpoints``: the resources a merchant sells to agents per request (spec 2.5)."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, WithJsonSchema, field_validator
from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from x402mw.platform.api.auth import authenticate
from x402mw.platform.api.bodies import PatchBody, parse_body, path_uuid, read_json
from x402mw.platform.api.errors import ApiError
from x402mw.platform.api.fields import MINOR_SCHEMA, NonZeroAddress, ResourceUrl, minor_units, resource_url
from x402mw.platform.api.pagination import list_page
from x402mw.platform.api.responses import ModelResponse
from x402mw.platform.api.state import platform_of
from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentEndpoint, utcnow
from x402mw.platform.objects import agents as objects
from x402mw.platform.services.chains import ChainHandle
from x402mw.platform.services.endpoints import find_endpoint
from x402mw.platform.services.merchants import Caller

__all__ = ["endpoint_of", "load_endpoint", "routes"]

MinorUnits = Annotated[int, WithJsonSchema(MINOR_SCHEMA)]
CURRENCY_PATTERN = "^(?:[Uu][Ss][Dd][Cc]|[Ee][Uu][Rr][Cc])$"
"""``USDC`` or ``EURC``, in any case (``USDT`` has no EIP-3009 and is refused with its own code)."""
FIXED_NEEDS_AMOUNT: dict[str, Any] = {  # fixed pricing (the default) needs an amount
    "if": {"properties": {"pricingMode": {"const": "fixed"}}},
    "then": {"required": ["amountMinor"], "properties": {"amountMinor": {"not": {"type": "null"}}}},
}


class _EndpointFields(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    _v_url = field_validator("resourceUrl", check_fields=False)(resource_url)
    _v_amount = field_validator("amountMinor", mode="before", check_fields=False)(minor_units)


class EndpointCreate(_EndpointFields):
    model_config = ConfigDict(json_schema_extra=FIXED_NEEDS_AMOUNT)

    name: str = Field(min_length=1, max_length=200)
    resourceUrl: ResourceUrl
    chainId: StrictInt
    currency: Annotated[str, WithJsonSchema({"type": "string", "pattern": CURRENCY_PATTERN})]
    payoutAddress: NonZeroAddress
    pricingMode: Literal["fixed", "dynamic"] = "fixed"
    amountMinor: MinorUnits | None = None
    releasePolicy: Literal["included", "confirmed"] = "included"
    maxTimeoutSeconds: StrictInt = Field(default=300, ge=30, le=3600)


class EndpointUpdate(_EndpointFields, PatchBody):
    model_config = ConfigDict(
        json_schema_extra={
            "not": {  # fixed pricing and no amount, in one request
                "required": ["pricingMode", "amountMinor"],
                "properties": {"pricingMode": {"const": "fixed"}, "amountMinor": {"type": "null"}},
            }
        }
    )
    CLEARABLE = frozenset({"amountMinor"})  # a dynamic endpoint has no fixed amount

    name: str | None = Field(default=None, min_length=1, max_length=200)
    resourceUrl: ResourceUrl | None = None
    payoutAddress: NonZeroAddress | None = None
    pricingMode: Literal["fixed", "dynamic"] | None = None
    amountMinor: MinorUnits | None = None
    releasePolicy: Literal["included", "confirmed"] | None = None
    maxTimeoutSeconds: StrictInt | None = Field(default=None, ge=30, le=3600)


def _chain_for(request: Request, caller: Caller, chain_id: int, currency: str) -> ChainHandle:
    platform = platform_of(request)
    symbol = currency.upper()
    if symbol == "USDT":
        raise ApiError(
            400,
            "unsupported_currency",
            "USDT cannot be used for agent payments: it has no EIP-3009 transferWithAuthorization. Use USDC or EURC.",
            param="currency",
        )
    if symbol not in ("USDC", "EURC"):
        raise ApiError(400, "parameter_invalid", "currency must be USDC or EURC", param="currency")
    chain = platform.chains.get(chain_id)
    if chain is None:
        supported = ", ".join(str(c.chain_id) for c in platform.chains)
        raise ApiError(
            400,
            "unsupported_chain",
            f"chainId {chain_id} is not settled by this platform (supported: {supported})",
            param="chainId",
        )
    if chain.livemode != caller.livemode:
        kind = "live" if chain.livemode else "test"
        raise ApiError(
            400,
            "livemode_mismatch",
            f"chainId {chain_id} is a {kind} network; use a {kind} API key for it",
            param="chainId",
        )
    if chain.asset(symbol) is None:
        raise ApiError(
            400, "unsupported_currency", f"{symbol} is not available on chainId {chain_id}", param="currency"
        )
    return chain


def endpoint_of(row: Any, chain: ChainHandle | None) -> objects.AgentEndpoint:
    """The public form of an agent endpoint; its token's details come from ``chain`` (None: a
    chain the platform no longer serves)."""
    asset = chain.asset(row.currency) if chain else None
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
        amount_minor=row.amount_minor,
        release_policy=row.release_policy,
        max_timeout_seconds=row.max_timeout_seconds,
        livemode=bool(row.livemode),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _answer(row: Any, chain: ChainHandle | None, status_code: int = 200) -> ModelResponse:
    return ModelResponse(objects.AgentEndpointEnvelope(endpoint=endpoint_of(row, chain)), status_code)


async def load_endpoint(conn: AsyncConnection, caller: Caller, endpoint_id: str) -> Row[Any]:
    """The caller's endpoint, or 404 (another merchant's endpoint is indistinguishable from none)."""
    row = await find_endpoint(conn, caller.merchant_id, caller.livemode, endpoint_id)
    if row is None:
        raise ApiError.missing("agent endpoint", endpoint_id)
    return row


async def create(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(EndpointCreate, await read_json(request))
    chain = _chain_for(request, caller, body.chainId, body.currency)
    if body.pricingMode == "fixed" and body.amountMinor is None:
        raise ApiError(400, "parameter_missing", "amountMinor is required with fixed pricing", param="amountMinor")
    now = utcnow()
    row = AgentEndpoint(
        merchant_id=caller.merchant_id,
        livemode=caller.livemode,
        name=body.name,
        resource_url=body.resourceUrl,
        chain_id=body.chainId,
        currency=body.currency.upper(),
        payout_address=body.payoutAddress,
        payout_history=[body.payoutAddress],
        pricing_mode=body.pricingMode,
        amount_minor=body.amountMinor,
        release_policy=body.releasePolicy,
        max_timeout_seconds=body.maxTimeoutSeconds,
        created_at=now,
        updated_at=now,
    )
    async with platform_of(request).engine.begin() as conn:
        await conn.execute(tables.agent_endpoints.insert(), row.model_dump())
    return _answer(row, chain, 201)


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
    table = tables.agent_endpoints
    changes = body.changes()
    async with platform.engine.begin() as conn:
        row = await load_endpoint(conn, caller, path_uuid(request, "endpoint_id", "agent endpoint"))
        pricing = changes.get("pricingMode", row.pricing_mode)
        amount = changes.get("amountMinor", row.amount_minor)
        if pricing == "fixed" and amount is None:
            if "pricingMode" in changes and "amountMinor" in changes:  # the request contradicts itself
                raise ApiError(
                    400, "parameter_missing", "amountMinor is required with fixed pricing", param="amountMinor"
                )
            # the request is fine, but not with what the endpoint already is
            raise ApiError(
                409,
                "endpoint_needs_amount",
                "With fixed pricing the endpoint needs an amount: send amountMinor too, or pricingMode 'dynamic'",
                param="amountMinor",
            )
        values: dict[str, Any] = {"updated_at": utcnow()}
        names = {
            "name": "name",
            "resourceUrl": "resource_url",
            "pricingMode": "pricing_mode",
            "amountMinor": "amount_minor",
            "releasePolicy": "release_policy",
            "maxTimeoutSeconds": "max_timeout_seconds",
            "payoutAddress": "payout_address",
        }
        for key, value in changes.items():
            values[names[key]] = value
        if "payoutAddress" in changes:
            history = list(row.payout_history or [])
            if changes["payoutAddress"] not in history:
                history.append(changes["payoutAddress"])
            values["payout_history"] = history
        await conn.execute(table.update().where(table.c.id == row.id).values(**values))
        row = await load_endpoint(conn, caller, row.id)
    platform.endpoints.invalidate()
    return _answer(row, platform.chains.get(row.chain_id))


async def list_endpoints(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    platform = platform_of(request)
    table = tables.agent_endpoints
    async with platform.engine.connect() as conn:
        data, more = await list_page(
            conn, table, caller.owns(table), request, lambda r: endpoint_of(r, platform.chains.get(r.chain_id))
        )
    return ModelResponse(objects.AgentEndpointList(data=data, has_more=more))


routes = [
    Route("/agent/endpoints", create, methods=["POST"]),
    Route("/agent/endpoints", list_endpoints, methods=["GET"]),
    Route("/agent/endpoints/{endpoint_id}", retrieve, methods=["GET"]),
    Route("/agent/endpoints/{endpoint_id}", update, methods=["PATCH"]),
]
