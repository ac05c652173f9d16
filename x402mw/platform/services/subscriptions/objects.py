"""The public forms of plans, subscriptions, invoices and test clocks (the response models of
`x402mw.platform.objects.subscriptions`), built from their rows: the API answers them and the
subscription events carry them."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from x402mw.platform.db import tables
from x402mw.platform.objects.subscriptions import Invoice, Subscription, SubscriptionOpened, SubscriptionPlan, TestClock
from x402mw.platform.services.outbox import event_row
from x402mw.platform.services.payment_intents import amount_text, payment_intent_of
from x402mw.platform.services.slugs import slug_ref


def plan_of(row: Mapping[Any, Any], checkout_url_base: str) -> SubscriptionPlan:
    """A plan; its ``checkoutUrl`` is ``{checkout_url_base}/su_<slug>.<merchant id>`` with a slug,
    else ``{checkout_url_base}/su_<id>``."""
    slug = row["slug"]
    return SubscriptionPlan(
        id=row["id"],
        name=row["name"],
        slug=slug,
        amount=Decimal(amount_text(row)),
        currency=row["currency"],
        interval=row["interval"],
        active=bool(row["active"]),
        grace_days=row["grace_days"],
        return_url=row.get("return_url"),
        checkout_url=f"{checkout_url_base}/su_{slug_ref(slug, row['merchant_id']) if slug else row['id']}",
        livemode=bool(row["livemode"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def subscription_of(row: Mapping[Any, Any], page_url: str | None = None) -> Subscription:
    """A subscription; ``merchantCustomerId`` is the merchant's customer id exactly as it was sent.
    ``page_url``: its customer page link, which the API answers to the merchant (an event, stored and
    logged where the merchant's deliveries go, carries none)."""
    return Subscription(
        id=row["id"],
        plan_id=row["plan_id"],
        status=row["status"],
        merchant_customer_id=row["merchant_customer_id"],
        customer_email=row["customer_email"],
        cancel_at_period_end=bool(row["cancel_at_period_end"]),
        current_period_start=row["current_period_start"],
        current_period_end=row["current_period_end"],
        periods_paid=int(row["periods_paid"]),
        open_invoice_id=row["open_invoice_id"],
        past_due_at=row["past_due_at"],
        canceled_at=row["canceled_at"],
        ended_at=row["ended_at"],
        test_clock=row["test_clock_id"],
        customer_page_url=page_url,
        livemode=bool(row["livemode"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def invoice_of(row: Mapping[Any, Any], checkout_url_base: str) -> Invoice:
    """An invoice: the bill of one period, paid through the payment order ``paymentId``."""
    return Invoice(
        id=row["id"],
        subscription_id=row["subscription_id"],
        period=int(row["period"]),
        status=row["status"],
        amount=Decimal(amount_text(row)),
        currency=row["currency"],
        period_start=row["period_start"],
        period_end=row["period_end"],
        payment_id=row["payment_intent_id"],
        checkout_url=f"{checkout_url_base}/pi_{row['payment_intent_id']}",
        paid_at=row["paid_at"],
        voided_at=row["voided_at"],
        livemode=bool(row["livemode"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def clock_of(row: Mapping[Any, Any]) -> TestClock:
    return TestClock(
        id=row["id"],
        frozen_time=row["frozen_time"],
        livemode=bool(row["livemode"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def opened_of(
    subscription: Mapping[Any, Any],
    invoice: Mapping[Any, Any] | None,
    order: Mapping[Any, Any] | None,
    base: str,
    page_url: str | None = None,
) -> SubscriptionOpened:
    """``{subscription, invoice, paymentIntent}``: the open-subscription answer and every subscription
    event's ``data``."""
    return SubscriptionOpened(
        subscription=subscription_of(subscription, page_url),
        invoice=None if invoice is None else invoice_of(invoice, base),
        payment_intent=None if order is None else payment_intent_of(order, base),
    )


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
        data=opened_of(subscription, invoice, order, base).model_dump(mode="json"),
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
