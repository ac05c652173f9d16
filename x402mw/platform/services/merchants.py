"""Merchants and API keys. Keys are random, shown once, stored only as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel.ext.asyncio.session import AsyncSession

from x402mw.platform.db import tables
from x402mw.platform.db.models import ApiKey, Merchant, utcnow

__all__ = ["Caller", "KeyRing", "create_api_key", "create_merchant", "hash_key", "lookup_key", "revoke_api_key"]

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
    async with engine.begin() as conn:
        result = await conn.execute(
            update(tables.api_keys)
            .where(tables.api_keys.c.id == key_id, tables.api_keys.c.revoked_at.is_(None))
            .values(revoked_at=utcnow())
        )
        return bool(result.rowcount)


_keys = tables.api_keys
# Built once: this read is on every API request's path, and a statement kept keeps its cache key.
_BY_HASH = select(_keys.c.id, _keys.c.merchant_id, _keys.c.livemode, _keys.c.key_hash, _keys.c.revoked_at).where(
    _keys.c.key_hash == bindparam("key_hash")
)


async def lookup_key(engine: AsyncEngine, key: str) -> Caller | None:
    """The caller for a presented key, or None when it is unknown or revoked."""
    if not key.startswith(("sk_test_", "sk_live_")) or len(key) > 100:
        return None
    wanted = hash_key(key)
    async with engine.connect() as conn:
        row = (await conn.execute(_BY_HASH, {"key_hash": wanted})).first()
    if row is None or row.revoked_at is not None or not hmac.compare_digest(row.key_hash, wanted):
        return None
    return Caller(merchant_id=row.merchant_id, livemode=bool(row.livemode), key_id=row.id)


class KeyRing:
    """Key lookups for the API. Every lookup reads the key's row (one indexed read, about the cost of
    reading a shared version counter that a cache would have to check anyway: `bench.bench_keys`),
    so a revocation takes effect in every process, and for the CLI's too, as soon as it returns."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def lookup(self, key: str) -> Caller | None:
        return await lookup_key(self.engine, key)

    async def revoke(self, key_id: str) -> bool:
        return await revoke_api_key(self.engine, key_id)
