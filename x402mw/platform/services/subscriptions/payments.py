"""Payments of invoices move their subscriptions (spec 3.3), in the transaction that moves the order.

The deposit watcher (`x402mw.platform.services.watcher.DepositWatcher`, given `follow_order` as its
`x402mw.platform.services.payment_intents.OrderFollower` by the platform) calls `follow_order` whenever
an order becomes ``succeeded`` (its payment is confirmed) or goes back from it to ``requires_payment``
(a reorg reversed the payment). For an order that pays a subscription's invoice:

- confirmed, invoice open: the invoice is paid and the subscription extended by one period from the
  end of the paid one (from its anchor, the first payment's time, for the first): ``incomplete`` →
  ``active`` with ``subscription.created``; ``active`` or ``past_due`` → ``active`` with
  ``subscription.renewed``. The invoice is paid once, however many payments its order receives;
- confirmed, invoice void (the subscription was cancelled or expired while the payment was on its
  way, or paid after that): nobody owes it, so the whole payment is refunded to its payer
  (`refunds.reserve_refund` in this transaction, from the credit just made, with the reason
  ``subscription_canceled``, ``subscription_expired`` or ``invoice_void``; the worker sends it).
  Once per order: an order refunded before is not refunded again;
- reversed, invoice paid: the invoice opens again, the period it paid for is taken back, and the
  subscription becomes ``past_due`` with ``subscription.past_due`` and a past-due email.

The subscription's row is locked (``FOR UPDATE`` on PostgreSQL) before its invoice is read, so
concurrent payments of one invoice, and a payment racing the worker, each see the other's outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from x402mw.platform.db import tables
from x402mw.platform.services.ledger import InsufficientBalance
from x402mw.platform.services.outbox import insert_events
from x402mw.platform.services.refunds import reserve_refund
from x402mw.platform.services.subscriptions.objects import subscription_event
from x402mw.platform.services.subscriptions.periods import boundary
from x402mw.platform.services.subscriptions.service import clock_time, void_open_invoice
from x402mw.platform.services.subscriptions.steps import ENDED, MUTABLE, aware, email_row, schedule

__all__ = ["follow_order"]

logger = logging.getLogger("x402mw.platform.subscriptions")


async def follow_order(
    conn: AsyncConnection, order: Mapping[str, Any], previous: str, now: datetime, base: str
) -> None:
    """Move the subscription whose invoice ``order`` pays, if any: ``order`` has just gone from
    ``previous`` to its status, at ``now`` (the platform's clock)."""
    if order["status"] == "succeeded":
        await _paid(conn, order, now, base)
    elif previous == "succeeded" and order["status"] == "requires_payment":
        await _reversed(conn, order, now, base)


async def _locked(
    conn: AsyncConnection, order: Mapping[str, Any]
) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """The invoice ``order`` pays and its subscription (with its plan's interval and grace), locked."""
    invoices, subs, plans = tables.subscription_invoices, tables.subscriptions, tables.subscription_plans
    sub_id = await conn.scalar(select(invoices.c.subscription_id).where(invoices.c.payment_intent_id == order["id"]))
    if sub_id is None:
        return None
    sub = (
        (
            await conn.execute(
                select(subs, plans.c.interval, plans.c.grace_days)
                .join(plans, plans.c.id == subs.c.plan_id)
                .where(subs.c.id == sub_id)
                .with_for_update(of=subs)
            )
        )
        .mappings()
        .first()
    )
    invoice = (
        (await conn.execute(select(invoices).where(invoices.c.payment_intent_id == order["id"]))).mappings().first()
    )
    if sub is None or invoice is None:
        return None
    return aware(invoice), aware(sub)


async def _paid(conn: AsyncConnection, order: Mapping[str, Any], now: datetime, base: str) -> None:
    found = await _locked(conn, order)
    if found is None:
        return
    invoice, sub = found
    if invoice["status"] == "paid":
        return  # a payment counts once
    if invoice["status"] != "open" or sub["status"] in ENDED:
        await _refund_unowed(conn, order, sub, now)
        return
    at = await clock_time(conn, sub["test_clock_id"], now)
    anchor = sub["anchor_at"] or at
    period = int(invoice["period"])
    start, end = boundary(anchor, sub["interval"], period - 1), boundary(anchor, sub["interval"], period)
    invoices, subs = tables.subscription_invoices, tables.subscriptions
    paid = {**invoice, "status": "paid", "paid_at": at, "period_start": start, "period_end": end, "updated_at": at}
    await conn.execute(
        update(invoices)
        .where(invoices.c.id == invoice["id"])
        .values(status="paid", paid_at=at, period_start=start, period_end=end, updated_at=at)
    )
    kind = "created" if sub["status"] == "incomplete" else "renewed"
    extended: dict[str, Any] = {
        **sub,
        "status": "active",
        "anchor_at": anchor,
        "periods_paid": period,
        "current_period_start": start,
        "current_period_end": end,
        "open_invoice_id": None if sub["open_invoice_id"] == invoice["id"] else sub["open_invoice_id"],
        "past_due_at": None,
        "updated_at": at,
    }
    extended["next_action"], extended["due_at"] = schedule(extended, sub["interval"], None, reminded=False)
    await conn.execute(update(subs).where(subs.c.id == sub["id"]).values({k: extended[k] for k in MUTABLE}))
    await conn.run_sync(insert_events, [subscription_event(kind, extended, paid, order, base, now)])


async def _refund_unowed(
    conn: AsyncConnection, order: Mapping[str, Any], sub: Mapping[str, Any], now: datetime
) -> None:
    """Refund ``order``'s payment, which pays an invoice nobody owes any more, to its payer."""
    refunds, transfers = tables.refunds, tables.incoming_transfers
    if await conn.scalar(select(refunds.c.id).where(refunds.c.payment_intent_id == order["id"]).limit(1)):
        return  # one refund per order, whatever became of it
    token = await conn.scalar(
        select(transfers.c.token)
        .where(transfers.c.payment_intent_id == order["id"], transfers.c.status == "counted")
        .limit(1)
    )
    if token is None or not order["payer"]:
        logger.error("order %s paid a void invoice but its payment cannot be refunded automatically", order["id"])
        return
    if sub["status"] == "canceled" or sub["cancel_at_period_end"]:
        reason = "subscription_canceled"
    elif sub["status"] == "expired":
        reason = "subscription_expired"
    else:
        reason = "invoice_void"
    try:
        await reserve_refund(conn, order, token=str(token), reason=reason, now=now, claim_until=now)
    except InsufficientBalance:  # not after the credit of this very payment; kept for the books
        logger.error("order %s paid a void invoice; the balance cannot cover its refund", order["id"])


async def _reversed(conn: AsyncConnection, order: Mapping[str, Any], now: datetime, base: str) -> None:
    found = await _locked(conn, order)
    if found is None:
        return
    invoice, sub = found
    if invoice["status"] != "paid" or sub["status"] in ENDED:
        return
    at = await clock_time(conn, sub["test_clock_id"], now)
    if sub["open_invoice_id"] not in (None, invoice["id"]):  # a later renewal is open: one open invoice at a time
        await void_open_invoice(conn, sub, at, now, base)
    invoices, subs = tables.subscription_invoices, tables.subscriptions
    reopened = {**invoice, "status": "open", "paid_at": None, "reminded_at": None, "updated_at": at}
    await conn.execute(
        update(invoices)
        .where(invoices.c.id == invoice["id"])
        .values(status="open", paid_at=None, reminded_at=None, updated_at=at)
    )
    periods = int(invoice["period"]) - 1
    anchor = sub["anchor_at"]
    paid_through = periods >= 1 and anchor is not None
    past_due: dict[str, Any] = {
        **sub,
        "status": "past_due",
        "periods_paid": periods,
        "current_period_start": boundary(anchor, sub["interval"], periods - 1) if paid_through else None,
        "current_period_end": boundary(anchor, sub["interval"], periods) if paid_through else None,
        "open_invoice_id": invoice["id"],
        "past_due_at": at,
        "updated_at": at,
    }
    past_due["next_action"], past_due["due_at"] = schedule(past_due, sub["interval"], sub["grace_days"], reminded=True)
    await conn.execute(update(subs).where(subs.c.id == sub["id"]).values({k: past_due[k] for k in MUTABLE}))
    await conn.run_sync(insert_events, [subscription_event("past_due", past_due, reopened, order, base, now)])
    email = email_row(past_due, invoice["id"], "past_due", now)
    if email is not None:
        await conn.execute(tables.subscription_emails.insert(), email)
