"""Payment orders (payment intents, spec 2.1): money, creation, cancel, expiry and their events.

Statuses (DESIGN 6)::

    requires_payment ──cancel──────▶ canceled
        │    └───────at expiresAt──▶ expired
        ▼ payment seen on-chain
    processing ──confirmed──▶ succeeded ──refund completed──▶ refunded
    (a reorg takes processing or succeeded back to requires_payment)

``underpaid``, ``overpaid``, ``paid_late`` and ``wrong_asset`` are entries of the ``exceptions`` field,
never statuses. Every change writes its event (``payment_intent.created``, ``.canceled``, ``.expired``)
to the ``events`` outbox in the same transaction, with data ``{"paymentIntent": <the object>}``.

Who is told of a paid order: only the deposit watcher (`x402mw.platform.services.watcher.DepositWatcher`)
confirms a payment (``processing`` → ``succeeded``) or reverses one (``succeeded`` →
``requires_payment``), and it tells the `OrderFollower` it is built with, in the transaction of the
move. The platform (`x402mw.platform.runtime`) gives it the subscriptions' follower
(`x402mw.platform.services.subscriptions.payments.follow_order`), so that an order paying an invoice
moves its subscription. `transition` itself tells no one: the other moves (cancel, expiry, refund,
a payment seen) concern no follower.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from x402mw.errors import PriceError
from x402mw.platform.batching import Coalescer
from x402mw.platform.db import tables
from x402mw.platform.db.engine import HeldConnection
from x402mw.platform.objects.base import money
from x402mw.platform.objects.payments import Customer, PaymentIntent, PaymentIntentEnvelope, PaymentMethods
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.idempotency import KeySlot, KeyTaken, insert_keys, key_rows
from x402mw.platform.services.outbox import event_row, insert_events, record_event
from x402mw.protocol.prices import AmountFormat, format_amount

CURRENCIES = ("USDC", "USDT", "EURC")
DECIMALS = 6
ORDER_AMOUNTS = AmountFormat(decimals=DECIMALS, max_exponent=9)
"""What an order's ``amount`` may be: the OpenAPI document publishes its pattern."""
STATUSES = ("requires_payment", "processing", "succeeded", "canceled", "expired", "refunded")
OPEN_STATUSES = frozenset({"requires_payment", "processing"})
TRANSITIONS: Mapping[str, frozenset[str]] = {
    "requires_payment": frozenset({"processing", "canceled", "expired"}),
    "processing": frozenset({"succeeded", "requires_payment"}),
    "succeeded": frozenset({"refunded", "requires_payment"}),
    # a payment arriving after cancellation or expiry is still taken (flagged ``paid_late``)
    "canceled": frozenset({"processing"}),
    "expired": frozenset({"processing"}),
    "refunded": frozenset(),
}
FIXED_TRANSFER_KEY = "fixed_transfer_customer_id"


class PaymentIntentError(ServiceError):
    """A payment order request the rules refuse."""


class OrderLinks(str):
    """The checkout URL base (``{checkout_url_base}``, what `payment_intent_of` and the services take
    as ``checkout_url_base``), also knowing ``api_host``, the origin an order's ``x402Url`` is on
    (``{api_host}/x402/pay/pi_<uuid>``). A plain ``str`` base stands for the default layout, where
    checkout is served at ``{api_host}/checkout``."""

    api_host: str

    def __new__(cls, checkout_url_base: str, api_host: str) -> OrderLinks:
        links = super().__new__(cls, checkout_url_base.rstrip("/"))
        links.api_host = api_host.rstrip("/")
        return links


def api_host_of(checkout_url_base: str) -> str:
    """The origin ``x402Url`` is on, for a checkout URL base (`OrderLinks` carries it)."""
    if isinstance(checkout_url_base, OrderLinks):
        return checkout_url_base.api_host
    parts = urlsplit(checkout_url_base)
    return f"{parts.scheme}://{parts.netloc}"


def amount_text(row: Mapping[Any, Any], minor_key: str = "amount_minor") -> str:
    """An amount as the merchant sent it (``"25.00"`` stays ``"25.00"``), or, for one sent as a JSON
    number, its plain decimal.

    This is how every amount the API echoes keeps its scale: a row holds ``amount_minor`` (what is
    computed with) and ``amount_text`` (what was sent; NULL for a JSON number) side by side. Orders
    and payment links keep the text they were sent; a plan keeps its own, and hands it to each
    invoice and that invoice's order as the invoice opens; a refund keeps the amount it returns at
    its order's scale (`at_scale_of`)."""
    text: str | None = row.get("amount_text")
    return text if text else format_amount(int(row[minor_key]), DECIMALS)


def at_scale_of(text: str, minor: int) -> str:
    """``minor`` written with at least as many decimals as ``text`` has: an amount derived from a sent
    one (a refund of what an order received) answered at the scale it was sent with.

    >>> at_scale_of("25.00", 25000000), at_scale_of("25", 12345678)
    ('25.00', '12.345678')
    """
    scale = len(text.partition(".")[2])
    return format(money(minor, DECIMALS, scale=scale), "f")


def parse_amount(value: object) -> int:
    """An order's amount in minor units: `ORDER_AMOUNTS` (greater than 0, at most 1,000,000,000, at
    most 6 decimals), as a decimal string in the amount grammar, an int, or a JSON number read by
    its value; floats are refused. Raises ``ValueError`` (a pydantic field check).

    >>> parse_amount("12.5")
    12500000
    """
    try:
        return ORDER_AMOUNTS.parse(value)
    except PriceError as exc:
        raise ValueError(exc.message) from None


def payment_intent_of(row: Mapping[Any, Any], checkout_url_base: str) -> PaymentIntent:
    """The public form of an order: the API's ``paymentIntent`` and the events' ``data.paymentIntent``."""
    return PaymentIntent(
        payment_id=row["id"],
        id=row["id"],
        status=row["status"],
        order_id=row["order_id"],
        amount=Decimal(amount_text(row)),
        amount_received=money(row["amount_received_minor"], DECIMALS),
        currency=row["currency"],
        accepted_currencies=row["accepted_currencies"],
        payment_methods=PaymentMethods.model_validate(row["payment_methods"]),
        checkout_url=f"{checkout_url_base}/pi_{row['id']}",
        x402_url=f"{api_host_of(checkout_url_base)}/x402/pay/pi_{row['id']}",
        payment_link_id=row.get("payment_link_id"),
        description=row.get("description"),
        success_url=row["success_url"],
        cancel_url=row["cancel_url"],
        customer=Customer(email=row["customer_email"], name=row["customer_name"]),
        metadata=row["order_metadata"],
        exceptions=row["exceptions"],
        network=None if row.get("chain_id") is None else f"eip155:{row['chain_id']}",
        paid_currency=row.get("paid_currency"),
        payer=row.get("payer"),
        tx_hash=row["tx_hash"],
        paid_at=row["paid_at"],
        expires_at=row["expires_at"],
        livemode=bool(row["livemode"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def payment_intent_event_data(row: Mapping[Any, Any], checkout_url_base: str) -> dict[str, Any]:
    """An order event's ``data``: ``{"paymentIntent": <the order>}``."""
    return PaymentIntentEnvelope(payment_intent=payment_intent_of(row, checkout_url_base)).model_dump(mode="json")


async def record_intent_event(
    conn: AsyncConnection, row: Mapping[Any, Any], kind: str, at: datetime, base: str
) -> None:
    """Write ``payment_intent.<kind>`` with the order as it now is."""
    await record_event(
        conn,
        merchant_id=row["merchant_id"],
        livemode=row["livemode"],
        type=f"payment_intent.{kind}",
        data=payment_intent_event_data(row, base),
        at=at,
    )


async def find_payment_intent(
    conn: AsyncConnection, merchant_id: str, livemode: bool, payment_id: str
) -> Mapping[Any, Any] | None:
    """The merchant's order, or None (another merchant's order is indistinguishable from none)."""
    table = tables.payment_intents
    query = select(table).where(
        table.c.id == payment_id, table.c.merchant_id == merchant_id, table.c.livemode == livemode
    )
    return (await conn.execute(query)).mappings().first()


async def read_payment_intent(
    engine: AsyncEngine, merchant_id: str, livemode: bool, payment_id: str
) -> Mapping[Any, Any] | None:
    """`find_payment_intent` on a connection of its own."""
    async with engine.connect() as conn:
        return await find_payment_intent(conn, merchant_id, livemode, payment_id)


UNPAID = {
    "tx_hash": None,
    "paid_at": None,
    "deposit_address": None,
    "chain_id": None,
    "paid_currency": None,
    "payer": None,
    "swept_at": None,
    "relay_hash": None,
    "relay_claimed_at": None,
}
"""The columns of a new order that only its payment sets."""


_Creation = tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]
"""An order to insert, its idempotency key's row (or None), and its created event's data."""


class PaymentIntentWriter:
    """Creates orders. Concurrent creations in this process share one transaction (`Coalescer`, on a
    `HeldConnection`): each order is inserted unless it conflicts, with its ``payment_intent.created``
    event and, when the request carries an ``Idempotency-Key``, the key done with the response that
    answers it (`x402mw.platform.services.idempotency`)."""

    def __init__(self, engine: AsyncEngine, checkout_url_base: str) -> None:
        self.engine = engine
        self.checkout_url_base = checkout_url_base
        table = tables.payment_intents
        insert_for = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
        self._insert = insert_for(table).on_conflict_do_nothing().returning(table.c.id)
        self._insert_keys = insert_keys(engine)
        self._conn = HeldConnection(engine)
        self._batch: Coalescer[_Creation, str] = Coalescer(self._write)

    def new_order(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The stored form of the new order ``row`` (every ``payment_intents`` column but those of
        `UNPAID`); `payment_intent_of` it is the order's public form."""
        return {
            **UNPAID,
            "amount_text": None,
            "payment_link_id": None,
            "description": None,
            **row,
            "transfer_hold": row["order_metadata"].get(FIXED_TRANSFER_KEY) or None,
        }

    async def create(
        self,
        order: dict[str, Any],
        *,
        public: PaymentIntent | None = None,
        key: KeySlot | None = None,
        answer: tuple[int, list[tuple[bytes, bytes]], bytes] | None = None,
    ) -> None:
        """Store ``order`` (from `new_order`) and its ``payment_intent.created`` event (whose data is
        ``public``, `payment_intent_of` the order, when the caller has made it already). With a ``key``
        not claimed yet (one `IdempotencyMiddleware` lets this endpoint take over), insert the key
        in the same transaction, done with ``answer`` (status, headers, body); a claimed key is left
        to the middleware.

        Raises `KeyTaken` when the key turns out used already (nothing is written),
        `PaymentIntentError` 409 ``order_id_conflict`` when the merchant already has the order id in
        this mode, and 409 ``fixed_transfer_active_payment`` when another open order holds the
        customer's fixed transfer address."""
        done = key.done_row(*answer) if key is not None and not key.claimed and answer is not None else None
        public = public or payment_intent_of(order, self.checkout_url_base)
        data = PaymentIntentEnvelope(payment_intent=public).model_dump(mode="json")
        outcome = await self._batch.submit((order, done, data))
        if outcome == _TAKEN:
            raise KeyTaken()
        if outcome == _CONFLICT:
            raise await _conflict(self.engine, order)
        if key is not None and done is not None:
            key.stored = True

    async def _write(self, items: list[_Creation]) -> list[str]:
        """Write what the batch can in one transaction: first the new keys (an order whose key is
        used already is left out), then the orders that conflict with none (stored or earlier in the
        batch) with their events. A key whose order conflicted is taken back, so that the conflict
        can be stored as its answer."""
        new_keys = [key for _order, key, _data in items if key is not None]

        def write(conn: Connection) -> tuple[set[str], set[str]]:
            won = set(conn.execute(self._insert_keys, key_rows(new_keys)).scalars()) if new_keys else set()
            taken = {order["id"] for order, key, _data in items if key is not None and key["id"] not in won}
            rows = [order for order, _key, _data in items if order["id"] not in taken]
            inserted = set(conn.execute(self._insert, rows).scalars()) if rows else set()
            events = [
                event_row(
                    merchant_id=row["merchant_id"],
                    livemode=row["livemode"],
                    type="payment_intent.created",
                    data=data,
                    at=row["created_at"],
                )
                for row, _key, data in items
                if row["id"] in inserted
            ]
            if events:
                insert_events(conn, events)
            unused = [
                {"row_id": key["id"]}
                for order, key, _data in items
                if key is not None and key["id"] in won and order["id"] not in inserted
            ]
            if unused:
                conn.execute(_FORGET_KEY, unused)
            return taken, inserted

        taken, inserted = await self._conn.run(write)
        return [_TAKEN if o["id"] in taken else _CREATED if o["id"] in inserted else _CONFLICT for o, _k, _d in items]

    async def aclose(self) -> None:
        """Give the held connection back (before the engine is disposed)."""
        await self._conn.aclose()


_CREATED, _CONFLICT, _TAKEN = "created", "conflict", "taken"
_FORGET_KEY = delete(tables.idempotency_keys).where(tables.idempotency_keys.c.id == bindparam("row_id"))


async def _conflict(engine: AsyncEngine, row: Mapping[str, Any]) -> PaymentIntentError:
    table = tables.payment_intents
    async with engine.connect() as conn:
        taken = await conn.scalar(
            select(table.c.id).where(
                table.c.merchant_id == row["merchant_id"],
                table.c.livemode == row["livemode"],
                table.c.order_id == row["order_id"],
            )
        )
    if taken is not None:
        return PaymentIntentError(
            409, "order_id_conflict", f"orderId {row['order_id'][:80]!r} already exists", param="orderId"
        )
    return PaymentIntentError(
        409,
        "fixed_transfer_active_payment",
        "this customer's fixed transfer address is held by another open payment intent; "
        "complete or cancel that one first",
        param=f"metadata.{FIXED_TRANSFER_KEY}",
    )


async def transition(
    conn: AsyncConnection,
    row: Mapping[Any, Any],
    to: str,
    at: datetime,
    base: str,
    changes: Mapping[str, Any] | None = None,
    *,
    event: str | None = None,
) -> Mapping[Any, Any] | None:
    """Move ``row`` to ``to`` (with ``changes`` to other columns) if it is still in the status it was
    read in, and record ``payment_intent.<event or to>``; the new row, or None. A caller that confirms
    or reverses a payment tells its `OrderFollower` itself, once its own part of the change (a
    payment's credit) is written."""
    if to not in TRANSITIONS[row["status"]]:
        return None
    table = tables.payment_intents
    changes = {**(changes or {}), "status": to, "updated_at": at}
    if to not in OPEN_STATUSES:
        changes["transfer_hold"] = None
    result = await conn.execute(
        update(table).where(table.c.id == row["id"], table.c.status == row["status"]).values(**changes)
    )
    if result.rowcount != 1:
        return None
    moved = {**row, **changes}
    await record_intent_event(conn, moved, event or to, at, base)
    return moved


OrderFollower = Callable[[AsyncConnection, Mapping[str, Any], str, datetime, str], Awaitable[None]]
"""Told of an order's payment confirmed (it became ``succeeded``) or reversed (it went from
``succeeded`` back to ``requires_payment``), as ``(conn, order, previous status, now, checkout URL
base)``, in the transaction of the move. The deposit watcher calls it; the platform's is
`x402mw.platform.services.subscriptions.payments.follow_order`, which lives above this module (it
creates orders for invoices through it)."""


async def cancel_payment_intent(
    engine: AsyncEngine, merchant_id: str, livemode: bool, payment_id: str, now: datetime, checkout_url_base: str
) -> PaymentIntent | None:
    """Cancel an order awaiting payment: the order as it now is, or None when the merchant has no
    such order. Raises
    `PaymentIntentError` 409 ``payment_intent_unexpected_state`` in any other status."""
    async with engine.begin() as conn:
        row = await find_payment_intent(conn, merchant_id, livemode, payment_id)
        if row is None:
            return None
        moved = await transition(conn, row, "canceled", now, checkout_url_base)
        if moved is None:
            current = await find_payment_intent(conn, merchant_id, livemode, payment_id)
            status = current["status"] if current else row["status"]
            raise PaymentIntentError(
                409,
                "payment_intent_unexpected_state",
                f"This payment intent's status is {status}; only one in requires_payment can be canceled",
            )
    return payment_intent_of(moved, checkout_url_base)


async def expire_due_payment_intents(
    engine: AsyncEngine, now: datetime, checkout_url_base: str, *, limit: int = 200
) -> int:
    """Expire orders still awaiting payment whose ``expiresAt`` is at or before ``now``; how many.
    Safe to run in several workers at once: each order expires, and reports it, once."""
    table = tables.payment_intents
    async with engine.connect() as conn:
        due = list(
            (
                await conn.execute(
                    select(table)
                    .where(table.c.status == "requires_payment", table.c.expires_at <= now)
                    .order_by(table.c.expires_at)
                    .limit(limit)
                )
            ).mappings()
        )
    expired = 0
    for row in due:
        async with engine.begin() as conn:
            if await transition(conn, row, "expired", now, checkout_url_base) is not None:
                expired += 1
    return expired
