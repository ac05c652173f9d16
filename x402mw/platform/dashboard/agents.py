"""Agent endpoints: each with this month's usage and earnings, and its recent agent payments with
their receipts and the challenges they answered."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError
from starlette.responses import Response
from starlette.routing import Route

from x402mw.errors import PriceError
from x402mw.platform.dashboard.web import Ctx, missing, page, problem, see
from x402mw.platform.http.fields import is_uuid
from x402mw.platform.http.request_models.agent_endpoints import EndpointCreate, EndpointUpdate
from x402mw.platform.services.endpoints import create_endpoint, list_endpoints, update_endpoint
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.payments import endpoint_payments, endpoint_usage
from x402mw.protocol.prices import format_amount, to_atomic

COIN_DECIMALS = 6  # USDC and EURC


def _month_start(ctx: Ctx) -> Any:
    return ctx.platform.clock.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _fields(ctx: Ctx, currency: str) -> dict[str, Any]:
    """The form's fields as the API's body names them (empty ones left out); prices are typed as
    decimals of the coin (``0.01``, or ``0.01 USDC``) and sent in minor units. A price that is not
    one raises `PriceError`."""
    names = {
        "name": "name",
        "resource_url": "resourceUrl",
        "payout_address": "payoutAddress",
        "pricing_mode": "pricingMode",
        "release_policy": "releasePolicy",
    }
    fields = {api: ctx.field(form) for form, api in names.items() if ctx.field(form)}
    for form, api in (("price", "amountMinor"), ("max_price", "maxAmountMinor")):
        if text := ctx.field(form).strip():
            fields[api] = str(to_atomic(text, decimals=COIN_DECIMALS, symbol=currency))
    return fields


@page("developers")
async def endpoints_create(ctx: Ctx) -> Response:
    chains = ctx.platform.chains
    chain = next((c for c in chains if c.livemode == ctx.livemode), None)
    currency = ctx.field("currency") or "USDC"
    try:
        body = EndpointCreate.model_validate(
            {
                **_fields(ctx, currency),
                "chainId": int(ctx.field("chain_id") or (chain.chain_id if chain else 0)),
                "currency": currency,
            }
        )
        networks = (c.network for c in chains)
        row = await create_endpoint(ctx.platform.engine, networks, ctx.merchant_id, ctx.livemode, body.model_dump())
    except PriceError as exc:
        return await _list(ctx, 400, error=f"Price: {exc}")
    except (ValidationError, ServiceError, ValueError) as exc:
        message = problem(exc) if isinstance(exc, ValidationError | ServiceError) else "chainId must be a number"
        return await _list(ctx, 400, error=message)
    await ctx.audit("agent_endpoint_created", row.id)
    return see(f"/dashboard/agents/{row.id}")


@page("developers")
async def endpoint_update(ctx: Ctx) -> Response:
    endpoint_id = str(ctx.request.path_params["agent_endpoint_id"]).lower()
    if not is_uuid(endpoint_id):
        raise missing("agent endpoint")
    row = await ctx.platform.endpoints.get(ctx.merchant_id, ctx.livemode, endpoint_id, fresh=True)
    if row is None:
        raise missing("agent endpoint")
    try:
        body = EndpointUpdate.model_validate(_fields(ctx, row.currency))
        await update_endpoint(ctx.platform.engine, ctx.merchant_id, ctx.livemode, endpoint_id, body.changes())
    except PriceError as exc:
        return see(f"/dashboard/agents/{endpoint_id}?notice=" + quote(f"Price: {exc}"))
    except ValidationError as exc:
        return see(f"/dashboard/agents/{endpoint_id}?notice=" + quote(problem(exc)))
    except ServiceError as exc:
        if exc.status == 404:
            raise missing("agent endpoint") from None
        return see(f"/dashboard/agents/{endpoint_id}?notice=" + quote(exc.message))
    ctx.platform.endpoints.invalidate()
    await ctx.audit("agent_endpoint_updated", endpoint_id)
    return see(f"/dashboard/agents/{endpoint_id}?notice=" + quote("Saved."))


@page()
async def endpoints(ctx: Ctx) -> Response:
    return await _list(ctx)


async def _list(ctx: Ctx, status: int = 200, *, error: str = "") -> Response:
    engine = ctx.platform.engine
    rows = await list_endpoints(engine, ctx.merchant_id, ctx.livemode)
    usage = await endpoint_usage(engine, ctx.merchant_id, ctx.livemode, _month_start(ctx))
    chains = [c for c in ctx.platform.chains if c.livemode == ctx.livemode]
    return ctx.page(
        "agents.html",
        status,
        rows=rows,
        usage=usage,
        fmt=lambda v: format_amount(int(v), 6),
        error=error,
        chains=chains,
    )


@page()
async def endpoint(ctx: Ctx) -> Response:
    endpoint_id = str(ctx.request.path_params["agent_endpoint_id"])
    if not is_uuid(endpoint_id):
        raise missing("agent endpoint")
    row = await ctx.platform.endpoints.get(ctx.merchant_id, ctx.livemode, endpoint_id.lower(), fresh=True)
    if row is None:
        raise missing("agent endpoint")
    payments = await endpoint_payments(ctx.platform.engine, ctx.merchant_id, row.id)
    channels = await ctx.platform.channels.of_endpoint(ctx.merchant_id, ctx.livemode, row.id)
    start = _month_start(ctx)
    settled = [x for x in payments if x.status == "settled" and x.settled_at and x.settled_at >= start]
    return ctx.page(
        "agent.html",
        e=row,
        payments=payments,
        channels=channels,
        month_count=len(settled),
        month_total=format_amount(sum(int(x.amount_minor) for x in settled), 6),
        fmt=lambda v: format_amount(int(v), 6),
        receipt=lambda r: json.dumps(r, indent=2, sort_keys=True) if r else "",
    )


routes = [
    Route("/agents", endpoints, methods=["GET"], include_in_schema=False),
    Route("/agents", endpoints_create, methods=["POST"], include_in_schema=False),
    Route("/agents/{agent_endpoint_id}", endpoint, methods=["GET"], include_in_schema=False),
    Route("/agents/{agent_endpoint_id}", endpoint_update, methods=["POST"], include_in_schema=False),
]
