"""Agent endpoints: each with this month's usage and earnings, and its recent agent payments with
their receipts and the challenges they answered."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import func, select
from starlette.responses import Response
from starlette.routing import Route

from x402mw.platform.api.fields import is_uuid
from x402mw.platform.dashboard.web import Ctx, missing, page
from x402mw.platform.db import tables
from x402mw.protocol.prices import format_amount

__all__ = ["routes"]


def _month_start(ctx: Ctx) -> Any:
    return ctx.platform.clock.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)


@page()
async def endpoints(ctx: Ctx) -> Response:
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
    return ctx.page("agents.html", rows=rows, usage=usage, fmt=lambda v: format_amount(int(v), 6))


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
    Route("/agents", endpoints, methods=["GET"]),
    Route("/agents/{agent_endpoint_id}", endpoint, methods=["GET"]),
]
