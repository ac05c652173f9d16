"""Every payment a merchant received, of every kind, as the dashboard lists and counts them: orders
(payment intents), subscription payments (the orders that pay an invoice) and agent payments (x402
settlements, paid straight to an endpoint's payout address).

`list_payments` pages through all three newest first, keyed by (created_at, id): each table gives at
most a page after the cursor (the payment intents through their ``ix_payment_intents_mode_*``
indexes) and the two are merged, so a page deep in the list costs what the first does.
`find_agent_payment` reads one agent payment with its endpoint and challenge; `overview_figures`
counts what the overview shows.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from sqlalchemy import ColumnElement, Select, Table, func, literal, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.services.payment_intents import DECIMALS, amount_text
from x402mw.protocol.prices import format_amount

Kind = Literal["order", "subscription", "agent"]
KINDS: tuple[Kind, ...] = ("order", "subscription", "agent")
ORDER_STATUSES = ("requires_payment", "processing", "succeeded", "refunded", "canceled", "expired")
AGENT_STATUSES = ("held", "authorized", "claimed", "submitted", "settled", "failed")
PAGE_SIZE = 25


@dataclass(frozen=True)
class PaymentFilters:
    """What the list is narrowed to; None (or empty) for any. A filter one kind cannot match (a
    payment link, a customer's email, an order status for agent payments) leaves that kind out."""

    kind: Kind | None = None
    status: str | None = None
    currency: str | None = None
    chain_id: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    link_id: str | None = None
    customer: str | None = None
    search: str | None = None  # an order id, a payment id, a payer's address or a transaction hash


@dataclass(frozen=True)
class PaymentEntry:
    """One line of the list: ``title`` is the order's id, or the name of the agent endpoint paid."""

    kind: Kind
    id: str
    title: str
    status: str
    amount: str
    currency: str
    chain_id: int | None
    customer: str | None
    payer: str | None
    created_at: datetime


def _order_query(
    merchant_id: str, livemode: bool, f: PaymentFilters, after: tuple[datetime, str] | None, limit: int
) -> Select[Any] | None:
    t, invoices = tables.payment_intents, tables.subscription_invoices
    if f.kind == "agent" or (f.status and f.status not in ORDER_STATUSES):
        return None
    where = _shared_where(t, merchant_id, livemode, f)
    if f.kind == "order":
        where.append(invoices.c.id.is_(None))
    elif f.kind == "subscription":
        where.append(invoices.c.id.is_not(None))
    if f.link_id:
        where.append(t.c.payment_link_id == f.link_id)
    if f.customer:
        where.append(t.c.customer_email == f.customer.lower())
    if f.search:
        s = f.search
        matches = [t.c.order_id == s]
        if s.startswith("0x") and len(s) == 42:
            matches.append(t.c.payer == s.lower())
        if s.startswith("0x") and len(s) == 66:
            matches.append(t.c.tx_hash == s.lower())
        if _uuid(s):
            matches.append(t.c.id == s.lower())
        where.append(or_(*matches))
    columns = (
        t.c.id,
        t.c.order_id,
        t.c.status,
        t.c.amount_minor,
        t.c.amount_text,
        t.c.currency,
        t.c.chain_id,
        t.c.customer_email,
        t.c.payer,
        t.c.created_at,
        invoices.c.id.label("invoice_id"),
    )
    joined = t.outerjoin(invoices, invoices.c.payment_intent_id == t.c.id)
    return _newest_first(select(*columns).select_from(joined).where(*where), t, after, limit)


def _agent_query(
    merchant_id: str, livemode: bool, f: PaymentFilters, after: tuple[datetime, str] | None, limit: int
) -> Select[Any] | None:
    p, e = tables.agent_payments, tables.agent_endpoints
    if f.kind not in (None, "agent") or (f.status and f.status not in AGENT_STATUSES) or f.link_id or f.customer:
        return None
    where = _shared_where(p, merchant_id, livemode, f)
    if f.search:
        s = f.search.lower()
        if s.startswith("0x") and len(s) == 42:  # agent payments keep the payer checksummed
            where.append(func.lower(p.c.payer) == s)
        elif s.startswith("0x") and len(s) == 66:
            where.append(func.lower(p.c.transaction) == s)
        elif _uuid(s):
            where.append(p.c.id == s)
        else:
            return None
    columns = (
        p.c.id,
        p.c.status,
        p.c.amount_minor,
        p.c.currency,
        p.c.chain_id,
        p.c.payer,
        p.c.created_at,
        e.c.name.label("endpoint_name"),
    )
    return _newest_first(
        select(*columns).select_from(p.outerjoin(e, e.c.id == p.c.endpoint_id)).where(*where), p, after, limit
    )


def _shared_where(t: Table, merchant_id: str, livemode: bool, f: PaymentFilters) -> list[ColumnElement[bool]]:
    """The conditions orders and agent payments are filtered by alike: the merchant and mode, then
    ``f``'s status, coin, chain and creation window."""
    where: list[ColumnElement[bool]] = [t.c.merchant_id == merchant_id, t.c.livemode == livemode]
    if f.status:
        where.append(t.c.status == f.status)
    if f.currency:
        where.append(t.c.currency == f.currency)
    if f.chain_id is not None:
        where.append(t.c.chain_id == f.chain_id)
    if f.since is not None:
        where.append(t.c.created_at >= f.since)
    if f.until is not None:
        where.append(t.c.created_at < f.until)
    return where


def _newest_first(query: Select[Any], t: Table, after: tuple[datetime, str] | None, limit: int) -> Select[Any]:
    """``query`` newest first, past the cursor ``after`` (created at, id), one row more than a page."""
    if after is not None:
        query = query.where(tuple_(t.c.created_at, t.c.id) < tuple_(literal(after[0], t.c.created_at.type), after[1]))
    return query.order_by(t.c.created_at.desc(), t.c.id.desc()).limit(limit + 1)


def _uuid(value: str) -> bool:
    """Whether ``value`` is a UUID as our ids are written (36 characters, with hyphens)."""
    try:
        return len(value) == 36 and str(UUID(value)) == value.lower()
    except ValueError:
        return False


async def list_payments(
    engine: AsyncEngine,
    merchant_id: str,
    livemode: bool,
    filters: PaymentFilters,
    *,
    after: tuple[datetime, str] | None = None,
    limit: int = PAGE_SIZE,
) -> tuple[list[PaymentEntry], bool]:
    """A page of the merchant's payments of every kind (or ``filters.kind``), newest first, after the
    cursor ``after`` (the last entry's ``(created_at, id)``); and whether more follow."""
    entries: list[PaymentEntry] = []
    orders = _order_query(merchant_id, livemode, filters, after, limit)
    agents = _agent_query(merchant_id, livemode, filters, after, limit)
    async with engine.connect() as conn:
        if orders is not None:
            for r in (await conn.execute(orders)).mappings():
                entries.append(
                    PaymentEntry(
                        kind="subscription" if r["invoice_id"] else "order",
                        id=r["id"],
                        title=r["order_id"],
                        status=r["status"],
                        amount=amount_text(r),
                        currency=r["currency"],
                        chain_id=r["chain_id"],
                        customer=r["customer_email"],
                        payer=r["payer"],
                        created_at=r["created_at"],
                    )
                )
        if agents is not None:
            for r in (await conn.execute(agents)).mappings():
                entries.append(
                    PaymentEntry(
                        kind="agent",
                        id=r["id"],
                        title=r["endpoint_name"] or "agent endpoint",
                        status=r["status"],
                        amount=format_amount(int(r["amount_minor"]), DECIMALS),
                        currency=r["currency"],
                        chain_id=r["chain_id"],
                        customer=None,
                        payer=r["payer"],
                        created_at=r["created_at"],
                    )
                )
    entries.sort(key=lambda entry: (entry.created_at, entry.id), reverse=True)
    return entries[:limit], len(entries) > limit


async def find_agent_payment(
    engine: AsyncEngine, merchant_id: str, livemode: bool, payment_id: str
) -> dict[str, Any] | None:
    """One of the merchant's agent payments, every column, with its endpoint's name
    (``endpoint_name``) and the challenge it answered (``challenge_resource``, ``challenge_expires``)."""
    p, e, c = tables.agent_payments, tables.agent_endpoints, tables.agent_challenges
    query = (
        select(
            p,
            e.c.name.label("endpoint_name"),
            c.c.resource.label("challenge_resource"),
            c.c.expires_at.label("challenge_expires"),
        )
        .select_from(p.outerjoin(e, e.c.id == p.c.endpoint_id).outerjoin(c, c.c.id == p.c.challenge_id))
        .where(p.c.id == payment_id, p.c.merchant_id == merchant_id, p.c.livemode == livemode)
    )
    async with engine.connect() as conn:
        row = (await conn.execute(query)).mappings().first()
    return dict(row) if row is not None else None


async def endpoint_usage(
    engine: AsyncEngine, merchant_id: str, livemode: bool, since: datetime
) -> dict[str, tuple[int, int]]:
    """``{endpoint id: (payments, minor units)}`` of the merchant's agent payments settled since ``since``."""
    p = tables.agent_payments
    query = (
        select(p.c.endpoint_id, func.count().label("count"), func.sum(p.c.amount_minor).label("total"))
        .where(
            p.c.merchant_id == merchant_id,
            p.c.livemode == livemode,
            p.c.status == "settled",
            p.c.settled_at >= since,
        )
        .group_by(p.c.endpoint_id)
    )
    async with engine.connect() as conn:
        return {endpoint_id: (int(count), int(total or 0)) for endpoint_id, count, total in await conn.execute(query)}


async def endpoint_payments(engine: AsyncEngine, merchant_id: str, endpoint_id: str, limit: int = 50) -> list[Any]:
    """The endpoint's newest agent payments, each with the challenge it answered
    (``challenge_resource``, ``challenge_expires``)."""
    p, c = tables.agent_payments, tables.agent_challenges
    query = (
        select(p, c.c.resource.label("challenge_resource"), c.c.expires_at.label("challenge_expires"))
        .outerjoin(c, c.c.id == p.c.challenge_id)
        .where(p.c.endpoint_id == endpoint_id, p.c.merchant_id == merchant_id)
        .order_by(p.c.created_at.desc())
        .limit(limit)
    )
    async with engine.connect() as conn:
        return list(await conn.execute(query))


@dataclass
class OverviewFigures:
    """What the overview shows: ``balances`` (rows of the money the platform holds, per chain and
    coin), ``agent_income`` (``{(chain_id, coin): minor units}`` settled to the payout addresses),
    ``per_day`` (``{(coin, "YYYY-MM-DD"): [minor units, payments]}`` of every kind paid since the
    start) and ``counts`` (payments of each kind in all)."""

    balances: list[Any] = field(default_factory=list)
    agent_income: dict[tuple[int, str], int] = field(default_factory=dict)
    per_day: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    counts: dict[Kind, int] = field(default_factory=dict)


async def overview_figures(engine: AsyncEngine, merchant_id: str, livemode: bool, start: datetime) -> OverviewFigures:
    """The overview's figures of the merchant in ``livemode``, days counted from ``start``."""
    b, t, p = tables.balances, tables.payment_intents, tables.agent_payments
    invoices = tables.subscription_invoices
    figures = OverviewFigures()
    per_day: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    mine_t = (t.c.merchant_id == merchant_id, t.c.livemode == livemode)
    mine_p = (p.c.merchant_id == merchant_id, p.c.livemode == livemode)
    async with engine.connect() as conn:
        query = select(b).where(b.c.merchant_id == merchant_id, b.c.livemode == livemode)
        figures.balances = list(await conn.execute(query.order_by(b.c.chain_id, b.c.currency)))
        paid = select(t.c.paid_at, t.c.amount_received_minor, t.c.paid_currency, t.c.currency).where(
            *mine_t, t.c.paid_at.is_not(None), t.c.paid_at >= start
        )
        for paid_at, amount, paid_currency, currency in await conn.execute(paid):
            day = per_day[(paid_currency or currency, paid_at.strftime("%Y-%m-%d"))]
            day[0] += int(amount)
            day[1] += 1
        settled = select(p.c.settled_at, p.c.amount_minor, p.c.currency).where(
            *mine_p, p.c.status == "settled", p.c.settled_at >= start
        )
        for settled_at, amount, currency in await conn.execute(settled):
            day = per_day[(currency, settled_at.strftime("%Y-%m-%d"))]
            day[0] += int(amount)
            day[1] += 1
        income = (
            select(p.c.chain_id, p.c.currency, func.sum(p.c.amount_minor))
            .where(*mine_p, p.c.status == "settled")
            .group_by(p.c.chain_id, p.c.currency)
            .order_by(p.c.chain_id, p.c.currency)
        )
        figures.agent_income = {(int(c), str(coin)): int(total or 0) for c, coin, total in await conn.execute(income)}
        subscription = func.count(invoices.c.id)
        joined = t.outerjoin(invoices, invoices.c.payment_intent_id == t.c.id)
        total, of_invoices = (
            await conn.execute(select(func.count(), subscription).select_from(joined).where(*mine_t))
        ).one()
        agents = (await conn.execute(select(func.count()).select_from(p).where(*mine_p))).scalar_one()
    figures.per_day = dict(per_day)
    figures.counts = {"order": int(total) - int(of_invoices), "subscription": int(of_invoices), "agent": int(agents)}
    return figures
