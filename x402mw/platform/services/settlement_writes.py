"""The settlement's writes, grouped (`Coalescer`): concurrent settlements in a process share one
transaction per step: their claims, their ``submitted`` marks and their releases.

- a claim inserts the payment unless its authorization (chain, token, payer, nonce) is claimed
  already, with the challenge it answers; whether it was inserted;
- ``submitted`` records the transaction sent, so that recovery can find it should the process stop;
- ``settled`` records the receipt, links the challenge to the payment and writes
  ``agent_payment.settled`` to the outbox, all three in one transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.batching import Coalescer
from x402mw.platform.db import tables

__all__ = ["SettlementWrites"]

_payments, _challenges = tables.agent_payments, tables.agent_challenges


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
        self._claims: Coalescer[tuple[dict[str, Any], dict[str, Any] | None], bool] = Coalescer(self._write_claims)
        self._submitted: Coalescer[dict[str, Any], None] = Coalescer(self._write_submitted)
        self._settled: Coalescer[dict[str, Any], None] = Coalescer(self._write_settled)

    async def claim(self, payment: dict[str, Any], challenge: dict[str, Any] | None) -> bool:
        """Insert the ``agent_payments`` row ``payment`` (and the challenge it answers, if not recorded
        yet); False when its authorization is claimed already."""
        return await self._claims.submit((payment, challenge))

    async def submitted(self, payment_id: str, transaction: str) -> None:
        await self._submitted.submit({"b_id": payment_id, "b_tx": transaction})

    async def settled(
        self,
        payment_id: str,
        *,
        receipt: dict[str, Any],
        settled_at: datetime,
        block: int,
        chain_micros: int,
        platform_micros: int,
        challenge_id: str | None,
        event: dict[str, Any] | None,
    ) -> None:
        """Record the settlement, link its challenge and write its event (an ``events`` row), at once."""
        await self._settled.submit(
            {
                "b_id": payment_id,
                "b_receipt": receipt,
                "b_settled_at": settled_at,
                "b_block": block,
                "b_chain_micros": chain_micros,
                "b_platform_micros": platform_micros,
                "challenge_id": challenge_id,
                "event": event,
            }
        )

    async def _write_claims(self, items: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> list[bool]:
        challenges = list({c["id"]: c for _payment, c in items if c is not None}.values())
        async with self.engine.begin() as conn:
            if challenges:
                await conn.execute(self._insert_challenges, challenges)
            inserted = set((await conn.execute(self._insert_payments, [p for p, _c in items])).scalars())
        return [payment["id"] in inserted for payment, _challenge in items]

    async def _write_submitted(self, items: list[dict[str, Any]]) -> list[None]:
        async with self.engine.begin() as conn:
            await conn.execute(self._mark_submitted, items)
        return [None] * len(items)

    async def _write_settled(self, items: list[dict[str, Any]]) -> list[None]:
        settled = [{k: v for k, v in item.items() if k.startswith("b_")} for item in items]
        links = [{"b_challenge": i["challenge_id"], "b_payment": i["b_id"]} for i in items if i["challenge_id"]]
        events = [item["event"] for item in items if item["event"] is not None]
        async with self.engine.begin() as conn:
            await conn.execute(self._mark_settled, settled)
            if links:
                await conn.execute(self._link_challenges, links)
            if events:
                await conn.execute(tables.events.insert(), events)
        return [None] * len(items)
