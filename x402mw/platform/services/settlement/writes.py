"""The settlement's writes, grouped (`Coalescer`) so that concurrent settlements in a process share
their round trips to the database. There are three groups:

- **claims**, the one write a settlement waits for before it relays: a single
  ``INSERT … ON CONFLICT DO NOTHING RETURNING`` of the payments, committed on its own (one round
  trip); a claim answers whether its row went in, that is whether its authorization (chain, token,
  payer, nonce) was still unclaimed. A held payment's claim records its challenge with it;
- **captures**: a held payment (``held``, or ``authorized`` for upto) taken for settlement by its
  id, for its amount, if it is still held;
- **records**, everything written after: ``submitted`` (the transaction sent, so that recovery can
  find it should the process stop), ``settled`` (the transaction and the receipt, the challenge
  linked to the payment, ``agent_payment.settled`` in the outbox) and ``failed`` (the reason). Each
  carries the challenge the payment answers, recorded unless the seller's background registration
  got there first. A batch of records is one transaction. A settled payment stays settled: a
  later ``settled`` or ``failed`` record of it changes nothing.

A claim given up before anything was sent is deleted (`SettlementWrites.release`); a held payment
whose authorization ran out is recorded failed (`SettlementWrites.expire_hold`); a process that
takes over an unfinished payment holds it for a while (`SettlementWrites.take_over`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import bindparam, delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.batching import Coalescer
from x402mw.platform.db import tables
from x402mw.platform.db.engine import HeldConnection, quick_read
from x402mw.platform.db.models import AgentPayment
from x402mw.platform.services.outbox import insert_events
from x402mw.platform.services.reports.rollups import apply_agent_failures, apply_challenges
from x402mw.platform.services.settlement.outcomes import Claimed
from x402mw.protocol import reasons

_payments, _challenges = tables.agent_payments, tables.agent_challenges
CLAIM_FLUSHES = 2  # claim batches written at once


@dataclass(frozen=True, slots=True)
class _Record:
    kind: Literal["submitted", "settled", "failed"]
    values: dict[str, Any]  # the payment's bound values
    challenge: dict[str, Any] | None = None  # the challenge's row, to insert unless recorded already
    link: str | None = None  # the challenge to link to the payment
    event: dict[str, Any] | None = None  # the events row


def _param(name: str, column: str) -> Any:
    return bindparam(f"b_{name}", type_=_payments.c[column].type)


def _capture_statement(*, upto: bool, merchant: bool) -> Any:
    """A held payment taken for settlement if it is still held, by its merchant (or the facilitator's
    own, ``merchant=False``), and valid long enough: an exact payment for its amount, an upto one for
    an amount within its ceiling. Its row, returned."""
    where = [
        _payments.c.id == bindparam("c_id"),
        _payments.c.valid_before >= bindparam("c_valid", type_=_payments.c.valid_before.type),
        _payments.c.merchant_id == bindparam("c_merchant") if merchant else _payments.c.merchant_id.is_(None),
    ]
    if upto:
        amount = bindparam("c_amount", type_=_payments.c.amount_minor.type)
        where += [_payments.c.status == "authorized", _payments.c.ceiling_minor >= amount]
        values: dict[str, Any] = {"status": "claimed", "amount_minor": amount, "locked_until": None}
    else:
        where += [_payments.c.status == "held"]
        values = {"status": "claimed", "locked_until": None}
    return update(_payments).where(*where).values(**values).returning(*_payments.c)


def _newly_failed(conn: Connection, failing: dict[str, str]) -> list[dict[str, Any]]:
    """The payments of ``failing`` (id: reason) about to be marked failed that were neither failed
    nor settled before (read before the marks), with their reason."""
    if not failing:
        return []
    columns = (_payments.c.id, _payments.c.status, _payments.c.merchant_id, _payments.c.livemode)
    query = select(*columns, _payments.c.currency, _payments.c.amount_minor, _payments.c.created_at).where(
        _payments.c.id.in_(sorted(failing))
    )
    return [
        {**row._asdict(), "reason": failing[row.id]}
        for row in conn.execute(query)
        if row.status not in ("failed", "settled") and row.merchant_id
    ]


class SettlementWrites:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
        self._insert_payments = dialect.insert(_payments).on_conflict_do_nothing().returning(_payments.c.id)
        self._insert_challenges = dialect.insert(_challenges).on_conflict_do_nothing().returning(_challenges.c.id)
        by_id = _payments.c.id == _param("id", "id")
        self._mark = {
            # Not `status IN (...)`: an expanding IN makes an executemany run row by row.
            "submitted": update(_payments)
            .where(by_id, or_(_payments.c.status == "claimed", _payments.c.status == "submitted"))
            .values(status="submitted", transaction=_param("tx", "transaction")),
            # A payment is released once: should two processes release it (a takeover racing its
            # owner), the first record stands.
            "settled": update(_payments)
            .where(by_id, _payments.c.status != "settled")
            .values(
                status="settled",
                transaction=_param("tx", "transaction"),
                receipt=_param("receipt", "receipt"),
                settled_at=_param("settled_at", "settled_at"),
                block_number=_param("block", "block_number"),
                chain_micros=_param("chain_micros", "chain_micros"),
                platform_micros=_param("platform_micros", "platform_micros"),
            ),
            "failed": update(_payments)
            .where(by_id, _payments.c.status != "settled")
            .values(
                status="failed",
                error_reason=_param("reason", "error_reason"),
                block_number=func.coalesce(_param("block", "block_number"), _payments.c.block_number),
            ),
        }
        self._link_challenges = (
            update(_challenges)
            .where(_challenges.c.id == bindparam("b_challenge"))
            .values(payment_id=bindparam("b_payment"))
        )
        # Claims are on the way to the chain: two batches may be written at once, each on a connection
        # of its own (HeldConnection), so that a burst of claims does not wait for the batch before
        # it. Records are written after the answer, one batch at a time.
        # (SQLite: one, as the process has one thread to write with; a claim batch runs on the event
        # loop itself when that thread and the database are free: see SQLiteWriter.run.)
        flushes = 1 if engine.dialect.name == "sqlite" else CLAIM_FLUSHES
        self._claim_conns = [HeldConnection(engine, inline=True) for _ in range(flushes)]
        self._record_conn = HeldConnection(engine)
        self._claims: Coalescer[tuple[dict[str, Any], dict[str, Any] | None], bool] = Coalescer(
            self._write_claims, flushes=flushes
        )
        self._records: Coalescer[_Record, None] = Coalescer(self._write_records)
        # Held payments taken for settlement (`capture`), a batch in one transaction; the statements
        # built once, as they are on each metered request's path.
        self._capture_by = {
            (upto, merchant): _capture_statement(upto=upto, merchant=merchant)
            for upto in (True, False)
            for merchant in (True, False)
        }
        self._capture_conn = HeldConnection(engine, inline=True)
        self._captures: Coalescer[dict[str, Any], Claimed | None] = Coalescer(self._write_captures)

    def claim(self, payment: dict[str, Any], challenge: dict[str, Any] | None = None) -> asyncio.Future[bool]:
        """Queue the ``agent_payments`` row ``payment`` for the next batch of claims, at once; the
        future answers False when its authorization is claimed already. ``challenge``: the row of
        the challenge it answers, recorded with it (unless recorded already), for a payment that is
        held (settled later by its id alone)."""
        return self._claims.enqueue((payment, challenge))

    def capture(
        self, payment_id: str, merchant_id: str | None, amount: int | None, valid_until: int
    ) -> asyncio.Future[Claimed | None]:
        """Queue the capture of a held payment of ``merchant_id``: if it is still held and valid until
        ``valid_until`` (Unix seconds) at least, an exact payment (``amount`` None) for its amount or
        an upto payment (``authorized``) for ``amount`` within its ceiling, it becomes ``claimed``;
        the future answers its row, or None when it was not taken (see `find` for why)."""
        return self._captures.enqueue(
            {"c_id": payment_id, "c_merchant": merchant_id, "c_amount": amount, "c_valid": valid_until}
        )

    async def _write_captures(self, items: list[dict[str, Any]]) -> list[Claimed | None]:
        def write(conn: Connection) -> list[Claimed | None]:
            taken: list[Claimed | None] = []
            for item in items:
                statement = self._capture_by[(item["c_amount"] is not None, item["c_merchant"] is not None)]
                row = conn.execute(statement, item).mappings().first()
                taken.append(Claimed(**row) if row is not None else None)
            return taken

        return await self._capture_conn.run(write)

    async def submitted(self, payment_id: str, transaction: str) -> None:
        await self._records.submit(_Record("submitted", {"b_id": payment_id, "b_tx": transaction}))

    async def settled(
        self,
        payment_id: str,
        *,
        transaction: str | None,
        receipt: dict[str, Any],
        settled_at: datetime,
        block: int | None,
        chain_micros: int,
        platform_micros: int,
        challenge_id: str | None,
        challenge: dict[str, Any] | None,
        event: dict[str, Any] | None,
    ) -> None:
        """Record the settlement, its challenge (``challenge``, unless recorded already, and linked to
        the payment) and its event, at once."""
        values = {
            "b_id": payment_id,
            "b_tx": transaction,
            "b_receipt": receipt,
            "b_settled_at": settled_at,
            "b_block": block,
            "b_chain_micros": chain_micros,
            "b_platform_micros": platform_micros,
        }
        await self._records.submit(_Record("settled", values, challenge, challenge_id, event))

    async def failed(
        self, payment_id: str, reason: str, *, block: int | None = None, challenge: dict[str, Any] | None = None
    ) -> None:
        """Record that the payment failed, and why (and its challenge, if not recorded yet)."""
        values = {"b_id": payment_id, "b_reason": reason, "b_block": block}
        await self._records.submit(_Record("failed", values, challenge))

    async def release(self, payment_id: str, *, status: str = "claimed") -> bool:
        """Give a claim up before anything was sent (the chain could not be reached, or a held
        payment's tool failed): the same signature may then be claimed again, by any process.
        False if the payment was not in ``status`` (taken by another caller meanwhile)."""
        async with self.engine.begin() as conn:
            gone = await conn.execute(
                delete(_payments).where(
                    _payments.c.id == payment_id, _payments.c.status == status, _payments.c.transaction.is_(None)
                )
            )
        return bool(gone.rowcount == 1)

    async def expire_hold(self, payment_id: str, status: str, reason: str) -> bool:
        """Record the held payment ``payment_id`` (still in ``status``: ``held`` or ``authorized``),
        whose authorization ran out, as failed for ``reason``: nothing was sent, nor can be. It stays
        on record, so that a capture of it, sent now or again later, answers that failure. False if
        it was no longer held (captured or released meanwhile)."""
        async with self.engine.begin() as conn:
            done = await conn.execute(
                update(_payments)
                .where(_payments.c.id == payment_id, _payments.c.status == status, _payments.c.transaction.is_(None))
                .values(status="failed", error_reason=reason, locked_until=None)
            )
        return bool(done.rowcount == 1)

    async def expire_holds(self, now: int) -> int:
        """Record the held payments (paid tools') whose authorization expired before ``now`` (Unix
        seconds) as failed (`reasons.INVALID_VALID_BEFORE`): their seller stopped between the hold
        and the tool's end. Nothing was sent, and nothing can be. How many."""
        async with self.engine.begin() as conn:
            done = await conn.execute(
                update(_payments)
                .where(_payments.c.status == "held", _payments.c.valid_before < now)
                .values(status="failed", error_reason=reasons.INVALID_VALID_BEFORE, locked_until=None)
            )
        return int(done.rowcount or 0)

    async def take_over(self, payment_id: str, now: datetime, until: datetime) -> bool:
        """Hold an unfinished payment until ``until`` for this process to finish (send it again);
        False when another process holds it."""
        async with self.engine.begin() as conn:
            taken = await conn.execute(
                update(_payments)
                .where(
                    _payments.c.id == payment_id,
                    _payments.c.status.in_(("claimed", "submitted")),
                    or_(_payments.c.locked_until.is_(None), _payments.c.locked_until < now),
                )
                .values(locked_until=until)
            )
        return bool(taken.rowcount == 1)

    async def find(self, payment_id: str) -> Claimed | None:
        """The payment ``payment_id`` as recorded, or None: a plain record, read at once (`quick_read`),
        for a request's path."""
        query = select(_payments).where(_payments.c.id == payment_id)
        found = await quick_read(self.engine, lambda conn: conn.execute(query).mappings().first())
        return Claimed(**found) if found else None

    async def load(self, payment_id: str) -> AgentPayment | None:
        """The payment ``payment_id`` as recorded, or None."""
        async with self.engine.connect() as conn:
            found = (await conn.execute(select(_payments).where(_payments.c.id == payment_id))).mappings().first()
        return AgentPayment.model_validate(dict(found)) if found else None

    async def load_by_authorization(self, chain_id: int, asset: str, payer: str, nonce: bytes) -> AgentPayment | None:
        """The payment of the authorization (chain, token, payer, nonce), or None: its claim."""
        query = select(_payments).where(
            _payments.c.chain_id == chain_id,
            _payments.c.asset == asset,
            _payments.c.payer == payer,
            _payments.c.nonce == "0x" + nonce.hex(),
        )
        async with self.engine.connect() as conn:
            found = (await conn.execute(query)).mappings().first()
        return AgentPayment.model_validate(dict(found)) if found else None

    def _record_challenges(self, conn: Connection, challenges: list[dict[str, Any]]) -> None:
        """Insert the challenges not recorded yet, and count those in the reports' rollups."""
        inserted = set(conn.execute(self._insert_challenges, challenges).scalars())
        if inserted:
            apply_challenges(conn, [c for c in challenges if c["id"] in inserted])

    async def _write_claims(self, claims: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> list[bool]:
        payments = [payment for payment, _ in claims]
        challenges = list({c["id"]: c for _, c in claims if c is not None}.values())

        def insert(conn: Connection) -> set[str]:
            if challenges:  # before the claims: kept should the claim lose (the challenge was answered)
                self._record_challenges(conn, challenges)
            return set(conn.execute(self._insert_payments, payments).scalars())

        held = self._claim_conns.pop()  # one per flush: never empty
        try:
            # each statement atomic by itself (a challenge recorded alone is one that was answered)
            inserted = await held.run(insert, atomic=False)
        finally:
            self._claim_conns.append(held)
        return [payment["id"] in inserted for payment in payments]

    async def _write_records(self, records: list[_Record]) -> list[None]:
        challenges = list({r.challenge["id"]: r.challenge for r in records if r.challenge is not None}.values())
        releasing = [r.values["b_id"] for r in records if r.kind == "settled"]
        lock = select(_payments.c.id, _payments.c.status).where(_payments.c.id.in_(releasing))
        if self.engine.dialect.name == "postgresql":
            lock = lock.with_for_update()

        def write(conn: Connection) -> None:
            # A payment another process released meanwhile keeps its record, and its event is not
            # sent twice (the lock holds off a concurrent release until this one commits).
            done = {row.id for row in conn.execute(lock) if row.status == "settled"} if releasing else set()
            kept = []
            for record in records:
                if record.kind == "settled":
                    if record.values["b_id"] in done:
                        continue  # released already, or earlier in this batch: the first release stands
                    done.add(record.values["b_id"])
                kept.append(record)
            if challenges:
                self._record_challenges(conn, challenges)
            failing = {r.values["b_id"]: r.values["b_reason"] for r in kept if r.kind == "failed"}
            newly_failed = _newly_failed(conn, failing)
            for kind, statement in self._mark.items():
                rows = [r.values for r in kept if r.kind == kind]
                if rows:
                    conn.execute(statement, rows)
            links = [{"b_challenge": r.link, "b_payment": r.values["b_id"]} for r in kept if r.link]
            if links:
                conn.execute(self._link_challenges, links)
            events = [r.event for r in kept if r.event is not None]
            if events:
                insert_events(conn, events)
            apply_agent_failures(conn, newly_failed)  # the reports' failures by reason

        await self._record_conn.run(write)
        return [None] * len(records)

    async def aclose(self) -> None:
        """Give the held connections back (once nothing is being written)."""
        for held in self._claim_conns:
            await held.aclose()
        await self._record_conn.aclose()
        await self._capture_conn.aclose()
