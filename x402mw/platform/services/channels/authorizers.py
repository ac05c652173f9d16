"""The merchants' receiver authorizers: one key per merchant and mode that signs its channels'
``ClaimBatch`` and ``Refund`` messages. Made on first use, kept sealed (`SecretBox`), cached."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.db import tables
from x402mw.platform.db.models import utcnow
from x402mw.platform.sealing import SecretBox


class Authorizers:
    """Receiver authorizer keys by (merchant, mode)."""

    def __init__(self, engine: AsyncEngine, box: SecretBox) -> None:
        self._engine = engine
        self._box = box
        self._keys: dict[tuple[str, bool], bytes] = {}
        self._addresses: dict[tuple[str, bool], str] = {}
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return "Authorizers(<keys hidden>)"

    async def key(self, merchant_id: str, livemode: bool) -> bytes:
        """The merchant's authorizer key in this mode, made now if it has none."""
        found = self._keys.get((merchant_id, livemode))
        if found is not None:
            return found
        async with self._lock:
            key = await self._load(merchant_id, livemode)
            if key is None:
                made = new_private_key()
                row = {
                    "merchant_id": merchant_id,
                    "livemode": livemode,
                    "address": address_of(made),
                    "sealed_key": self._box.seal(made.hex()),
                    "created_at": utcnow(),
                }
                try:
                    async with self._engine.begin() as conn:
                        await conn.execute(tables.channel_authorizers.insert(), row)
                except IntegrityError:  # another process made it first: theirs stands
                    pass
                key = await self._load(merchant_id, livemode)
                assert key is not None
            self._keys[(merchant_id, livemode)] = key
            return key

    async def address(self, merchant_id: str, livemode: bool) -> str:
        """The merchant's authorizer address in this mode (its key made now if it has none)."""
        found = self._addresses.get((merchant_id, livemode))
        if found is None:
            found = self._addresses[(merchant_id, livemode)] = address_of(await self.key(merchant_id, livemode))
        return found

    async def key_of(self, address: str) -> bytes | None:
        """The key of the authorizer at ``address``, in any case (the worker signs with it), or None."""
        for key in self._keys.values():
            if address_of(key).lower() == address.lower():
                return key
        table = tables.channel_authorizers
        # stored checksummed; the worker groups channels by the address in lower case
        query = select(table).where(func.lower(table.c.address) == address.lower())
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        key = bytes.fromhex(self._box.open(row.sealed_key))
        self._keys[(row.merchant_id, bool(row.livemode))] = key
        return key

    async def _load(self, merchant_id: str, livemode: bool) -> bytes | None:
        table = tables.channel_authorizers
        query = select(table.c.sealed_key).where(table.c.merchant_id == merchant_id, table.c.livemode == livemode)
        async with self._engine.connect() as conn:
            sealed = (await conn.execute(query)).scalar()
        return None if sealed is None else bytes.fromhex(self._box.open(sealed))
