"""Merchant balances per (chain, currency), moved only by ledger entries.

Each entry changes ``available`` and ``reserved`` by its two deltas in the same transaction as the
change it records. The UPDATE is conditional, and the table's checks back it up, so no concurrency can
take a balance below zero; the unique (kind, reference) lets each payment be credited once and each
refund reserved, released or sent once.

A balance has no scale of its own (it sums amounts sent at many): it is answered with at least two
decimals, the scale the platform's coins are shown at (``"25.00"``, ``"0.50"``), and more only when
it holds smaller units (``"12.345"``): `BALANCE_SCALE`.

=================  ===============  ==============  ===========================================
kind               available        reserved        when
=================  ===============  ==============  ===========================================
payment            + amount                         a payment to an order is confirmed
payment_reversed   - amount                         a reorg removed a confirmed payment
refund_reserved    - amount         + amount        a refund is requested
refund_sent                         - amount        the refund's transfer is confirmed
refund_released    + amount         - amount        the refund failed
adjustment         ± amount                         an operator's correction
=================  ===============  ==============  ===========================================
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.objects.base import money
from x402mw.platform.objects.payments import Balance

DECIMALS = 6


class InsufficientBalance(Exception):
    """The entry would take the available (or reserved) balance below zero; nothing was written."""


async def apply_entry(
    conn: AsyncConnection,
    *,
    merchant_id: str,
    livemode: bool,
    chain_id: int,
    currency: str,
    kind: str,
    reference_id: str,
    available_delta: int,
    reserved_delta: int = 0,
    at: datetime,
) -> None:
    """Record the entry and move the balance, in the caller's transaction.

    Raises `InsufficientBalance` when the balance cannot cover it (the caller's transaction should be
    rolled back), and ``IntegrityError`` when this (kind, reference) was recorded already."""
    balances = tables.balances
    key = (
        (balances.c.merchant_id == merchant_id)
        & (balances.c.livemode == livemode)
        & (balances.c.chain_id == chain_id)
        & (balances.c.currency == currency)
    )
    if available_delta > 0 or reserved_delta > 0:
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        await conn.execute(
            dialect.insert(balances)
            .values(
                merchant_id=merchant_id,
                livemode=livemode,
                chain_id=chain_id,
                currency=currency,
                available_minor=0,
                reserved_minor=0,
                updated_at=at,
            )
            .on_conflict_do_nothing()
        )
    moved = await conn.execute(
        update(balances)
        .where(
            key,
            balances.c.available_minor + available_delta >= 0,
            balances.c.reserved_minor + reserved_delta >= 0,
        )
        .values(
            available_minor=balances.c.available_minor + available_delta,
            reserved_minor=balances.c.reserved_minor + reserved_delta,
            updated_at=at,
        )
    )
    if moved.rowcount != 1:
        raise InsufficientBalance(f"the {currency} balance on chain {chain_id} cannot cover {kind}")
    await conn.execute(
        tables.ledger_entries.insert(),
        dict(
            id=new_id(),
            merchant_id=merchant_id,
            livemode=livemode,
            chain_id=chain_id,
            currency=currency,
            kind=kind,
            reference_id=reference_id,
            available_delta=available_delta,
            reserved_delta=reserved_delta,
            created_at=at,
        ),
    )


BALANCE_SCALE = 2
"""The fewest decimals a balance is answered with."""


def balance_of(row: Any) -> Balance:
    return Balance(
        network=f"eip155:{row['chain_id']}",
        chain_id=row["chain_id"],
        currency=row["currency"],
        available=money(row["available_minor"], DECIMALS, scale=BALANCE_SCALE),
        reserved=money(row["reserved_minor"], DECIMALS, scale=BALANCE_SCALE),
        livemode=bool(row["livemode"]),
    )


async def list_balances(conn: AsyncConnection, merchant_id: str, livemode: bool) -> list[Balance]:
    balances = tables.balances
    rows = await conn.execute(
        select(balances)
        .where(balances.c.merchant_id == merchant_id, balances.c.livemode == livemode)
        .order_by(balances.c.chain_id, balances.c.currency)
    )
    return [balance_of(row) for row in rows.mappings()]
