"""``/agent/endpoints``: the resources a merchant sells to agents per request (spec 2.5)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, WithJsonSchema, field_validator
from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection
from starlette.requests import Request
from starlette.responses import Response

from x402mw.platform.api.auth import authenticate
from x402mw.platform.db import tables
from x402mw.platform.http.bodies import PatchBody, parse_body, path_uuid, read_json
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import (
    MINOR_SCHEMA,
    NAME_PATTERN,
    NonZeroAddress,
    ResourceUrl,
    minor_units,
    resource_url,
)
from x402mw.platform.http.pagination import list_answer
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import ETAG, IF_NONE_MATCH, LIST_PARAMS, NOT_MODIFIED, ApiRoute, Operation
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects import agents as objects
from x402mw.platform.services.chains import ChainHandle
from x402mw.platform.services.endpoints import create_endpoint, find_endpoint, update_endpoint
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.merchants import Caller

if TYPE_CHECKING:
    from x402mw.platform.runtime import Platform

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
    _v_amount = field_validator("amountMinor", "maxAmountMinor", mode="before", check_fields=False)(minor_units)


METERED_NEEDS_CEILING: dict[str, Any] = {  # a ceiling (maxAmountMinor) for metered pricing, and only then
    "if": {"properties": {"pricingMode": {"const": "metered"}}, "required": ["pricingMode"]},
    "then": {
        "required": ["maxAmountMinor"],
        "properties": {"maxAmountMinor": {"not": {"type": "null"}}, "amountMinor": {"type": "null"}},
    },
    "else": {"properties": {"maxAmountMinor": {"type": "null"}}},
}


# The descriptions EndpointCreate and EndpointUpdate share: one text per field in the OpenAPI document.
_NAME = "1–200 characters, no control characters"
_RESOURCE_URL = "absolute http(s) URL of the paid resource, or `mcp://tool/<name>` for an MCP tool"
_PAYOUT_ADDRESS = "EVM address receiving the funds; snapshotted in each challenge"
_PRICING_MODE = (
    "`fixed`, `dynamic` (the middleware's amount callback prices each request) or `metered` "
    "(the handler reports what each request used, up to `maxAmountMinor`)"
)
_AMOUNT_MINOR = 'integer string of minor units (`"10000"` is 0.01 USDC); required with `fixed` pricing'
_RELEASE_POLICY = "`included` (serve once the transfer is in a block) or `confirmed` (wait for confirmations)"
_MAX_TIMEOUT = "validity of challenges and authorizations in seconds, 30–3600"
_DISCOVERABLE = "list the endpoint's settled resources in the public discovery catalogue; default false"


class EndpointCreate(_EndpointFields):
    model_config = ConfigDict(json_schema_extra={"allOf": [FIXED_NEEDS_AMOUNT, METERED_NEEDS_CEILING]})

    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN, description=_NAME)
    resourceUrl: ResourceUrl = Field(description=_RESOURCE_URL)
    chainId: StrictInt = Field(description="EVM chain id settled by this platform (see `GET /v1/x402/supported`)")
    currency: Annotated[str, WithJsonSchema({"type": "string", "pattern": CURRENCY_PATTERN})] = Field(
        description="`USDC` or `EURC`; `USDT` is refused (no EIP-3009)"
    )
    payoutAddress: NonZeroAddress = Field(description=_PAYOUT_ADDRESS)
    pricingMode: Literal["fixed", "dynamic", "metered"] = Field(default="fixed", description=_PRICING_MODE)
    amountMinor: MinorUnits | None = Field(default=None, description=_AMOUNT_MINOR)
    maxAmountMinor: MinorUnits | None = Field(
        default=None,
        description="integer string of minor units: the most one request may cost (the `upto` ceiling agents "
        "sign); required with `metered` pricing, and only then",
    )
    releasePolicy: Literal["included", "confirmed"] = Field(default="included", description=_RELEASE_POLICY)
    maxTimeoutSeconds: StrictInt = Field(default=300, ge=30, le=3600, description=_MAX_TIMEOUT)
    discoverable: StrictBool = Field(default=False, description=_DISCOVERABLE)


class EndpointUpdate(_EndpointFields, PatchBody):
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "not": {  # fixed pricing and no amount, in one request
                        "required": ["pricingMode", "amountMinor"],
                        "properties": {"pricingMode": {"const": "fixed"}, "amountMinor": {"type": "null"}},
                    }
                },
                {  # a ceiling only with metered pricing, a fixed amount never with it, in one request
                    "if": {"properties": {"pricingMode": {"const": "metered"}}, "required": ["pricingMode"]},
                    "then": {"properties": {"amountMinor": {"type": "null"}}},
                    "else": {
                        "if": {"required": ["pricingMode"]},
                        "then": {"properties": {"maxAmountMinor": {"type": "null"}}},
                    },
                },
            ]
        }
    )
    CLEARABLE = frozenset({"amountMinor"})  # a dynamic endpoint has no fixed amount

    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=NAME_PATTERN, description=_NAME)
    resourceUrl: ResourceUrl | None = Field(default=None, description=_RESOURCE_URL)
    payoutAddress: NonZeroAddress | None = Field(default=None, description=_PAYOUT_ADDRESS)
    pricingMode: Literal["fixed", "dynamic", "metered"] | None = Field(default=None, description=_PRICING_MODE)
    amountMinor: MinorUnits | None = Field(default=None, description=_AMOUNT_MINOR)
    maxAmountMinor: MinorUnits | None = Field(
        default=None,
        description="integer string of minor units: the most one request may cost (the `upto` ceiling agents "
        "sign); only for a `metered` endpoint",
    )
    releasePolicy: Literal["included", "confirmed"] | None = Field(default=None, description=_RELEASE_POLICY)
    maxTimeoutSeconds: StrictInt | None = Field(default=None, ge=30, le=3600, description=_MAX_TIMEOUT)
    discoverable: StrictBool | None = Field(default=None, description=_DISCOVERABLE)


@contextlib.contextmanager
def _answered() -> Iterator[None]:
    """A service's refusal as the API answers it (the dashboard shows its message)."""
    try:
        yield
    except ServiceError as exc:
        raise HttpError(exc.status, exc.code, exc.message, param=exc.param) from None


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
        raise HttpError.missing("agent endpoint", endpoint_id)
    return row


async def create(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    body = parse_body(EndpointCreate, await read_json(request))
    row, chain = await create_agent_endpoint(platform_of(request), caller, body)
    return _answer(row, chain, 201)


async def create_agent_endpoint(platform: Platform, caller: Caller, body: EndpointCreate) -> tuple[Any, ChainHandle]:
    """A new agent endpoint of the caller's (the API's create, and the dashboard's)."""
    with _answered():
        row = await create_endpoint(
            platform.engine,
            (chain.network for chain in platform.chains),
            caller.merchant_id,
            caller.livemode,
            body.model_dump(),
        )
    chain = platform.chains.get(row.chain_id)
    assert chain is not None
    return row, chain


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
    row = await update_agent_endpoint(platform, caller, endpoint_id, body)
    return _answer(row, platform.chains.get(row.chain_id))


async def update_agent_endpoint(platform: Platform, caller: Caller, endpoint_id: str, body: EndpointUpdate) -> Any:
    """The endpoint with ``body``'s changes (the API's update, and the dashboard's)."""
    with _answered():
        row = await update_endpoint(platform.engine, caller.merchant_id, caller.livemode, endpoint_id, body.changes())
    platform.endpoints.invalidate()
    return row


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
