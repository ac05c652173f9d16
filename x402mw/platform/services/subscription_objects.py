"""The public forms of plans, subscriptions, invoices and test clocks: pydantic models, camelCase on the
wire, money as decimal strings, times as ISO 8601 UTC with milliseconds. The API answers them, the
events carry them, and the OpenAPI document's schemas are generated from them (`response_schemas`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic.json_schema import models_json_schema
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from x402mw.platform.db import tables
from x402mw.platform.services.outbox import event_row
from x402mw.platform.services.payment_intents import DECIMALS, payment_intent_json
from x402mw.protocol.prices import format_amount

__all__ = [
    "Invoice",
    "Subscription",
    "SubscriptionOpened",
    "SubscriptionPlan",
    "TestClock",
    "clock_json",
    "find_owned",
    "invoice_json",
    "opened_json",
    "plan_json",
    "response_schemas",
    "subscription_event",
    "subscription_json",
]

_REF = "#/components/schemas/{model}"
Timestamp = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
Money = Annotated[str, WithJsonSchema({"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"})]
Currency = Literal["USDC", "USDT", "EURC"]
Interval = Literal["weekly", "monthly", "quarterly", "yearly"]
PaymentIntentRef = Annotated[dict[str, Any], WithJsonSchema({"$ref": _REF.format(model="PaymentIntent")})]


def _iso(value: datetime | None) -> str | None:
    from x402mw.platform.api.bodies import iso

    return iso(value)


class _Answer(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        json_schema_serialization_defaults_required=True,
    )

    def wire(self) -> dict[str, Any]:
        """The JSON form: camelCase members."""
        return self.model_dump(by_alias=True)


class SubscriptionPlan(_Answer):
    """A subscription plan: a price per interval."""

    id: str
    object: Literal["subscription_plan"] = "subscription_plan"
    name: str
    slug: str | None = Field(description="names the plan in its checkout link instead of its id")
    amount: Money
    currency: Currency
    interval: Interval
    active: bool = Field(description="an inactive plan opens no new subscriptions; open ones renew")
    grace_days: int | None = Field(description="days a past-due subscription is kept; null: the platform's")
    checkout_url: str = Field(description="`{checkout_url_base}/su_<slug or id>`: the hosted subscribe page")
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp


class Subscription(_Answer):
    """A customer's subscription to a plan."""

    id: str
    object: Literal["subscription"] = "subscription"
    plan_id: str
    status: Literal["incomplete", "active", "past_due", "canceled", "expired"]
    merchant_customer_id: str = Field(description="the merchant's customer id, exactly as it was sent")
    customer_email: str | None
    cancel_at_period_end: bool
    current_period_start: Timestamp | None
    current_period_end: Timestamp | None = Field(description="the end of the paid period")
    periods_paid: int
    open_invoice_id: str | None = Field(description="the invoice awaiting payment, if any")
    past_due_at: Timestamp | None
    canceled_at: Timestamp | None
    ended_at: Timestamp | None
    test_clock: str | None = Field(description="the test clock it lives on, if any")
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp


class Invoice(_Answer):
    """The bill of one billing period, paid through its own payment order."""

    id: str
    object: Literal["invoice"] = "invoice"
    subscription_id: str
    period: int = Field(description="which period of the subscription it bills: 1 is the first")
    status: Literal["open", "paid", "void"]
    amount: Money
    currency: Currency
    period_start: Timestamp | None = Field(description="null for a first invoice until it is paid")
    period_end: Timestamp | None
    payment_id: str = Field(description="its payment order (payment intent)")
    checkout_url: str = Field(description="the payment order's hosted checkout page")
    paid_at: Timestamp | None
    voided_at: Timestamp | None
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp


class TestClock(_Answer):
    """A test-mode clock that subscriptions opened on it live by."""

    __test__ = False  # not a pytest test class, whatever its name

    id: str
    object: Literal["test_clock"] = "test_clock"
    frozen_time: Timestamp
    livemode: bool
    created_at: Timestamp
    updated_at: Timestamp


class SubscriptionOpened(_Answer):
    """What opening a subscription answers, and what subscription events carry."""

    subscription: Subscription
    invoice: Invoice | None
    payment_intent: PaymentIntentRef | None


def plan_json(row: Mapping[Any, Any], checkout_url_base: str) -> dict[str, Any]:
    """A plan; its ``checkoutUrl`` is ``{checkout_url_base}/su_<slug or id>``."""
    return SubscriptionPlan(
        id=row["id"],
        name=row["name"],
        slug=row["slug"],
        amount=format_amount(row["amount_minor"], DECIMALS),
        currency=row["currency"],
        interval=row["interval"],
        active=bool(row["active"]),
        grace_days=row["grace_days"],
        checkout_url=f"{checkout_url_base}/su_{row['slug'] or row['id']}",
        livemode=bool(row["livemode"]),
        created_at=_iso(row["created_at"]) or "",
        updated_at=_iso(row["updated_at"]) or "",
    ).wire()


def subscription_json(row: Mapping[Any, Any]) -> dict[str, Any]:
    """A subscription; ``merchantCustomerId`` is the merchant's customer id exactly as it was sent."""
    return Subscription(
        id=row["id"],
        plan_id=row["plan_id"],
        status=row["status"],
        merchant_customer_id=row["merchant_customer_id"],
        customer_email=row["customer_email"],
        cancel_at_period_end=bool(row["cancel_at_period_end"]),
        current_period_start=_iso(row["current_period_start"]),
        current_period_end=_iso(row["current_period_end"]),
        periods_paid=int(row["periods_paid"]),
        open_invoice_id=row["open_invoice_id"],
        past_due_at=_iso(row["past_due_at"]),
        canceled_at=_iso(row["canceled_at"]),
        ended_at=_iso(row["ended_at"]),
        test_clock=row["test_clock_id"],
        livemode=bool(row["livemode"]),
        created_at=_iso(row["created_at"]) or "",
        updated_at=_iso(row["updated_at"]) or "",
    ).wire()


def invoice_json(row: Mapping[Any, Any], checkout_url_base: str) -> dict[str, Any]:
    """An invoice: the bill of one period, paid through the payment order ``paymentId``."""
    return Invoice(
        id=row["id"],
        subscription_id=row["subscription_id"],
        period=int(row["period"]),
        status=row["status"],
        amount=format_amount(row["amount_minor"], DECIMALS),
        currency=row["currency"],
        period_start=_iso(row["period_start"]),
        period_end=_iso(row["period_end"]),
        payment_id=row["payment_intent_id"],
        checkout_url=f"{checkout_url_base}/pi_{row['payment_intent_id']}",
        paid_at=_iso(row["paid_at"]),
        voided_at=_iso(row["voided_at"]),
        livemode=bool(row["livemode"]),
        created_at=_iso(row["created_at"]) or "",
        updated_at=_iso(row["updated_at"]) or "",
    ).wire()


def clock_json(row: Mapping[Any, Any]) -> dict[str, Any]:
    return TestClock(
        id=row["id"],
        frozen_time=_iso(row["frozen_time"]) or "",
        livemode=bool(row["livemode"]),
        created_at=_iso(row["created_at"]) or "",
        updated_at=_iso(row["updated_at"]) or "",
    ).wire()


def opened_json(
    subscription: Mapping[Any, Any], invoice: Mapping[Any, Any] | None, order: Mapping[Any, Any] | None, base: str
) -> dict[str, Any]:
    """``{subscription, invoice, paymentIntent}``: the open-subscription answer and every subscription
    event's ``data``."""
    return {
        "subscription": subscription_json(subscription),
        "invoice": None if invoice is None else invoice_json(invoice, base),
        "paymentIntent": None if order is None else payment_intent_json(order, base),
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
        data=opened_json(subscription, invoice, order, base),
        at=at,
    )


def response_schemas(models: Sequence[type[BaseModel]] | None = None) -> dict[str, Any]:
    """The OpenAPI component schemas of the answers, by title (those they refer to included)."""
    chosen = models or [SubscriptionPlan, Subscription, Invoice, TestClock, SubscriptionOpened]
    _, top = models_json_schema([(model, "serialization") for model in chosen], ref_template=_REF)
    return dict(top.get("$defs", {}))


async def find_owned(
    conn: AsyncConnection, table_name: str, merchant_id: str, livemode: bool, ident: str
) -> Mapping[Any, Any] | None:
    """The merchant's row ``ident`` of ``table_name`` in this mode, or None (another merchant's row is
    indistinguishable from none)."""
    table = getattr(tables, table_name)
    query = select(table).where(table.c.id == ident, table.c.merchant_id == merchant_id, table.c.livemode == livemode)
    return (await conn.execute(query)).mappings().first()
