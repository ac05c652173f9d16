"""The email outbox's worker: claims due emails, renders them and hands them to the transport.

A claim is a lease: the email's ``next_attempt_at`` moves `LEASE` ahead in the transaction that
reads it (``FOR UPDATE SKIP LOCKED`` on PostgreSQL), so that another worker leaves it alone while it
is sent, and sends it again if this one stops before recording the outcome (at least once; the
Message-ID stays the same). A failed send is retried after ``1 min × 2^attempt`` (capped at an hour)
until `GIVE_UP_AFTER`, then marked failed. An email that cannot be built (`UnbuildableEmail`: its
address is not one address, from a row written before the API checked that) is marked failed at
once, without a retry. Either way the merchant gets an ``email.failed`` event, in the transaction
that marks it. An email whose invoice is no longer open when its turn comes (paid, or voided) is
``skipped``: it would ask for a payment nobody owes; the emails that bring the customer page link
(``subscribed``, ``access``) go anyway, with a pay link only while it is open.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.emails.mailers import EmailTransport
from x402mw.platform.emails.messages import LINK_KINDS, Notice, UnbuildableEmail, compose
from x402mw.platform.objects.subscriptions import SubscriberEmail, SubscriberEmailEnvelope
from x402mw.platform.services.outbox import record_event
from x402mw.platform.services.payment_intents import amount_text
from x402mw.platform.services.subscriptions.customer_links import CustomerLinks
from x402mw.platform.services.subscriptions.periods import grace_end
from x402mw.platform.services.subscriptions.steps import aware

logger = logging.getLogger("x402mw.platform.emails")

LEASE = timedelta(minutes=2)
GIVE_UP_AFTER = timedelta(days=3)
_EMAILS = tables.subscription_emails


@dataclass
class EmailOutbox:
    engine: AsyncEngine
    clock: Clock
    transport: EmailTransport
    links: CustomerLinks
    sender: str
    grace_days: int  # the platform's default, for the past-due email's deadline

    async def send_due(self, *, limit: int = 50) -> int:
        """Send the emails that are due; how many were sent."""
        now = self.clock.now()
        async with self.engine.begin() as conn:
            due = list(
                (
                    await conn.execute(
                        select(_EMAILS)
                        .where(_EMAILS.c.status == "pending", _EMAILS.c.next_attempt_at <= now)
                        .order_by(_EMAILS.c.next_attempt_at)
                        .limit(limit)
                        .with_for_update(skip_locked=True)
                    )
                ).mappings()
            )
            if not due:
                return 0
            await conn.execute(
                update(_EMAILS)
                .where(_EMAILS.c.id.in_([e["id"] for e in due]))
                .values(next_attempt_at=now + LEASE, locked_until=now + LEASE)
            )
        sent = 0
        for email in due:
            sent += await self._send_one(aware(email))
        return sent

    async def _send_one(self, email: Mapping[str, Any]) -> int:
        try:
            notice = await self._notice(email)
            if notice is None:
                await self._record(email, status="skipped")
                return 0
            await self.transport.send(compose(notice, self.sender, self.clock.now()))
        except UnbuildableEmail as exc:
            logger.warning("email %s cannot be built, not sent: %s", email["id"], exc)
            await self._fail(email, int(email["attempts"]), str(exc))
            return 0
        except Exception as exc:
            attempts = int(email["attempts"]) + 1
            now = self.clock.now()
            reason = f"{type(exc).__name__}: {exc}"
            logger.warning("email %s to %s failed (attempt %d): %s", email["id"], email["to_address"], attempts, exc)
            if now - email["created_at"] > GIVE_UP_AFTER:
                await self._fail(email, attempts, reason)
            else:
                await self._record(
                    email,
                    status="pending",
                    attempts=attempts,
                    last_error=reason[:500],
                    next_attempt_at=now + timedelta(seconds=min(3600, 60 * 2 ** min(attempts - 1, 6))),
                )
            return 0
        await self._record(email, status="sent", attempts=int(email["attempts"]) + 1, sent_at=self.clock.now())
        return 1

    async def _record(self, email: Mapping[str, Any], **values: Any) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(update(_EMAILS).where(_EMAILS.c.id == email["id"]).values(locked_until=None, **values))

    async def _fail(self, email: Mapping[str, Any], attempts: int, reason: str) -> None:
        """Mark the email failed for good and tell its merchant (``email.failed``), once."""
        now = self.clock.now()
        async with self.engine.begin() as conn:
            marked = await conn.execute(
                update(_EMAILS)
                .where(_EMAILS.c.id == email["id"], _EMAILS.c.status == "pending")
                .values(status="failed", attempts=attempts, last_error=reason[:500], locked_until=None)
            )
            if marked.rowcount != 1:
                return  # another worker, whose lease ran out on it, recorded it first
            failed = SubscriberEmail(
                id=str(email["id"]),
                kind=str(email["kind"]),
                to=str(email["to_address"]),
                subscription_id=str(email["subscription_id"]),
                invoice_id=email["invoice_id"],
                status="failed",
                attempts=attempts,
                failure_reason=reason[:500],
                livemode=bool(email["livemode"]),
                created_at=email["created_at"],
            )
            await record_event(
                conn,
                merchant_id=str(email["merchant_id"]),
                livemode=bool(email["livemode"]),
                type="email.failed",
                data=SubscriberEmailEnvelope(email=failed).model_dump(mode="json"),
                at=now,
            )

    async def _notice(self, email: Mapping[str, Any]) -> Notice | None:
        """What the email says, from the subscription as it now is; None once its invoice is not open
        (but for the emails of the customer page link, which go without a pay link)."""
        subs, plans, merchants = tables.subscriptions, tables.subscription_plans, tables.merchants
        invoices = tables.subscription_invoices
        async with self.engine.connect() as conn:
            found = (
                (
                    await conn.execute(
                        select(
                            subs,
                            plans.c.name.label("plan_name"),
                            plans.c.interval,
                            plans.c.grace_days,
                            plans.c.amount_minor.label("plan_amount"),
                            plans.c.amount_text,
                            plans.c.currency.label("plan_currency"),
                            merchants.c.name.label("merchant_name"),
                        )
                        .join(plans, plans.c.id == subs.c.plan_id)
                        .join(merchants, merchants.c.id == subs.c.merchant_id)
                        .where(subs.c.id == email["subscription_id"])
                    )
                )
                .mappings()
                .first()
            )
            invoice = None
            if email["invoice_id"] is not None:
                invoice = (
                    (await conn.execute(select(invoices).where(invoices.c.id == email["invoice_id"])))
                    .mappings()
                    .first()
                )
        unpaid = invoice if invoice is not None and invoice["status"] == "open" else None
        if found is None or (unpaid is None and email["kind"] not in LINK_KINDS):
            return None
        sub = aware(found)
        due = (
            sub
            if unpaid is None
            else {**unpaid, "plan_amount": unpaid["amount_minor"], "plan_currency": unpaid["currency"]}
        )
        amount, currency = amount_text(due, "plan_amount"), due["plan_currency"]  # at the scale it was sent
        grace = self.grace_days if sub["grace_days"] is None else int(sub["grace_days"])
        ends = None
        if email["kind"] == "past_due" and sub["past_due_at"] is not None:
            ends = grace_end(sub["current_period_end"], sub["past_due_at"], grace)
        return Notice(
            id=str(email["id"]),
            kind=str(email["kind"]),
            to=str(email["to_address"]),
            merchant=str(sub["merchant_name"]),
            plan=str(sub["plan_name"]),
            interval={"weekly": "week", "monthly": "month", "quarterly": "quarter", "yearly": "year"}[sub["interval"]],
            amount=amount,
            currency=str(currency),
            period_end=sub["current_period_end"],
            grace_end=ends,
            pay_url=None if unpaid is None else f"{self.links.checkout_url_base}/pi_{unpaid['payment_intent_id']}",
            page_url=self.links.page_url(str(sub["id"])),
            livemode=bool(sub["livemode"]),
        )
