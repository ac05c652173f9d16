"""Merchants and API keys. Keys are random, shown once, stored only as SHA-256 hashes."""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Row, Table, bindparam, func, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel.ext.asyncio.session import AsyncSession

from x402mw.platform.db import tables
from x402mw.platform.db.engine import quick_read
from x402mw.platform.db.models import ApiKey, Merchant, utcnow
from x402mw.platform.services.key_cache import KeyCache, announce_key_change, await_key_change_seen
from x402mw.protocol.constant_time import same_secret

KEY_USE_PRECISION = timedelta(minutes=1)
"""How precisely a key's ``last_used_at`` is kept: it is written when a lookup finds it older than
this, so a busy key costs one write a minute, not one a request."""

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: the merchant, and whether its key is a live or a test key."""

    merchant_id: str
    livemode: bool
    key_id: str

    def owns(self, table: Table) -> list[ColumnElement[bool]]:
        """The filter every merchant-owned query carries: this merchant's rows of this mode only."""
        return [table.c.merchant_id == self.merchant_id, table.c.livemode == self.livemode]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


async def create_merchant(engine: AsyncEngine, name: str) -> Merchant:
    async with AsyncSession(engine, expire_on_commit=False) as session:
        merchant = Merchant(name=name)
        session.add(merchant)
        await session.commit()
        return merchant


async def create_api_key(engine: AsyncEngine, merchant_id: str, *, livemode: bool = False) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the key itself, which is never stored and never shown again."""
    secret = "".join(secrets.choice(_ALPHABET) for _ in range(40))
    key = ("sk_live_" if livemode else "sk_test_") + secret
    async with AsyncSession(engine, expire_on_commit=False) as session:
        if await session.get(Merchant, merchant_id) is None:
            raise LookupError(f"no merchant {merchant_id}")
        row = ApiKey(merchant_id=merchant_id, key_hash=hash_key(key), prefix=key[:12], livemode=livemode)
        session.add(row)
        await session.commit()
        return row, key


async def revoke_api_key(engine: AsyncEngine, key_id: str) -> bool:
    """Revoke the key; False when there is no such active key. When it returns, every platform
    process refuses the key (`x402mw.platform.services.key_cache`: on PostgreSQL that takes
    `LEASE` seconds)."""
    async with engine.begin() as conn:
        result = await conn.execute(
            update(tables.api_keys)
            .where(tables.api_keys.c.id == key_id, tables.api_keys.c.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
        revoked = bool(result.rowcount)
        if revoked:
            await announce_key_change(conn)
    if revoked:
        await await_key_change_seen(engine)
    return revoked


_keys = tables.api_keys
# Built once: this read is on every API request's path, and a statement kept keeps its cache key.
_BY_HASH = select(
    _keys.c.id, _keys.c.merchant_id, _keys.c.livemode, _keys.c.key_hash, _keys.c.revoked_at, _keys.c.last_used_at
).where(_keys.c.key_hash == bindparam("key_hash"))


@dataclass(slots=True)
class _Found:
    caller: Caller
    last_used_at: datetime | None


async def lookup_key(engine: AsyncEngine, key: str, cache: KeyCache[_Found] | None = None) -> Caller | None:
    """The caller for a presented key, or None when it is unknown or revoked. A key found has its
    ``last_used_at`` brought up to date (to `KEY_USE_PRECISION`). With ``cache``, a key found there
    while it is current costs no read (`x402mw.platform.services.key_cache`)."""
    if not key.startswith(("sk_test_", "sk_live_")) or len(key) > 100:
        return None
    wanted = hash_key(key)
    found = cache.get(wanted) if cache is not None and cache.current() else None
    if found is None:
        epoch = cache.epoch if cache is not None else 0
        row = await quick_read(engine, lambda conn: conn.execute(_BY_HASH, {"key_hash": wanted}).first())
        if row is None or row.revoked_at is not None or not same_secret(row.key_hash, wanted):
            return None
        caller = Caller(merchant_id=row.merchant_id, livemode=bool(row.livemode), key_id=row.id)
        found = _Found(caller, row.last_used_at and _aware(row.last_used_at))
        if cache is not None:
            cache.put(wanted, found, epoch)
    now = utcnow()
    if found.last_used_at is None or found.last_used_at < now - KEY_USE_PRECISION:
        found.last_used_at = now
        # advisory: a write that fails (a busy SQLite file) must not refuse the caller, whose key is good
        with contextlib.suppress(SQLAlchemyError):
            async with engine.begin() as conn:
                await conn.execute(update(_keys).where(_keys.c.id == found.caller.key_id).values(last_used_at=now))
    return found.caller


def _aware(value: datetime) -> datetime:
    """An instant from the database in UTC (SQLite gives them back without their zone)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


async def list_merchants(engine: AsyncEngine) -> list[dict[str, object]]:
    """Every merchant, oldest first, with how many keys it has and how many of them are active."""
    merchants, keys = tables.merchants, tables.api_keys
    active = func.count(keys.c.id).filter(keys.c.revoked_at.is_(None))
    query = (
        select(merchants.c.id, merchants.c.name, merchants.c.created_at, func.count(keys.c.id), active)
        .select_from(merchants.outerjoin(keys, keys.c.merchant_id == merchants.c.id))
        .group_by(merchants.c.id, merchants.c.name, merchants.c.created_at)
        .order_by(merchants.c.created_at, merchants.c.id)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [
        {"id": row[0], "name": row[1], "createdAt": _aware(row[2]), "keys": row[3], "activeKeys": row[4]}
        for row in rows
    ]


async def find_merchant(engine: AsyncEngine, merchant_id: str) -> dict[str, object] | None:
    """One merchant as `list_merchants` gives it, or None."""
    found = [m for m in await list_merchants(engine) if m["id"] == merchant_id]
    return found[0] if found else None


async def rename_merchant(engine: AsyncEngine, merchant_id: str, name: str) -> bool:
    """Give the merchant ``name``; False when there is no such merchant."""
    async with engine.begin() as conn:
        result = await conn.execute(
            update(tables.merchants).where(tables.merchants.c.id == merchant_id).values(name=name)
        )
        return bool(result.rowcount)


async def list_api_keys(engine: AsyncEngine, merchant_id: str) -> list[dict[str, object]]:
    """The merchant's keys, oldest first: id, prefix, mode, created, last used, revoked (never the
    key, which is not stored). LookupError when there is no such merchant."""
    keys = tables.api_keys
    async with engine.connect() as conn:
        if (
            await conn.execute(select(tables.merchants.c.id).where(tables.merchants.c.id == merchant_id))
        ).first() is None:
            raise LookupError(f"no merchant {merchant_id}")
        rows = (
            await conn.execute(
                select(keys).where(keys.c.merchant_id == merchant_id).order_by(keys.c.created_at, keys.c.id)
            )
        ).mappings()
        return [
            {
                "id": row["id"],
                "prefix": row["prefix"],
                "mode": "live" if row["livemode"] else "test",
                "createdAt": _aware(row["created_at"]),
                "lastUsedAt": row["last_used_at"] and _aware(row["last_used_at"]),
                "revokedAt": row["revoked_at"] and _aware(row["revoked_at"]),
            }
            for row in rows
        ]


class KeyRing:
    """Key lookups for the API, through the process's `KeyCache`: a key seen before costs no read
    while the cache is current, and a revocation, by this process or any other (another ``serve``,
    the CLI), takes effect everywhere as soon as it returns. `start` (on the running loop) opens what
    keeps the cache current on PostgreSQL; without it every lookup there reads the key's row."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.cache: KeyCache[_Found] = KeyCache(engine)

    def start(self) -> None:
        self.cache.start()

    async def aclose(self) -> None:
        await self.cache.aclose()

    async def lookup(self, key: str) -> Caller | None:
        return await lookup_key(self.engine, key, self.cache)

    async def revoke(self, key_id: str) -> bool:
        return await revoke_api_key(self.engine, key_id)


async def newest_rows(
    engine: AsyncEngine, table: Table, merchant_id: str, livemode: bool, limit: int | None = None
) -> list[Row[Any]]:
    """The merchant's rows of ``table`` in this mode, newest first (at most ``limit``)."""
    query = select(table).where(table.c.merchant_id == merchant_id, table.c.livemode == livemode)
    query = query.order_by(table.c.created_at.desc())
    if limit is not None:
        query = query.limit(limit)
    async with engine.connect() as conn:
        return list(await conn.execute(query))


async def newest_api_keys(engine: AsyncEngine, merchant_id: str, livemode: bool) -> list[Row[Any]]:
    """The merchant's API keys of this mode, revoked ones too, newest first."""
    return await newest_rows(engine, tables.api_keys, merchant_id, livemode)


async def has_api_key(engine: AsyncEngine, merchant_id: str, livemode: bool, key_id: str) -> bool:
    """Whether the merchant has the key ``key_id`` in this mode."""
    table = tables.api_keys
    query = select(table.c.id).where(
        table.c.id == key_id, table.c.merchant_id == merchant_id, table.c.livemode == livemode
    )
    async with engine.connect() as conn:
        return (await conn.execute(query)).first() is not None
