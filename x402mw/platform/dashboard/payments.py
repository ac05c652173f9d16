"""Payments: the list of every kind (orders, subscription payments, agent payments: filters, search,
cursor pages), one payment with its events (an order) or its receipt (an agent payment), refunds."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from starlette.responses import Response
from starlette.routing import Route

from x402mw.platform.dashboard.web import Ctx, PageError, missing, page, see
from x402mw.platform.http.fields import is_uuid
from x402mw.platform.http.values import calendar_day, moment, whole_number
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.events import order_events
from x402mw.platform.services.payment_intents import amount_text, read_payment_intent
from x402mw.platform.services.payments import (
    AGENT_STATUSES,
    KINDS,
    ORDER_STATUSES,
    PAGE_SIZE,
    PaymentFilters,
    find_agent_payment,
    list_payments,
)
from x402mw.platform.services.refunds import newest_refunds, order_refunds
from x402mw.protocol.prices import format_amount

T = TypeVar("T")
STATUSES = ORDER_STATUSES + tuple(s for s in AGENT_STATUSES if s not in ORDER_STATUSES)
_STAGES = {
    "payment_intent.created": 0,
    "payment_intent.processing": 10,
    "payment_intent.succeeded": 20,
    "payment_intent.canceled": 20,
    "payment_intent.expired": 20,
    "refund.processing": 30,
    "refund.completed": 40,
    "refund.failed": 40,
    "payment_intent.refunded": 45,
}
EXPLORERS = {
    1: "https://etherscan.io",
    8453: "https://basescan.org",
    84532: "https://sepolia.basescan.org",
    11155111: "https://sepolia.etherscan.io",
    137: "https://polygonscan.com",
    42161: "https://arbiscan.io",
}


def _filter(ctx: Ctx, name: str, value: str, read: Callable[[str], T | None]) -> T | None:
    """A filter's value read by ``read``: None when it is empty; a 400 when ``read`` does not take it."""
    if not value:
        return None
    found = read(value)
    if found is None:
        raise PageError(400, f"The {name} filter is not one this page can use.", action="bad_request")
    return found


def _cursor(value: str) -> tuple[datetime, str] | None:
    stamp, _, ident = value.partition("_")
    when = moment(stamp)
    return None if when is None or not is_uuid(ident) else (when, ident.lower())


def _stamp(value: datetime) -> str:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()


@page()
async def payments(ctx: Ctx) -> Response:
    q = ctx.request.query_params
    filters = {
        name: q.get(name, "").strip()[:200]
        for name in ("kind", "status", "coin", "network", "since", "until", "link", "customer", "q")
    }
    chain_id = _filter(ctx, "network", filters["network"], whole_number)
    since = _filter(ctx, "from", filters["since"], calendar_day)
    until = _filter(ctx, "to", filters["until"], calendar_day)
    after = _filter(ctx, "page", q.get("after", ""), _cursor)
    kind = next((k for k in KINDS if k == filters["kind"]), None)
    chosen = PaymentFilters(
        kind=kind,
        status=filters["status"] if filters["status"] in STATUSES else None,
        currency=filters["coin"] or None,
        chain_id=chain_id,
        since=since,
        until=until + timedelta(days=1) if until else None,
        link_id=filters["link"] if is_uuid(filters["link"]) else None,
        customer=filters["customer"] or None,
        search=filters["q"] or None,
    )
    rows, more = await list_payments(ctx.platform.engine, ctx.merchant_id, ctx.livemode, chosen, after=after)
    next_url = None
    if more:
        last = rows[-1]
        kept = {k: v for k, v in filters.items() if v}
        next_url = "/dashboard/payments?" + urlencode({**kept, "after": f"{_stamp(last.created_at)}_{last.id}"})
    coins = sorted({a.symbol for c in ctx.platform.chains for a in c.network.assets.values()})
    networks = [(c.network.chain_id, c.network.caip2) for c in ctx.platform.chains]
    return ctx.page(
        "payments.html",
        rows=rows,
        filters=filters,
        kinds=KINDS,
        statuses=STATUSES,
        coins=coins,
        networks=networks,
        next_url=next_url,
        page_size=PAGE_SIZE,
    )


async def _payment(ctx: Ctx) -> Any:
    payment_id = ctx.request.path_params["payment_id"]
    row = (
        await read_payment_intent(ctx.platform.engine, ctx.merchant_id, ctx.livemode, payment_id.lower())
        if is_uuid(payment_id)
        else None
    )
    if row is None:
        raise missing("payment")
    return row


async def _agent_payment(ctx: Ctx) -> Response | None:
    """The agent payment the path names, as its page; None when there is none of the merchant's."""
    payment_id = str(ctx.request.path_params["payment_id"]).lower()
    if not is_uuid(payment_id):
        return None
    row = await find_agent_payment(ctx.platform.engine, ctx.merchant_id, ctx.livemode, payment_id)
    if row is None:
        return None
    chain = ctx.platform.chains.get(int(row["chain_id"]))
    return ctx.page(
        "agent_payment.html",
        p=row,
        explorer=EXPLORERS.get(int(row["chain_id"])),
        network=f"{chain.network.name} ({chain.network.caip2})" if chain else f"eip155:{row['chain_id']}",
        amount=format_amount(int(row["amount_minor"]), 6),
        ceiling=format_amount(int(row["ceiling_minor"]), 6) if row["ceiling_minor"] is not None else None,
        receipt=json.dumps(row["receipt"], indent=2, sort_keys=True) if row["receipt"] else "",
    )


@page()
async def payment(ctx: Ctx) -> Response:
    """An order's page, or an agent payment's (their ids are UUIDs alike: one list links to both)."""
    try:
        return await _order_page(ctx)
    except PageError:
        agent = await _agent_payment(ctx)
        if agent is None:
            raise
        return agent


async def _order_page(ctx: Ctx) -> Response:
    engine = ctx.platform.engine
    row = await _payment(ctx)
    events = await order_events(engine, ctx.merchant_id, ctx.livemode, row["id"])
    # events of one instant (a transaction's) in the order of an order's life
    timeline = sorted(events, key=lambda e: (e.created_at, _STAGES.get(e.type, 50)))
    refund_rows = await order_refunds(engine, row["id"])
    explorer = EXPLORERS.get(int(row["chain_id"])) if row["chain_id"] else None
    chain = ctx.platform.chains.get(int(row["chain_id"])) if row["chain_id"] else None
    return ctx.page(
        "payment.html",
        p=row,
        timeline=timeline,
        refunds=refund_rows,
        explorer=explorer,
        amount=amount_text(row),
        network=chain.network.name if chain else row["chain_id"],
        received=format_amount(int(row["amount_received_minor"]), 6),
    )


@page("payments")
async def refund_form(ctx: Ctx) -> Response:
    row = await _payment(ctx)
    return ctx.page("refund.html", p=row, amount=amount_text(row), error="")


@page("payments")
async def refund(ctx: Ctx) -> Response:
    row = await _payment(ctx)
    if ctx.field("confirm") != "yes":
        raise PageError(400, "Tick the box to confirm the refund.", action="bad_request")
    reason = ctx.field("reason")[:500] or None
    try:
        made = await ctx.platform.refunds.create(ctx.merchant_id, ctx.livemode, row["id"], reason, wait=5.0)
    except ServiceError as exc:
        await ctx.audit("refund", row["id"], outcome="refused", detail=exc.message)
        return ctx.page(
            "refund.html",
            exc.status if exc.status in (404, 409, 422) else 400,
            p=row,
            amount=amount_text(row),
            error=exc.message,
        )
    await ctx.audit("refund", row["id"], detail=made.id)
    return see(f"/dashboard/payments/{row['id']}?notice=" + quote(f"Refund {made.status}."))


@page()
async def refunds_list(ctx: Ctx) -> Response:
    return ctx.page("refunds.html", rows=await newest_refunds(ctx.platform.engine, ctx.merchant_id, ctx.livemode, 100))


routes = [
    Route("/payments", payments, methods=["GET"], include_in_schema=False),
    Route("/payments/{payment_id}", payment, methods=["GET"], include_in_schema=False),
    Route("/payments/{payment_id}/refund", refund_form, methods=["GET"], include_in_schema=False),
    Route("/payments/{payment_id}/refund", refund, methods=["POST"], include_in_schema=False),
    Route("/refunds", refunds_list, methods=["GET"], include_in_schema=False),
]
