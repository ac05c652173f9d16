"""Agent endpoints: each with this month's usage and earnings, and its recent agent payments with
their receipts and the challenges they answered."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError
from sqlalchemy import func, select
from starlette.responses import Response
from starlette.routing import Route

from x402mw.platform.api.agents.endpoints import (
    EndpointCreate,
    EndpointUpdate,
    create_agent_endpoint,
    update_agent_endpoint,
)
from x402mw.platform.dashboard.web import Ctx, missing, page, problem, see
from x402mw.platform.db import tables
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.fields import is_uuid
from x402mw.protocol.prices import format_amount


def _month_start(ctx: Ctx) -> Any:
    return ctx.platform.clock.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _fields(ctx: Ctx) -> dict[str, Any]:
    """The form's fields as the API's body names them (empty ones left out)."""
    names = {
        "name": "name",
        "resource_url": "resourceUrl",
        "payout_address": "payoutAddress",
        "pricing_mode": "pricingMode",
        "amount_minor": "amountMinor",
        "release_policy": "releasePolicy",
    }
    return {api: ctx.field(form) for form, api in names.items() if ctx.field(form)}


@page("developers")
async def endpoints_create(ctx: Ctx) -> Response:
    chain = next((c for c in ctx.platform.chains if c.livemode == ctx.livemode), None)
    try:
        body = EndpointCreate.model_validate(
            {
                **_fields(ctx),
                "chainId": int(ctx.field("chain_id") or (chain.chain_id if chain else 0)),
                "currency": ctx.field("currency") or "USDC",
            }
        )
        row, _ = await create_agent_endpoint(ctx.platform, ctx.caller, body)
    except (ValidationError, HttpError, ValueError) as exc:
        message = problem(exc) if isinstance(exc, ValidationError | HttpError) else "chainId must be a number"
        return await _list(ctx, 400, error=message)
    await ctx.audit("agent_endpoint_created", row.id)
    return see(f"/dashboard/agents/{row.id}")


@page("developers")
async def endpoint_update(ctx: Ctx) -> Response:
    endpoint_id = str(ctx.request.path_params["agent_endpoint_id"]).lower()
    if not is_uuid(endpoint_id):
        raise missing("agent endpoint")
    try:
        body = EndpointUpdate.model_validate(_fields(ctx))
        await update_agent_endpoint(ctx.platform, ctx.caller, endpoint_id, body)
    except ValidationError as exc:
        return see(f"/dashboard/agents/{endpoint_id}?notice=" + quote(problem(exc)))
    except HttpError as exc:
        if exc.status == 404:
            raise missing("agent endpoint") from None
        return see(f"/dashboard/agents/{endpoint_id}?notice=" + quote(exc.message))
    await ctx.audit("agent_endpoint_updated", endpoint_id)
    return see(f"/dashboard/agents/{endpoint_id}?notice=" + quote("Saved."))


@page()
async def endpoints(ctx: Ctx) -> Response:
    return await _list(ctx)


async def _list(ctx: Ctx, status: int = 200, *, error: str = "") -> Response:
    e, p = tables.agent_endpoints, tables.agent_payments
    start = _month_start(ctx)
    async with ctx.platform.engine.connect() as conn:
        query = select(e).where(e.c.merchant_id == ctx.merchant_id, e.c.livemode == ctx.livemode)
        rows = list(await conn.execute(query.order_by(e.c.created_at.desc())))
        usage = {
            r.endpoint_id: (r.count, int(r.total or 0))
            for r in await conn.execute(
                select(p.c.endpoint_id, func.count().label("count"), func.sum(p.c.amount_minor).label("total"))
                .where(
                    p.c.merchant_id == ctx.merchant_id,
                    p.c.livemode == ctx.livemode,
                    p.c.status == "settled",
                    p.c.settled_at >= start,
                )
                .group_by(p.c.endpoint_id)
            )
        }
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
    e, p, c = tables.agent_endpoints, tables.agent_payments, tables.agent_challenges
    async with ctx.platform.engine.connect() as conn:
        query = select(e).where(
            e.c.id == endpoint_id.lower(), e.c.merchant_id == ctx.merchant_id, e.c.livemode == ctx.livemode
        )
        row = (await conn.execute(query)).first()
        if row is None:
            raise missing("agent endpoint")
        payments = list(
            await conn.execute(
                select(p, c.c.resource.label("challenge_resource"), c.c.expires_at.label("challenge_expires"))
                .outerjoin(c, c.c.id == p.c.challenge_id)
                .where(p.c.endpoint_id == row.id, p.c.merchant_id == ctx.merchant_id)
                .order_by(p.c.created_at.desc())
                .limit(50)
            )
        )
    start = _month_start(ctx)
    settled = [x for x in payments if x.status == "settled" and x.settled_at and x.settled_at >= start]
    return ctx.page(
        "agent.html",
        e=row,
        payments=payments,
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
