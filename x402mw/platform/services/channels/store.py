"""The per-channel state in the database (``payment_channels``), which every process shares.

A request on a channel holds it (`hold`) from its verification until its handler's charge is
committed (`commit`) or given up (`release`): one conditional ``UPDATE`` that succeeds only while no
other request holds the channel and its charged total is the one the voucher was checked against.
On PostgreSQL that statement takes the row's lock, on SQLite the database's writer lock, so requests
on one channel are serialized across every process; requests on different channels do not wait
for each other. A hold left by a process that stopped lapses at ``hold_until``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.chain.channels import ChannelSnapshot
from x402mw.platform.db import tables

Channel = Row[Any]


async def load(engine: AsyncEngine, channel_id: str) -> Channel | None:
    table = tables.payment_channels
    async with engine.connect() as conn:
        return (await conn.execute(select(table).where(table.c.id == channel_id))).first()


async def of_endpoint(
    engine: AsyncEngine, merchant_id: str, livemode: bool, endpoint_id: str, limit: int
) -> list[Channel]:
    table = tables.payment_channels
    query = (
        select(table)
        .where(table.c.merchant_id == merchant_id, table.c.livemode == livemode, table.c.endpoint_id == endpoint_id)
        .order_by(table.c.last_request_at.desc())
        .limit(limit)
    )
    async with engine.connect() as conn:
        return list(await conn.execute(query))


async def by_hold(engine: AsyncEngine, hold_id: str) -> Channel | None:
    """The channel held by ``hold_id``, or whose last committed request it was."""
    table = tables.payment_channels
    query = select(table).where(or_(table.c.hold_id == hold_id, table.c.last_hold_id == hold_id))
    async with engine.connect() as conn:
        return (await conn.execute(query)).first()


async def insert(engine: AsyncEngine, row: dict[str, Any]) -> None:
    """Record a channel first seen (another process may have done so first: theirs stands)."""
    try:
        async with engine.begin() as conn:
            await conn.execute(tables.payment_channels.insert(), row)
    except IntegrityError:
        if await load(engine, row["id"]) is None:  # not a row recorded first: a real fault
            raise


async def mirror(engine: AsyncEngine, channel_id: str, snapshot: ChannelSnapshot, now: datetime) -> None:
    """Mirror the chain's state of the channel, as read at ``now``."""
    table = tables.payment_channels
    async with engine.begin() as conn:
        await conn.execute(
            update(table)
            .where(table.c.id == channel_id)
            .values(
                balance=snapshot.balance,
                total_claimed=snapshot.total_claimed,
                withdraw_amount=snapshot.withdraw_amount,
                withdraw_requested_at=snapshot.withdraw_requested_at,
                refund_nonce=snapshot.refund_nonce,
                synced_at=now,
                updated_at=now,
            )
        )


async def hold(
    engine: AsyncEngine,
    channel_id: str,
    *,
    charged: int,
    hold_id: str,
    until: datetime,
    ceiling: int,
    price: int,
    signature: str,
    now: datetime,
) -> bool:
    """Hold the channel for one request whose voucher (``ceiling``, ``signature``) was checked
    against the charged total ``charged``; False when another request holds it or its total moved."""
    table = tables.payment_channels
    free = or_(table.c.hold_id.is_(None), table.c.hold_until <= now)
    async with engine.begin() as conn:
        done = await conn.execute(
            update(table)
            .where(and_(table.c.id == channel_id, table.c.charged == charged, table.c.status == "open", free))
            .values(
                hold_id=hold_id,
                hold_until=until,
                hold_max=ceiling,
                hold_price=price,
                hold_signature=signature,
                hold_deposit=None,
                updated_at=now,
            )
        )
    return done.rowcount == 1


async def note_deposit(engine: AsyncEngine, hold_id: str, transaction: str, amount: int) -> None:
    table = tables.payment_channels
    async with engine.begin() as conn:
        await conn.execute(
            update(table)
            .where(table.c.hold_id == hold_id)
            .values(hold_deposit=transaction, deposited=table.c.deposited + amount)
        )


async def commit(engine: AsyncEngine, hold_id: str, amount: int, now: datetime) -> Channel | None:
    """Charge the held request ``amount`` (at most its price): the voucher becomes the channel's
    latest, its charged total grows, the hold ends. None when ``hold_id`` holds no channel (its hold
    lapsed, or it was committed or released already)."""
    table = tables.payment_channels
    async with engine.begin() as conn:
        done = await conn.execute(
            update(table)
            .where(table.c.hold_id == hold_id, table.c.hold_price >= amount)
            .values(
                charged=table.c.charged + amount,
                signed_max=table.c.hold_max,
                signature=table.c.hold_signature,
                last_hold_id=hold_id,
                last_charge=amount,
                last_request_at=now,
                hold_id=None,
                hold_until=None,
                hold_max=None,
                hold_price=None,
                hold_signature=None,
                updated_at=now,
            )
        )
        if done.rowcount != 1:
            return None
        return (await conn.execute(select(table).where(table.c.last_hold_id == hold_id))).first()


async def release(engine: AsyncEngine, hold_id: str, now: datetime) -> bool:
    """End the hold without a charge (the handler failed): the same voucher may be sent again."""
    table = tables.payment_channels
    async with engine.begin() as conn:
        done = await conn.execute(
            update(table)
            .where(table.c.hold_id == hold_id)
            .values(
                hold_id=None,
                hold_until=None,
                hold_max=None,
                hold_price=None,
                hold_signature=None,
                last_hold_id=hold_id,
                last_charge=0,
                updated_at=now,
            )
        )
    return done.rowcount == 1
