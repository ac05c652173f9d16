"""Subscriptions (spec 2.4 and 3.3): opening one, cancelling it, and what both do to its invoice.

Statuses::

    (open) ─▶ incomplete ─first payment confirmed─▶ active ─period ends unpaid, or a reorg─▶ past_due
                  │                                 ▲  │ ◀─ renewal confirmed: period extended       │  │
                  │                                 │  └─────────────────────────────────────────────┘  │
                  │                                 └────── payment within grace (renewed) ─────────────┤
                  │                                                                     grace passes ──▶ expired
    incomplete, active, past_due ─cancel─▶ canceled   active ─cancel atPeriodEnd─▶ (flag) ─period end─▶ canceled

One subscription is open per (plan, customer): opening again answers the open one, with its unpaid
invoice's payment order while there is one. A subscription whose customer id a visitor of the hosted
subscribe page chose (``customer_vouched`` false) is not the merchant's customer's until the merchant
says so: opening it again through the API (or a signed subscribe link) is refused, 409
``customer_unverified``, unless the email given is the one on file (then the merchant vouches for it).

Each period has an invoice (``period`` 1, 2, ...) paid through a payment order of its own; payments
move subscriptions on through `x402mw.platform.services.subscriptions.payments`, time through
`x402mw.platform.services.subscriptions.renewals`. A subscription on a test clock lives at the clock's time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.outbox import event_row, insert_events
from x402mw.platform.services.payment_intents import payment_intent_event_data, transition
from x402mw.platform.services.subscriptions.customer_links import CustomerLinks
from x402mw.platform.services.subscriptions.objects import find_owned, subscription_event
from x402mw.platform.services.subscriptions.steps import (
    ENDED,
    MUTABLE,
    aware,
    email_row,
    invoice_order_row,
    invoice_row,
)

ACCESS_EMAIL_EVERY = timedelta(minutes=10)  # at most one link email a subscription, asked for on the page


class SubscriptionError(ServiceError):
    """A subscription request the rules refuse (404, 409)."""


@dataclass(frozen=True)
class Opened:
    """What opening a subscription answers: the subscription, its current invoice and that invoice's
    payment order; ``created`` is False when an open subscription was reused."""

    created: bool
    subscription: Mapping[str, Any]
    invoice: Mapping[str, Any] | None
    order: Mapping[str, Any] | None


async def clock_time(conn: AsyncConnection, test_clock_id: str | None, now: datetime) -> datetime:
    """The time a subscription lives at: its test clock's, else ``now`` (the platform's clock)."""
    if test_clock_id is None:
        return now
    clocks = tables.test_clocks
    frozen = await conn.scalar(select(clocks.c.frozen_time).where(clocks.c.id == test_clock_id))
    return now if frozen is None else aware({"at": frozen})["at"]


async def void_open_invoice(
    conn: AsyncConnection, sub: Mapping[str, Any], at: datetime, now: datetime, base: str
) -> tuple[dict[str, Any] | None, Mapping[str, Any] | None]:
    """Void ``sub``'s open invoice and cancel its payment order (unless a payment is already on its
    way: such an order is left to finish, and its payment, which no longer counts for the
    subscription, is refunded to its payer once confirmed: `subscription_payments`).
    The invoice and the order as they now are, or (None, None)."""
    if sub["open_invoice_id"] is None:
        return None, None
    invoices, intents = tables.subscription_invoices, tables.payment_intents
    found = (
        (await conn.execute(select(invoices).where(invoices.c.id == sub["open_invoice_id"]).with_for_update()))
        .mappings()
        .first()
    )
    if found is None or found["status"] != "open":
        return None, None
    invoice = aware(found)
    voided = {**invoice, "status": "void", "voided_at": at, "updated_at": at}
    await conn.execute(
        update(invoices).where(invoices.c.id == invoice["id"]).values(status="void", voided_at=at, updated_at=at)
    )
    read = (await conn.execute(select(intents).where(intents.c.id == invoice["payment_intent_id"]))).mappings().first()
    order: Mapping[Any, Any] | None = read
    if read is not None and read["status"] == "requires_payment":
        order = await transition(conn, read, "canceled", now, base) or read
    return voided, None if order is None else aware(order)


@dataclass
class SubscriptionService:
    """Opens and cancels subscriptions (the API and the hosted subscribe page use it)."""

    engine: AsyncEngine
    clock: Clock
    links: CustomerLinks
    grace_days: int  # the platform's default; a plan may set its own

    @property
    def base(self) -> str:
        return self.links.checkout_url_base

    async def open(
        self,
        merchant_id: str,
        livemode: bool,
        plan_id: str,
        customer_id: str,
        email: str | None,
        test_clock_id: str | None = None,
        *,
        vouched: bool = True,
        confirm: bool = False,
    ) -> Opened:
        """Open a subscription to the plan for the merchant's customer ``customer_id``, or answer the one
        open already (whatever its test clock). ``vouched``: the merchant stands behind ``customer_id``
        (its API, a signed link); False when a hosted page's visitor chose it. ``confirm``: email the
        customer their subscription page link when it is opened (the hosted page does). Raises
        `SubscriptionError` 404 for an unknown plan or test clock, 409 ``plan_inactive`` for a new
        subscription to an inactive plan, 409 ``customer_unverified`` when ``vouched`` finds one a
        visitor opened for another email (see the module)."""
        subs = tables.subscriptions
        for _ in range(3):  # a concurrent first open of the same pair wins: then answer that one
            async with self.engine.begin() as conn:
                plan = await find_owned(conn, "subscription_plans", merchant_id, livemode, plan_id)
                if plan is None:
                    raise SubscriptionError(404, "resource_missing", f"No such plan: '{plan_id}'", param="planId")
                open_ = (
                    (
                        await conn.execute(
                            select(subs).where(subs.c.plan_id == plan["id"], subs.c.open_key == customer_id)
                        )
                    )
                    .mappings()
                    .first()
                )
                if open_ is not None:
                    reused = aware(open_)
                    if vouched and not reused["customer_vouched"]:
                        reused = await self._vouch(conn, reused, email)
                    invoice, order = await self._current_invoice(conn, reused)
                    return Opened(False, reused, invoice, order)
                if test_clock_id is not None:
                    clock = await find_owned(conn, "test_clocks", merchant_id, livemode, test_clock_id)
                    if clock is None:
                        raise SubscriptionError(
                            404, "resource_missing", f"No such test clock: '{test_clock_id}'", param="testClock"
                        )
                if not plan["active"]:
                    raise SubscriptionError(
                        409, "plan_inactive", "This plan is inactive: it opens no new subscriptions", param="planId"
                    )
                opened = await self._insert(conn, plan, customer_id, email, test_clock_id, vouched, confirm)
                if opened is not None:
                    return opened
        raise SubscriptionError(409, "subscription_conflict", "The subscription is being opened; retry", param="planId")

    async def _insert(
        self,
        conn: AsyncConnection,
        plan: Mapping[str, Any],
        customer_id: str,
        email: str | None,
        test_clock_id: str | None,
        vouched: bool,
        confirm: bool,
    ) -> Opened | None:
        now = self.clock.now()
        at = await clock_time(conn, test_clock_id, now)
        sub: dict[str, Any] = {
            "id": new_id(),
            "merchant_id": plan["merchant_id"],
            "livemode": plan["livemode"],
            "plan_id": plan["id"],
            "merchant_customer_id": customer_id,
            "customer_email": email,
            "customer_vouched": vouched,
            "open_key": customer_id,
            "status": "incomplete",
            "cancel_at_period_end": False,
            "anchor_at": None,
            "periods_paid": 0,
            "current_period_start": None,
            "current_period_end": None,
            "past_due_at": None,
            "canceled_at": None,
            "ended_at": None,
            "test_clock_id": test_clock_id,
            "next_action": None,
            "due_at": None,
            "created_at": at,
            "updated_at": at,
        }
        invoice_id = new_id()
        sub["open_invoice_id"] = invoice_id
        subs = tables.subscriptions
        insert_for = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
        inserted = await conn.scalar(insert_for(subs).values(sub).on_conflict_do_nothing().returning(subs.c.id))
        if inserted is None:
            return None
        order = invoice_order_row(
            sub,
            invoice_id=invoice_id,
            period=1,
            amount=plan["amount_minor"],
            amount_text=plan["amount_text"],
            currency=plan["currency"],
            return_url=plan.get("return_url"),
            at=now,
        )
        invoice = invoice_row(sub, invoice_id=invoice_id, period=1, order=order, start=None, end=None, at=at)
        await conn.execute(tables.payment_intents.insert(), order)
        await conn.execute(tables.subscription_invoices.insert(), invoice)
        created = event_row(
            merchant_id=order["merchant_id"],
            livemode=order["livemode"],
            type="payment_intent.created",
            data=payment_intent_event_data(order, self.base),
            at=now,
        )
        await conn.run_sync(insert_events, [created])
        confirmation = email_row(sub, invoice_id, "subscribed", now) if confirm else None
        if confirmation is not None:
            await conn.execute(tables.subscription_emails.insert(), confirmation)
        return Opened(True, sub, invoice, order)

    async def _vouch(self, conn: AsyncConnection, sub: dict[str, Any], email: str | None) -> dict[str, Any]:
        """The merchant takes a visitor's subscription as its customer's: only for the email on file."""
        on_file = sub["customer_email"]
        if email is None or on_file is None or email.casefold() != on_file.casefold():
            raise SubscriptionError(
                409,
                "customer_unverified",
                f"Subscription '{sub['id']}' to this plan for this customer id was opened on the hosted "
                "subscribe page by a visitor who chose the id, for another email: it is not taken for your "
                "customer. Cancel it if it is not theirs, and sign the customer ids of your subscribe links",
                param="merchantCustomerId",
            )
        subs = tables.subscriptions
        await conn.execute(update(subs).where(subs.c.id == sub["id"]).values(customer_vouched=True))
        return {**sub, "customer_vouched": True}

    async def email_access(self, sub: Mapping[str, Any]) -> bool:
        """Queue an email of ``sub``'s customer page link to the address on file (asked for on the
        subscribe page); at most one every `ACCESS_EMAIL_EVERY`. False when none was queued."""
        now = self.clock.now()
        emails = tables.subscription_emails
        row = email_row(sub, sub["open_invoice_id"], "access", now)
        if row is None:
            return False
        async with self.engine.begin() as conn:
            locked = select(tables.subscriptions.c.id).where(tables.subscriptions.c.id == sub["id"]).with_for_update()
            await conn.execute(locked)  # one of two concurrent asks queues it
            recent = await conn.scalar(
                select(emails.c.id).where(
                    emails.c.subscription_id == sub["id"],
                    emails.c.kind == "access",
                    emails.c.created_at > now - ACCESS_EMAIL_EVERY,
                )
            )
            if recent is not None:
                return False
            await conn.execute(emails.insert(), row)
        return True

    async def _current_invoice(
        self, conn: AsyncConnection, sub: Mapping[str, Any]
    ) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
        """The open invoice, else the latest one, with its order."""
        invoices, intents = tables.subscription_invoices, tables.payment_intents
        query = select(invoices).where(invoices.c.subscription_id == sub["id"])
        if sub["open_invoice_id"] is not None:
            query = query.where(invoices.c.id == sub["open_invoice_id"])
        invoice = (await conn.execute(query.order_by(invoices.c.period.desc()).limit(1))).mappings().first()
        if invoice is None:
            return None, None
        order = (await conn.execute(select(intents).where(intents.c.id == invoice["payment_intent_id"]))).mappings()
        found = order.first()
        return aware(invoice), None if found is None else aware(found)

    async def current_invoice(
        self, sub: Mapping[str, Any]
    ) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
        async with self.engine.connect() as conn:
            return await self._current_invoice(conn, sub)

    async def cancel(
        self, merchant_id: str, livemode: bool, subscription_id: str, *, at_period_end: bool = False
    ) -> Mapping[str, Any] | None:
        """Cancel now (the open invoice is voided and its payment order cancelled;
        ``subscription.canceled``), or with ``at_period_end`` mark an active subscription to end with
        its paid period. None when the merchant has no such subscription; `SubscriptionError` 409
        ``subscription_not_cancelable`` once it ended, ``subscription_not_active`` for
        ``at_period_end`` on a subscription without a paid period running."""
        subs = tables.subscriptions
        async with self.engine.begin() as conn:
            found = (
                (
                    await conn.execute(
                        select(subs)
                        .where(
                            subs.c.id == subscription_id, subs.c.merchant_id == merchant_id, subs.c.livemode == livemode
                        )
                        .with_for_update()
                    )
                )
                .mappings()
                .first()
            )
            if found is None:
                return None
            sub = aware(found)
            if sub["status"] in ENDED:
                raise SubscriptionError(
                    409, "subscription_not_cancelable", f"This subscription is {sub['status']} already"
                )
            now = self.clock.now()
            at = await clock_time(conn, sub["test_clock_id"], now)
            if at_period_end:
                return await self._cancel_at_period_end(conn, sub, at, now)
            invoice, order = await void_open_invoice(conn, sub, at, now, self.base)
            changes = {
                "status": "canceled",
                "open_key": None,
                "open_invoice_id": None,
                "canceled_at": at,
                "ended_at": at,
                "next_action": None,
                "due_at": None,
                "updated_at": at,
            }
            canceled = {**sub, **changes}
            await conn.execute(update(subs).where(subs.c.id == sub["id"]).values(**changes))
            event = subscription_event("canceled", canceled, invoice, order, self.base, now)
            await conn.run_sync(insert_events, [event])
            return canceled

    async def _cancel_at_period_end(
        self, conn: AsyncConnection, sub: Mapping[str, Any], at: datetime, now: datetime
    ) -> Mapping[str, Any]:
        if sub["status"] != "active":
            raise SubscriptionError(
                409,
                "subscription_not_active",
                f"This subscription is {sub['status']}: only an active one can be cancelled at its period end; "
                "cancel it now instead",
                param="atPeriodEnd",
            )
        if sub["cancel_at_period_end"]:
            return sub
        await void_open_invoice(conn, sub, at, now, self.base)  # no renewal is to be paid any more
        marked: dict[str, Any] = {
            **sub,
            "cancel_at_period_end": True,
            "open_invoice_id": None,
            "next_action": "period_end",
            "due_at": sub["current_period_end"],
            "updated_at": at,
        }
        subs = tables.subscriptions
        await conn.execute(update(subs).where(subs.c.id == sub["id"]).values({k: marked[k] for k in MUTABLE}))
        return marked
