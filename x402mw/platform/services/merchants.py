"""Merchants and API keys. Keys are random, shown once, stored only as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import Table, select, update
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel.ext.asyncio.session import AsyncSession

from x402mw.platform.db import tables
from x402mw.platform.db.models import ApiKey, Merchant, utcnow
from x402mw.platform.services.cache import TTLCache

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


async def lookup_key(engine: AsyncEngine, key: str) -> Caller | None:
    """The caller for a presented key, or None when it is unknown or revoked."""
    if not key.startswith(("sk_test_", "sk_live_")) or len(key) > 100:
        return None
    wanted = hash_key(key)
    keys = tables.api_keys
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(keys.c.id, keys.c.merchant_id, keys.c.livemode, keys.c.key_hash, keys.c.revoked_at).where(
                    keys.c.key_hash == wanted
                )
            )
        ).first()
    if row is None or row.revoked_at is not None or not hmac.compare_digest(row.key_hash, wanted):
        return None
    return Caller(merchant_id=row.merchant_id, livemode=bool(row.livemode), key_id=row.id)


class KeyRing:
    """Key lookups for the API, cached for ``ttl`` seconds. Revoking through the ring takes effect at
    once in this process; a revocation made elsewhere (another process, the CLI) within ``ttl``."""

    def __init__(self, engine: AsyncEngine, *, ttl: float = 2.0) -> None:
        self.engine = engine
        self._cache: TTLCache[str, Caller | None] = TTLCache(ttl)

    async def lookup(self, key: str) -> Caller | None:
        return await self._cache.get(hash_key(key), lambda: lookup_key(self.engine, key))

    async def revoke(self, key_id: str) -> bool:
        done = await revoke_api_key(self.engine, key_id)
        self._cache.invalidate()
        return done
