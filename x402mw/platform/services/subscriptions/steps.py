"""What a subscription does next, and the rows its changes write.

Every change of a subscription recomputes ``next_action`` and ``due_at`` (`schedule`): the worker
(`x402mw.platform.services.subscriptions.renewals`) runs the action once it is due. For an active subscription whose
period ends at ``E`` the actions are, in turn::

    open_renewal  at E - lead   renewal invoice and payment order open; email "invoice_opened"
    remind        at E - 1 day  email "reminder" (skipped when the invoice opened later than that)
    period_end    at E          -> past_due, email "past_due"   (with cancelAtPeriodEnd: -> canceled)

and for a past-due subscription ``expire`` at the end of its grace period. A confirmed renewal moves
``E`` one period on and starts again at ``open_renewal``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from x402mw.platform.db.models import new_id
from x402mw.platform.services.payment_intents import UNPAID
from x402mw.platform.services.subscriptions.periods import REMINDER_LEAD, grace_end, renewal_lead

OPEN = frozenset({"incomplete", "active", "past_due"})
ENDED = frozenset({"canceled", "expired"})
MUTABLE = (
    "status",
    "cancel_at_period_end",
    "open_key",
    "anchor_at",
    "periods_paid",
    "current_period_start",
    "current_period_end",
    "open_invoice_id",
    "past_due_at",
    "canceled_at",
    "ended_at",
    "next_action",
    "due_at",
    "updated_at",
)
"""The columns of ``subscriptions`` that change after it is opened."""
PAYMENT_METHODS = {"wallet": True, "transfer": True, "transferDefaultOpen": False}


def aware(row: Mapping[Any, Any]) -> dict[str, Any]:
    """``row`` as a dict whose times are timezone-aware (SQLite answers naive UTC ones)."""
    return {
        key: value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value
        for key, value in row.items()
    }


def schedule(
    sub: Mapping[str, Any], interval: str, grace_days: int | None, *, reminded: bool
) -> tuple[str | None, datetime | None]:
    """``(next_action, due_at)`` of ``sub`` as it now is. ``reminded``: its open invoice's reminder is
    done. With ``grace_days`` unknown (None), a past-due subscription is due at once, so that the
    worker, which knows the platform's grace period, schedules its expiry."""
    end = sub["current_period_end"]
    if sub["status"] == "active" and end is not None:
        if sub["cancel_at_period_end"]:
            return "period_end", end
        if sub["open_invoice_id"] is None:
            return "open_renewal", end - renewal_lead(interval)
        if not reminded:
            return "remind", end - REMINDER_LEAD
        return "period_end", end
    if sub["status"] == "past_due":
        if grace_days is None:
            return "expire", sub["past_due_at"]
        return "expire", grace_end(end, sub["past_due_at"], grace_days)
    return None, None


def invoice_order_row(
    sub: Mapping[str, Any],
    *,
    invoice_id: str,
    period: int,
    amount: int,
    amount_text: str | None,
    currency: str,
    return_url: str | None,
    at: datetime,
) -> dict[str, Any]:
    """The payment order of an invoice, as a ``payment_intents`` row: open until paid, without expiry
    (the subscription's own schedule closes it). ``amount_text`` is the plan's amount as it was sent,
    kept by the order and its invoice (`payment_intents.amount_text`). Its ``successUrl`` is the plan's
    ``returnUrl`` (the shop), never the customer page: an order's page and its public API answer show
    that link to whoever holds the order's id, and the customer page link is the customer's alone (it
    reaches them by email, or through the merchant)."""
    return {
        **UNPAID,
        "id": new_id(),
        "merchant_id": sub["merchant_id"],
        "livemode": sub["livemode"],
        "order_id": f"subscription:{sub['id']}:{period}",
        "status": "requires_payment",
        "amount_minor": amount,
        "amount_received_minor": 0,
        "currency": currency,
        "accepted_currencies": [currency],
        "payment_methods": dict(PAYMENT_METHODS),
        "customer_email": sub["customer_email"],
        "customer_name": None,
        "success_url": return_url,
        "cancel_url": None,
        "order_metadata": {"subscriptionId": sub["id"], "invoiceId": invoice_id, "period": str(period)},
        "transfer_hold": None,
        "amount_text": amount_text,
        "payment_link_id": None,
        "exceptions": [],
        "expires_at": None,
        "created_at": at,
        "updated_at": at,
    }


def invoice_row(
    sub: Mapping[str, Any],
    *,
    invoice_id: str,
    period: int,
    order: Mapping[str, Any],
    start: datetime | None,
    end: datetime | None,
    at: datetime,
) -> dict[str, Any]:
    return {
        "id": invoice_id,
        "subscription_id": sub["id"],
        "merchant_id": sub["merchant_id"],
        "livemode": sub["livemode"],
        "period": period,
        "status": "open",
        "amount_minor": order["amount_minor"],
        "amount_text": order["amount_text"],
        "currency": order["currency"],
        "payment_intent_id": order["id"],
        "period_start": start,
        "period_end": end,
        "reminded_at": None,
        "paid_at": None,
        "voided_at": None,
        "created_at": at,
        "updated_at": at,
    }


def email_row(sub: Mapping[str, Any], invoice_id: str | None, kind: str, at: datetime) -> dict[str, Any] | None:
    """The email outbox row of a ``kind`` email to the subscriber, or None without an address."""
    if not sub["customer_email"]:
        return None
    return {
        "id": new_id(),
        "merchant_id": sub["merchant_id"],
        "livemode": sub["livemode"],
        "subscription_id": sub["id"],
        "invoice_id": invoice_id,
        "kind": kind,
        "to_address": sub["customer_email"],
        "status": "pending",
        "attempts": 0,
        "last_error": None,
        "next_attempt_at": at,
        "locked_until": None,
        "sent_at": None,
        "created_at": at,
    }
