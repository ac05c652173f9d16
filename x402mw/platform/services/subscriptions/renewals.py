"""The subscriptions' due work: renewal invoices, reminders, period ends and grace (DESIGN 6, Time).

`RenewalRunner.run_due` runs every action (`x402mw.platform.services.subscriptions.steps`) due at or
before a time, in batches. A batch is one transaction: it reads the due subscriptions through the index
on (``test_clock_id``, ``due_at``), so a pass costs what is due and not what exists, claims them with
``FOR UPDATE SKIP LOCKED`` on PostgreSQL (several workers share the work; SQLite has one writer), and
writes what their actions make (invoices, payment orders, events, emails, the subscriptions' next
actions) with one statement per kind. The worker runs the platform's subscriptions on the platform's
clock; a test clock's subscriptions run only when the clock is advanced, on its time.

Each action's business time is its due time (a renewal invoice opened late still says when it was
due), so that a test clock moved by months at once gives the same history as one moved by the hour.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.services.outbox import event_row, insert_events
from x402mw.platform.services.payment_intents import payment_intent_event_data
from x402mw.platform.services.subscriptions.customer_links import CustomerLinks
from x402mw.platform.services.subscriptions.objects import subscription_event
from x402mw.platform.services.subscriptions.periods import REMINDER_LEAD, boundary, grace_end
from x402mw.platform.services.subscriptions.steps import (
    MUTABLE,
    aware,
    email_row,
    invoice_order_row,
    invoice_row,
    schedule,
)

logger = logging.getLogger("x402mw.platform.renewals")

BATCH = 500
POSTPONE = timedelta(minutes=1)  # an expiry waits this long while the invoice's payment is confirming

_SUBS, _PLANS = tables.subscriptions, tables.subscription_plans
_INVOICES, _INTENTS = tables.subscription_invoices, tables.payment_intents
_SUB_UPDATE = update(_SUBS).where(_SUBS.c.id == bindparam("_id")).values({c: bindparam("_" + c) for c in MUTABLE})
_INVOICE_COLUMNS = ("status", "reminded_at", "voided_at", "updated_at")
_INVOICE_UPDATE = (
    update(_INVOICES)
    .where(_INVOICES.c.id == bindparam("_id"))
    .values({c: bindparam("_" + c) for c in _INVOICE_COLUMNS})
)


@dataclass
class _Writes:
    """What one batch writes, collected while its actions are decided."""

    subs: list[dict[str, Any]] = field(default_factory=list)
    orders: list[dict[str, Any]] = field(default_factory=list)
    invoices: list[dict[str, Any]] = field(default_factory=list)
    invoice_changes: list[dict[str, Any]] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)  # payment orders to cancel
    # (kind, subscription, invoice, payment order id): subscription events, written once the orders are
    events: list[tuple[str, dict[str, Any], Mapping[str, Any] | None, str | None]] = field(default_factory=list)
    emails: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RenewalRunner:
    engine: AsyncEngine
    clock: Clock
    links: CustomerLinks
    grace_days: int  # the platform's default; a plan may set its own

    async def run_due(
        self, *, test_clock_id: str | None = None, now: datetime | None = None, batch: int = BATCH
    ) -> int:
        """Run every action due at or before ``now`` (default: the platform's clock) of the platform's
        subscriptions, or of the test clock ``test_clock_id``'s; how many actions ran. Returns once
        nothing is due any more (that other workers have not claimed)."""
        done = 0
        while True:
            ran = await self._batch(now or self.clock.now(), test_clock_id, batch)
            done += ran
            if ran == 0:
                return done

    async def _batch(self, now: datetime, clock_id: str | None, limit: int) -> int:
        on_clock = _SUBS.c.test_clock_id.is_(None) if clock_id is None else _SUBS.c.test_clock_id == clock_id
        due = (_SUBS.c.due_at <= now) & on_clock
        # In the due index's own order (ordered by due_at alone, PostgreSQL does not see that the
        # index gives that order under "test_clock_id IS NULL", sorts, and reads it as a bitmap).
        in_order = (_SUBS.c.test_clock_id, _SUBS.c.due_at)
        # Whether anything is due at all, first: the worker's usual pass finds nothing. This walks
        # the index from its start to the first live entry and marks the entries of rows updated
        # since (no longer due) as dead on the way, so the next pass does not read them again.
        async with self.engine.connect() as conn:
            if await conn.scalar(select(_SUBS.c.due_at).where(due).order_by(*in_order).limit(1)) is None:
                return 0
        query = (
            select(
                _SUBS,
                _PLANS.c.interval,
                _PLANS.c.amount_minor.label("plan_amount"),
                _PLANS.c.amount_text.label("plan_amount_text"),
                _PLANS.c.return_url.label("plan_return_url"),
                _PLANS.c.currency.label("plan_currency"),
                _PLANS.c.grace_days,
            )
            .join(_PLANS, _PLANS.c.id == _SUBS.c.plan_id)
            .where(due)
            .order_by(*in_order)
            .limit(limit)
            .with_for_update(of=_SUBS, skip_locked=True)
        )
        async with self.engine.begin() as conn:
            rows = [aware(row) for row in (await conn.execute(query)).mappings()]
            if not rows:
                return 0
            invoices = await _by_id(conn, _INVOICES, [r["open_invoice_id"] for r in rows if r["open_invoice_id"]])
            orders = await _by_id(conn, _INTENTS, [i["payment_intent_id"] for i in invoices.values()])
            writes = _Writes()
            platform_now = self.clock.now()
            for row in rows:
                invoice = invoices.get(row["open_invoice_id"]) if row["open_invoice_id"] else None
                order = orders.get(invoice["payment_intent_id"]) if invoice else None
                self._step(row, invoice, order, now, platform_now, writes)
            await self._write(conn, writes, orders, platform_now)
        return len(rows)

    def _grace(self, row: Mapping[str, Any]) -> int:
        return self.grace_days if row["grace_days"] is None else int(row["grace_days"])

    def _step(
        self,
        row: dict[str, Any],
        invoice: Mapping[str, Any] | None,
        order: Mapping[str, Any] | None,
        now: datetime,
        platform_now: datetime,
        writes: _Writes,
    ) -> None:
        action, at = row["next_action"], row["due_at"]
        status = row["status"]
        open_ = invoice is not None and invoice["status"] == "open"
        if action == "open_renewal" and status == "active" and not row["cancel_at_period_end"] and invoice is None:
            self._open_renewal(row, at, platform_now, writes)
        elif action == "remind" and status == "active" and open_ and invoice and not invoice["reminded_at"]:
            writes.invoice_changes.append({**invoice, "reminded_at": at, "updated_at": at})
            self._save(row, {"updated_at": at}, writes, reminded=True)
            _email(writes, row, invoice["id"], "reminder", platform_now)
        elif action == "period_end" and status == "active":
            if row["cancel_at_period_end"]:
                voided = self._void(invoice if open_ else None, order, at, writes)
                ended = {"status": "canceled", "open_key": None, "open_invoice_id": None}
                sub = self._save(row, {**ended, "canceled_at": at, "ended_at": at, "updated_at": at}, writes)
                writes.events.append(("canceled", sub, voided, order["id"] if voided and order else None))
            else:
                sub = self._save(row, {"status": "past_due", "past_due_at": at, "updated_at": at}, writes)
                writes.events.append(("past_due", sub, invoice, order["id"] if order else None))
                _email(writes, row, row["open_invoice_id"], "past_due", platform_now)
        elif action == "expire" and status == "past_due":
            ends = grace_end(row["current_period_end"], row["past_due_at"], self._grace(row))
            if ends > at:  # scheduled before the grace period was known (a reorg): now it is
                self._save(row, {"due_at": ends}, writes, keep_due=True)
            elif order is not None and order["status"] == "processing":
                self._save(row, {"due_at": now + POSTPONE}, writes, keep_due=True)
            else:
                voided = self._void(invoice if open_ else None, order, at, writes)
                ended = {"status": "expired", "open_key": None, "open_invoice_id": None, "ended_at": at}
                sub = self._save(row, {**ended, "updated_at": at}, writes)
                writes.events.append(("expired", sub, voided, order["id"] if voided and order else None))
        else:  # the subscription changed since this was scheduled: schedule what it needs now
            sub = self._save(row, {}, writes, reminded=bool(invoice and invoice["reminded_at"]))
            if (sub["next_action"], sub["due_at"]) == (action, at):
                logger.warning("subscription %s: %s is not possible in status %s", row["id"], action, status)
                sub["next_action"] = sub["due_at"] = None

    def _open_renewal(self, row: dict[str, Any], at: datetime, platform_now: datetime, writes: _Writes) -> None:
        period = int(row["periods_paid"]) + 1
        invoice_id = new_id()
        order = invoice_order_row(
            row,
            invoice_id=invoice_id,
            period=period,
            amount=row["plan_amount"],
            amount_text=row["plan_amount_text"],
            currency=row["plan_currency"],
            return_url=row["plan_return_url"],
            at=platform_now,
        )
        end = boundary(row["anchor_at"], row["interval"], period)
        invoice = invoice_row(
            row, invoice_id=invoice_id, period=period, order=order, start=row["current_period_end"], end=end, at=at
        )
        late = at >= row["current_period_end"] - REMINDER_LEAD  # no separate reminder for it
        if late:
            invoice["reminded_at"] = at
        writes.orders.append(order)
        writes.invoices.append(invoice)
        self._save(row, {"open_invoice_id": invoice_id, "updated_at": at}, writes, reminded=late)
        _email(writes, row, invoice_id, "invoice_opened", platform_now)

    def _void(
        self, invoice: Mapping[str, Any] | None, order: Mapping[str, Any] | None, at: datetime, writes: _Writes
    ) -> dict[str, Any] | None:
        if invoice is None:
            return None
        voided = {**invoice, "status": "void", "voided_at": at, "updated_at": at}
        writes.invoice_changes.append(voided)
        if order is not None and order["status"] == "requires_payment":
            writes.cancels.append(order["id"])
        return voided

    def _save(
        self,
        row: dict[str, Any],
        changes: Mapping[str, Any],
        writes: _Writes,
        *,
        reminded: bool = False,
        keep_due: bool = False,
    ) -> dict[str, Any]:
        """Apply ``changes`` to ``row``, schedule its next action (unless ``keep_due``: the changes set
        ``due_at`` themselves) and queue its update."""
        row.update(changes)
        if not keep_due:
            row["next_action"], row["due_at"] = schedule(row, row["interval"], self._grace(row), reminded=reminded)
        writes.subs.append(row)
        return row

    async def _write(
        self, conn: AsyncConnection, writes: _Writes, orders: Mapping[str, Mapping[str, Any]], now: datetime
    ) -> None:
        base = self.links.checkout_url_base
        events: list[dict[str, Any]] = []
        after = dict(orders)
        if writes.cancels:
            canceled = await conn.execute(
                update(_INTENTS)
                .where(_INTENTS.c.id.in_(writes.cancels), _INTENTS.c.status == "requires_payment")
                .values(status="canceled", transfer_hold=None, updated_at=now)
                .returning(_INTENTS.c.id)
            )
            for order_id in canceled.scalars():
                after[order_id] = {**orders[order_id], "status": "canceled", "transfer_hold": None, "updated_at": now}
                events.append(_order_event(after[order_id], "canceled", base, now))
        if writes.orders:
            await conn.execute(_INTENTS.insert(), writes.orders)
            events += [_order_event(order, "created", base, now) for order in writes.orders]
        if writes.invoices:
            await conn.execute(_INVOICES.insert(), writes.invoices)
        if writes.invoice_changes:
            await conn.execute(
                _INVOICE_UPDATE,
                [{"_id": i["id"], **{"_" + c: i[c] for c in _INVOICE_COLUMNS}} for i in writes.invoice_changes],
            )
        await conn.execute(_SUB_UPDATE, [{"_id": s["id"], **{"_" + c: s[c] for c in MUTABLE}} for s in writes.subs])
        for kind, sub, invoice, order_id in writes.events:
            order = after.get(order_id) if order_id else None
            events.append(subscription_event(kind, sub, invoice, order, base, now))
        if events:
            await conn.run_sync(insert_events, events)
        if writes.emails:
            await conn.execute(tables.subscription_emails.insert(), writes.emails)


def _email(writes: _Writes, sub: Mapping[str, Any], invoice_id: str | None, kind: str, now: datetime) -> None:
    row = email_row(sub, invoice_id, kind, now)
    if row is not None:
        writes.emails.append(row)


def _order_event(order: Mapping[str, Any], kind: str, base: str, now: datetime) -> dict[str, Any]:
    return event_row(
        merchant_id=order["merchant_id"],
        livemode=order["livemode"],
        type=f"payment_intent.{kind}",
        data=payment_intent_event_data(order, base),
        at=now,
    )


async def _by_id(conn: AsyncConnection, table: Any, ids: list[str]) -> dict[str, dict[str, Any]]:
    if not ids:
        return {}
    rows = await conn.execute(select(table).where(table.c.id.in_(ids)))
    return {row["id"]: aware(row) for row in rows.mappings()}
