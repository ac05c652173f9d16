"""The public forms of plans, subscriptions, invoices and test clocks (the API's answers and the
events' ``data``), and the lookups that scope them to a merchant and mode."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from x402mw.platform.db import tables
from x402mw.platform.services.outbox import event_row
from x402mw.platform.services.payment_intents import DECIMALS, payment_intent_json
from x402mw.protocol.prices import format_amount

__all__ = [
    "clock_json",
    "find_owned",
    "invoice_json",
    "plan_json",
    "subscription_event",
    "subscription_json",
    ]


def _iso(value: datetime | None) -> str | None:
    from x402mw.platform.api.bodies import iso

    return iso(value)


def plan_json(row: Mapping[Any, Any], checkout_url_base: str) -> dict[str, Any]:
    """A plan; its ``checkoutUrl`` is ``{checkout_url_base}/su_<slug or id>``."""
    return {
        "id": row["id"],
        "object": "subscription_plan",
        "name": row["name"],
        "slug": row["slug"],
        "amount": format_amount(row["amount_minor"], DECIMALS),
        "currency": row["currency"],
        "interval": row["interval"],
        "active": bool(row["active"]),
        "graceDays": row["grace_days"],
        "checkoutUrl": f"{checkout_url_base}/su_{row['slug'] or row['id']}",
        "livemode": bool(row["livemode"]),
        "createdAt": _iso(row["created_at"]),
        "updatedAt": _iso(row["updated_at"]),
    }


def subscription_json(row: Mapping[Any, Any]) -> dict[str, Any]:
    """A subscription; ``merchantCustomerId`` is the merchant's customer id exactly as it was sent."""
    return {
        "id": row["id"],
        "object": "subscription",
        "planId": row["plan_id"],
        "status": row["status"],
        "merchantCustomerId": row["merchant_customer_id"],
        "customerEmail": row["customer_email"],
        "cancelAtPeriodEnd": bool(row["cancel_at_period_end"]),
        "currentPeriodStart": _iso(row["current_period_start"]),
        "currentPeriodEnd": _iso(row["current_period_end"]),
        "periodsPaid": int(row["periods_paid"]),
        "openInvoiceId": row["open_invoice_id"],
        "pastDueAt": _iso(row["past_due_at"]),
        "canceledAt": _iso(row["canceled_at"]),
        "endedAt": _iso(row["ended_at"]),
        "testClock": row["test_clock_id"],
        "livemode": bool(row["livemode"]),
        "createdAt": _iso(row["created_at"]),
        "updatedAt": _iso(row["updated_at"]),
    }


def invoice_json(row: Mapping[Any, Any], checkout_url_base: str) -> dict[str, Any]:
    """An invoice: the bill of one period, paid through the payment order ``paymentId``."""
    return {
        "id": row["id"],
        "object": "invoice",
        "subscriptionId": row["subscription_id"],
        "period": int(row["period"]),
        "status": row["status"],
        "amount": format_amount(row["amount_minor"], DECIMALS),
        "currency": row["currency"],
        "periodStart": _iso(row["period_start"]),
        "periodEnd": _iso(row["period_end"]),
        "paymentId": row["payment_intent_id"],
        "checkoutUrl": f"{checkout_url_base}/pi_{row['payment_intent_id']}",
        "paidAt": _iso(row["paid_at"]),
        "voidedAt": _iso(row["voided_at"]),
        "livemode": bool(row["livemode"]),
        "createdAt": _iso(row["created_at"]),
        "updatedAt": _iso(row["updated_at"]),
    }


def clock_json(row: Mapping[Any, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "object": "test_clock",
        "frozenTime": _iso(row["frozen_time"]),
        "livemode": bool(row["livemode"]),
        "createdAt": _iso(row["created_at"]),
        "updatedAt": _iso(row["updated_at"]),
    }


def subscription_event(
    kind: str,
    subscription: Mapping[Any, Any],
    invoice: Mapping[Any, Any] | None,
    order: Mapping[Any, Any] | None,
    base: str,
    at: datetime,
) -> dict[str, Any]:
    """The ``events`` row of ``subscription.<kind>``: data ``{subscription, invoice, paymentIntent}``."""
    return event_row(
        merchant_id=subscription["merchant_id"],
        livemode=subscription["livemode"],
        type=f"subscription.{kind}",
        data={
            "subscription": subscription_json(subscription),
            "invoice": None if invoice is None else invoice_json(invoice, base),
            "paymentIntent": None if order is None else payment_intent_json(order, base),
        },
        at=at,
    )


async def find_owned(
    conn: AsyncConnection, table_name: str, merchant_id: str, livemode: bool, ident: str
) -> Mapping[Any, Any] | None:
    """The merchant's row ``ident`` of ``table_name`` in this mode, or None (another merchant's row is
    indistinguishable from none)."""
    table = getattr(tables, table_name)
    query = select(table).where(table.c.id == ident, table.c.merchant_id == merchant_id, table.c.livemode == livemode)
    return (await conn.execute(query)).mappings().first()
