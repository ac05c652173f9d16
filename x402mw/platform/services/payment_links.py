"""Payment links (DESIGN 9): a reusable priced link that gives each buyer a payment order of their own.

A link's ``checkoutUrl`` is ``{checkout_url_base}/pl_<id>``; with a slug (unique per merchant,
`x402mw.platform.services.slugs`), ``/paylink/<slug>.<merchant id>`` opens it too, and so does the
bare ``/paylink/<slug>`` handed out while slugs were one namespace. Opening an active link gives
the buyer an order (``paymentLinkId`` set, the link's amount, coins, methods, URLs and metadata,
expiring after `LINK_ORDER_LIFETIME`), created like any other order (``payment_intent.created`` and
the rest of its events), then paid, refunded and reported as usual.
An inactive link opens nothing: 409 ``payment_link_inactive``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.objects.payments import PaymentLink, PaymentMethods
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.merchants import newest_rows
from x402mw.platform.services.payment_intents import PaymentIntentError, PaymentIntentWriter, amount_text
from x402mw.platform.services.slugs import find_by_slug, slug_ref

LINK_ORDER_LIFETIME = timedelta(hours=24)
"""How long the order a buyer gets from a link can be paid (the page's cookie keeps it that long)."""


def payment_link_of(row: Mapping[Any, Any], checkout_url_base: str) -> PaymentLink:
    """The public form of a link (the merchant API's ``paymentLink``)."""
    slug = row["slug"]
    return PaymentLink(
        id=row["id"],
        name=row["name"],
        slug=slug,
        active=bool(row["active"]),
        amount=Decimal(amount_text(row)),
        currency=row["currency"],
        accepted_currencies=row["accepted_currencies"],
        payment_methods=PaymentMethods.model_validate(row["payment_methods"]),
        checkout_url=f"{checkout_url_base}/pl_{row['id']}",
        slug_url=None if slug is None else f"{checkout_url_base}/paylink/{slug_ref(slug, row['merchant_id'])}",
        success_url=row["success_url"],
        cancel_url=row["cancel_url"],
        metadata=row["link_metadata"],
        livemode=bool(row["livemode"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


async def find_payment_link(conn: AsyncConnection, link_id: str) -> Mapping[Any, Any] | None:
    """The link with this id, whoever's it is (public pages), or None."""
    table = tables.payment_links
    return (await conn.execute(select(table).where(table.c.id == link_id))).mappings().first()


async def find_payment_link_by_slug(conn: AsyncConnection, ref: str) -> Mapping[Any, Any] | None:
    """The link ``/paylink/<ref>`` names (``<slug>.<merchant id>``, or an old bare slug), or None."""
    return await find_by_slug(conn, tables.payment_links, ref)


async def open_payment_link(writer: PaymentIntentWriter, link: Mapping[Any, Any], now: datetime) -> dict[str, Any]:
    """A new order for one buyer of ``link``; `PaymentIntentError` 409 ``payment_link_inactive`` when
    the merchant has deactivated it. The order's ``orderId`` is its own id (unique by construction)."""
    if not link["active"]:
        raise PaymentIntentError(
            409, "payment_link_inactive", "This payment link has been deactivated by the merchant", param="id"
        )
    order_id = new_id()
    order = writer.new_order(
        {
            "id": order_id,
            "merchant_id": link["merchant_id"],
            "livemode": bool(link["livemode"]),
            "order_id": order_id,
            "status": "requires_payment",
            "amount_minor": int(link["amount_minor"]),
            "amount_text": link["amount_text"],
            "amount_received_minor": 0,
            "currency": link["currency"],
            "accepted_currencies": list(link["accepted_currencies"]),
            "payment_methods": dict(link["payment_methods"]),
            "customer_email": None,
            "customer_name": None,
            "success_url": link["success_url"],
            "cancel_url": link["cancel_url"],
            "order_metadata": dict(link["link_metadata"]),
            "exceptions": [],
            "expires_at": now + LINK_ORDER_LIFETIME,
            "payment_link_id": link["id"],
            "description": link["name"],
            "created_at": now,
            "updated_at": now,
        }
    )
    await writer.create(order)
    return order


async def create_payment_link(engine: AsyncEngine, row: Mapping[str, Any]) -> None:
    """Store the link ``row``; 409 ``slug_taken`` when another link of the merchant has its slug."""
    try:
        async with engine.begin() as conn:
            await conn.execute(tables.payment_links.insert(), dict(row))
    except IntegrityError:
        if row.get("slug") is None:
            raise
        message = f"You already have a payment link with the slug {row['slug']!r}; choose another"
        raise ServiceError(409, "slug_taken", message, param="slug") from None


async def newest_payment_links(
    engine: AsyncEngine, merchant_id: str, livemode: bool, limit: int = 200
) -> list[Row[Any]]:
    """The merchant's payment links of this mode, newest first."""
    return await newest_rows(engine, tables.payment_links, merchant_id, livemode, limit)


async def deactivate_payment_link(
    engine: AsyncEngine, merchant_id: str, livemode: bool, link_id: str, now: datetime
) -> bool:
    """Make the link open no new orders (what ``PATCH /payment-links/:id {active: false}`` does);
    False when the merchant has no such link in this mode."""
    t = tables.payment_links
    owned = (t.c.id == link_id) & (t.c.merchant_id == merchant_id) & (t.c.livemode == livemode)
    async with engine.begin() as conn:
        changed = await conn.execute(t.update().where(owned).values(active=False, updated_at=now))
    return bool(changed.rowcount)
