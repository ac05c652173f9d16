"""The x402 ``payment-identifier`` extension: a client's id for one logical paid request.

The id in a payment payload (``extensions["payment-identifier"]["info"]["id"]``) belongs to the
merchant it was paid to (its *scope*) and is bound, the first time it is seen, to a fingerprint of
the exact payload, its terms and its route. It is looked up before the payment is verified:

- a new id settles as usual, and a settled answer is stored with it (in the database: every
  process sees it);
- the same id with the same payload answers the stored settlement again, nothing verified or
  charged (the authorization may have expired or been used since: it was, by that settlement);
- the same id with another payload is a conflict (HTTP 409, ``payment_identifier_conflict``), never
  a second payment;
- an id still being settled elsewhere is waited for (at most the caller's wait); past the first
  request's lease the payment is settled again, which, for the same payload, joins that
  authorization's own settlement (an authorization is charged once, whoever sends it).

An answer that is not final (pending) keeps the id bound; a refusal releases it, so that the
client may pay the same logical request with a new authorization under the same id.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.batching import Coalescer
from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.engine import HeldConnection
from x402mw.platform.services.settlement.checks import PaymentRefusal
from x402mw.platform.services.settlement.outcomes import SettleOutcome
from x402mw.protocol import reasons
from x402mw.protocol.models import PaymentPayload, PaymentRequirements, SettlementResponse
from x402mw.protocol.payment_identifier import CONFLICT, identifier_of

LEASE = timedelta(seconds=30)
"""How long a first request is believed to be settling its id; after that a retry settles it again."""
KEEP_FOR = timedelta(hours=24)
"""How long an id is kept after it was first seen (`purge_payment_identifiers` deletes older ones),
as API idempotency keys are. A payload sent again after that still gets its outcome: its
authorization has one, whatever id came with it; only an old id sent with another payment is no
longer refused."""
_POLL_SECONDS = 0.05

logger = logging.getLogger("x402mw.platform.settlement")


class IdentifierConflict(Exception):
    """The id was used with another payment payload (HTTP 409 ``payment_identifier_conflict``)."""

    reason = CONFLICT

    def __init__(self, identifier: str) -> None:
        super().__init__(f"payment identifier {identifier!r} was used with another payment")
        self.identifier = identifier


def payment_identifier(payload: PaymentPayload) -> str | None:
    """The id the payload's ``payment-identifier`` extension carries; None without one. `PaymentRefusal`
    (``invalid_payload``) for an id that is not 16 to 128 letters, digits, ``-`` or ``_``."""
    if not payload.extensions:
        return None
    try:
        return identifier_of(payload)
    except ValueError as exc:
        raise PaymentRefusal(reasons.INVALID_PAYLOAD, str(exc)) from None


def payment_fingerprint(accepted: PaymentRequirements, payload: PaymentPayload, route: str) -> str:
    """SHA-256 of the exact payload, the terms it pays and the route it pays for."""
    canonical = json.dumps(
        [payload.to_wire(), accepted.to_wire(), route], sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class _Found:
    fingerprint: str
    status: str
    answer: dict[str, Any] | None
    locked: bool


class PaymentIdentifiers:
    """The ids of one platform's merchants (table ``payment_identifiers``)."""

    def __init__(self, engine: AsyncEngine, clock: Clock, *, lease: timedelta = LEASE) -> None:
        self.engine = engine
        self.clock = clock
        self.lease = lease
        table = tables.payment_identifiers
        dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
        self._insert = dialect.insert(table).on_conflict_do_nothing().returning(table.c.scope, table.c.identifier)
        self._answer_rows = (
            update(table)
            .where(
                table.c.scope == bindparam("b_scope"),
                table.c.identifier == bindparam("b_identifier"),
                table.c.fingerprint == bindparam("b_fingerprint"),
            )
            .values(status="answered", answer=bindparam("b_answer", type_=table.c.answer.type), locked_until=None)
        )
        # On the paid request's path: binds and answers of concurrent payments share one write each
        # (a Coalescer on a held connection, as settlement's claims and records do).
        self._bind_conn = HeldConnection(engine, inline=True)
        self._answer_conn = HeldConnection(engine)
        self._binds: Coalescer[dict[str, Any], bool] = Coalescer(self._write_binds)
        self._answers: Coalescer[dict[str, Any], None] = Coalescer(self._write_answers)

    async def aclose(self) -> None:
        """Give the held connections back (once nothing is being written)."""
        await self._bind_conn.aclose()
        await self._answer_conn.aclose()

    async def settle_once(
        self,
        scope: str,
        identifier: str,
        fingerprint: str,
        settle: Callable[[], Awaitable[SettleOutcome]],
        *,
        wait_seconds: float,
    ) -> SettleOutcome:
        """Settle through ``settle`` once per id: the stored answer for an id answered before, the
        outcome of ``settle`` otherwise; `IdentifierConflict` for an id bound to another fingerprint."""
        deadline = asyncio.get_running_loop().time() + max(0.1, wait_seconds)
        while True:
            if await self._bind(scope, identifier, fingerprint):
                return await self._settle(scope, identifier, fingerprint, settle)
            found = await self._load(scope, identifier)
            if found is None:
                continue  # released meanwhile: bind it again
            if found.fingerprint != fingerprint:
                raise IdentifierConflict(identifier)
            if found.status == "answered" and found.answer is not None:
                return _outcome(found.answer)
            if not found.locked or asyncio.get_running_loop().time() >= deadline:
                # Its first request is gone or slow: the same payload settles again, which joins
                # that authorization's settlement (it is charged once, whoever sends it).
                await self._relock(scope, identifier)
                return await self._settle(scope, identifier, fingerprint, settle)
            await asyncio.sleep(_POLL_SECONDS)

    async def _settle(
        self, scope: str, identifier: str, fingerprint: str, settle: Callable[[], Awaitable[SettleOutcome]]
    ) -> SettleOutcome:
        # Should this be cancelled, the id stays bound until its lease ends: the payment may go on.
        outcome = await settle()
        if outcome.status == "settled":
            await self._answer(scope, identifier, fingerprint, outcome)
        elif outcome.status in ("failed", "unavailable"):
            await self._release(scope, identifier, fingerprint)
        return outcome  # pending: the id stays bound; a retry joins the settlement

    async def _bind(self, scope: str, identifier: str, fingerprint: str) -> bool:
        now = self.clock.now()
        row = {
            "scope": scope,
            "identifier": identifier,
            "fingerprint": fingerprint,
            "status": "in_flight",
            "answer": None,
            "created_at": now,
            "locked_until": now + self.lease,
        }
        return await self._binds.submit(row)

    async def _write_binds(self, rows: list[dict[str, Any]]) -> list[bool]:
        firsts: dict[tuple[str, str], dict[str, Any]] = {}
        for row in rows:  # one id twice in a batch: the first row binds it
            firsts.setdefault((row["scope"], row["identifier"]), row)

        def insert(conn: Connection) -> set[tuple[str, str]]:
            return {(scope, identifier) for scope, identifier in conn.execute(self._insert, list(firsts.values()))}

        inserted = await self._bind_conn.run(insert, atomic=False)  # one statement: atomic by itself
        return [
            (row["scope"], row["identifier"]) in inserted and firsts[(row["scope"], row["identifier"])] is row
            for row in rows
        ]

    async def _load(self, scope: str, identifier: str) -> _Found | None:
        table = tables.payment_identifiers
        async with self.engine.connect() as conn:
            row = (
                (await conn.execute(select(table).where(table.c.scope == scope, table.c.identifier == identifier)))
                .mappings()
                .first()
            )
        if row is None:
            return None
        locked_until = row["locked_until"]
        now = self.clock.now()
        if locked_until is not None and locked_until.tzinfo is None:  # SQLite answers naive UTC
            locked_until = locked_until.replace(tzinfo=now.tzinfo)
        locked = locked_until is not None and locked_until > now
        return _Found(row["fingerprint"], row["status"], row["answer"], locked)

    async def _relock(self, scope: str, identifier: str) -> None:
        table = tables.payment_identifiers
        async with self.engine.begin() as conn:
            await conn.execute(
                update(table)
                .where(table.c.scope == scope, table.c.identifier == identifier, table.c.status == "in_flight")
                .values(locked_until=self.clock.now() + self.lease)
            )

    async def _answer(self, scope: str, identifier: str, fingerprint: str, outcome: SettleOutcome) -> None:
        """Store a settled answer with its id, in the next batch of answers, before the caller is
        answered: a retry that comes after the answer finds it. Should the write fail, the id stays
        in flight until its lease ends (a retry then joins the authorization's settlement)."""
        answer = {
            "status": outcome.status,
            "settlement": outcome.response.to_wire(),
            "message": outcome.message,
            "paymentId": outcome.payment_id,
        }
        row = {"b_scope": scope, "b_identifier": identifier, "b_fingerprint": fingerprint, "b_answer": answer}
        try:
            await self._answers.submit(row)
        except Exception:
            logger.warning("could not store a payment identifier's answer", exc_info=True)

    async def _write_answers(self, rows: list[dict[str, Any]]) -> list[None]:
        def write(conn: Connection) -> None:
            conn.execute(self._answer_rows, rows)

        await self._answer_conn.run(write)
        return [None] * len(rows)

    async def _release(self, scope: str, identifier: str, fingerprint: str) -> None:
        table = tables.payment_identifiers
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(table).where(
                    table.c.scope == scope,
                    table.c.identifier == identifier,
                    table.c.fingerprint == fingerprint,
                    table.c.status == "in_flight",
                )
            )


def _outcome(answer: dict[str, Any]) -> SettleOutcome:
    return SettleOutcome(
        answer["status"],
        SettlementResponse.model_validate(answer["settlement"]),
        answer.get("message"),
        answer.get("paymentId"),
    )


async def purge_payment_identifiers(engine: AsyncEngine, now: datetime) -> int:
    """Delete the ids first seen more than `KEEP_FOR` before ``now`` (the worker's housekeeping);
    how many."""
    table = tables.payment_identifiers
    async with engine.begin() as conn:
        result = await conn.execute(delete(table).where(table.c.created_at < now - KEEP_FOR))
    return int(result.rowcount or 0)
