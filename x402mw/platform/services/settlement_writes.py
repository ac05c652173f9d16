"""The settlement's writes, grouped (`Coalescer`): whatever concurrent settlements in a process have
to write (claims, ``submitted`` marks, releases) goes to the database in one transaction, so under
load a settlement waits for at most one transaction in progress before its own.

- a claim inserts the payment unless its authorization (chain, token, payer, nonce) is claimed
  already, with the challenge it answers; whether it was inserted;
- ``submitted`` records the transaction sent, so that recovery can find it should the process stop;
- ``settled`` records the transaction and the receipt (whether or not ``submitted`` got through),
  links the challenge to the payment and writes ``agent_payment.settled`` to the outbox.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from sqlalchemy import bindparam, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.batching import Coalescer
from x402mw.platform.db import tables

__all__ = ["SettlementWrites"]

_payments, _challenges = tables.agent_payments, tables.agent_challenges


# (kind, the row or its bound values, what goes with it): a claim with the challenge it answers, a
# release with its challenge id and event; see SettlementWrites._write.
_Write = tuple[Literal["claim", "submitted", "settled"], dict[str, Any], dict[str, Any] | None]


def _param(name: str, column: str) -> Any:
    return bindparam(f"b_{name}", type_=_payments.c[column].type)


class SettlementWrites:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
        self._insert_payments = dialect.insert(_payments).on_conflict_do_nothing().returning(_payments.c.id)
        self._insert_challenges = dialect.insert(_challenges).on_conflict_do_nothing()
        self._mark_submitted = (
            update(_payments)
            .where(_payments.c.id == _param("id", "id"))
            .values(status="submitted", transaction=_param("tx", "transaction"))
        )
        self._mark_settled = (
            update(_payments)
            .where(_payments.c.id == _param("id", "id"))
            .values(
                status="settled",
                transaction=_param("tx", "transaction"),
                receipt=_param("receipt", "receipt"),
                settled_at=_param("settled_at", "settled_at"),
                block_number=_param("block", "block_number"),
                chain_micros=_param("chain_micros", "chain_micros"),
                platform_micros=_param("platform_micros", "platform_micros"),
            )
        )
        self._link_challenges = (
            update(_challenges)
            .where(_challenges.c.id == bindparam("b_challenge"))
            .values(payment_id=bindparam("b_payment"))
        )
        self._writes: Coalescer[_Write, bool] = Coalescer(self._write)

    async def claim(self, payment: dict[str, Any], challenge: dict[str, Any] | None) -> bool:
        """Insert the ``agent_payments`` row ``payment`` (and the challenge it answers, if not recorded
        yet); False when its authorization is claimed already."""
        return await self._writes.submit(("claim", payment, challenge))

    async def submitted(self, payment_id: str, transaction: str) -> None:
        await self._writes.submit(("submitted", {"b_id": payment_id, "b_tx": transaction}, None))

    async def settled(
        self,
        payment_id: str,
        *,
        transaction: str,
        receipt: dict[str, Any],
        settled_at: datetime,
        block: int,
        chain_micros: int,
        platform_micros: int,
        challenge_id: str | None,
        event: dict[str, Any] | None,
    ) -> None:
        """Record the settlement, link its challenge and write its event (an ``events`` row), at once."""
        settled = {
            "b_id": payment_id,
            "b_tx": transaction,
            "b_receipt": receipt,
            "b_settled_at": settled_at,
            "b_block": block,
            "b_chain_micros": chain_micros,
            "b_platform_micros": platform_micros,
        }
        await self._writes.submit(("settled", settled, {"challenge_id": challenge_id, "event": event}))

    async def _write(self, items: list[_Write]) -> list[bool]:
        claims = [payment for kind, payment, _extra in items if kind == "claim"]
        challenges = list({c["id"]: c for kind, _p, c in items if kind == "claim" and c is not None}.values())
        submitted = [values for kind, values, _extra in items if kind == "submitted"]
        settled = [(values, extra) for kind, values, extra in items if kind == "settled"]
        links = [
            {"b_challenge": e["challenge_id"], "b_payment": v["b_id"]} for v, e in settled if e and e["challenge_id"]
        ]
        events = [e["event"] for _v, e in settled if e and e["event"] is not None]
        inserted: set[str] = set()
        async with self.engine.begin() as conn:
            if challenges:
                await conn.execute(self._insert_challenges, challenges)
            if claims:
                inserted = set((await conn.execute(self._insert_payments, claims)).scalars())
            if submitted:
                await conn.execute(self._mark_submitted, submitted)
            if settled:
                await conn.execute(self._mark_settled, [values for values, _extra in settled])
            if links:
                await conn.execute(self._link_challenges, links)
            if events:
                await conn.execute(tables.events.insert(), events)
        # A claim answers whether its row went in; the other writes answer True.
        return [payment["id"] in inserted if kind == "claim" else True for kind, payment, _extra in items]
