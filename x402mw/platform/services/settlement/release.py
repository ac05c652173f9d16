"""Releasing a settled payment: its receipt signed, its release answered and recorded.

The transfer is final on the chain: the receipt is signed and the release (the payment settled,
its challenge linked, ``agent_payment.settled`` in the outbox) written in the next batch of records,
with those of the settlements released meanwhile (`SettlementWrites`, a group commit); the caller is
answered once that batch has committed. A reader (the agent API, the events list, a retry of the
same payment, to any process) that comes after the answer thus finds the payment settled, without
waiting for anything. Should the write fail, the caller still gets the receipt (the money has
moved) and the payment stays ``submitted`` with its transaction, for recovery to release; should
the process stop while the batch is written, the same.

A payment is released once: should two releases race (recovery with a stale read, or a process
taking over), the first record stands, and `Releases.release_recorded` answers with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

from x402mw.evm.receipts import sign_receipt
from x402mw.platform.clock import Clock
from x402mw.platform.objects import agents as objects
from x402mw.platform.services.outbox import event_row
from x402mw.platform.services.settlement.outcomes import Payment, SettleOutcome, outcome_for, payment_of
from x402mw.platform.services.settlement.writes import SettlementWrites
from x402mw.platform.timestamps import iso

__all__ = ["Releases"]

logger = logging.getLogger("x402mw.platform.settlement")


class Releases:
    """The releases of one process's settlements (`SettlementService.releases`)."""

    def __init__(self, writes: SettlementWrites, receipt_key: bytes, clock: Clock) -> None:
        self.writes = writes
        self.receipt_key = receipt_key
        self.clock = clock
        self._background: set[asyncio.Task[Any]] = set()
        self._recording: dict[str, tuple[SettleOutcome, asyncio.Task[None]]] = {}  # released, being recorded
        self._releasing: dict[str, asyncio.Future[SettleOutcome]] = {}  # by release_recorded, by payment

    def answered(self, payment_id: str) -> SettleOutcome | None:
        """The outcome of a payment this process released and is still recording."""
        recording = self._recording.get(payment_id)
        return recording[0] if recording is not None else None

    async def recorded_outcome(self, payment_id: str) -> SettleOutcome | None:
        """The outcome of a payment this process released, once its record has committed (or
        failed to); None if this process is not recording a release of it."""
        recording = self._recording.get(payment_id)
        if recording is None:
            return None
        outcome, write = recording
        await asyncio.wait([write])
        return outcome

    async def release(
        self,
        row: Payment,
        block: int | None,
        tx: str,
        started: float,
        sent_at: float,
        included_at: float,
        challenge: dict[str, Any] | None = None,
    ) -> SettleOutcome:
        """Sign the receipt, record the release and answer with it once the record has committed."""
        outcome, write = self._released(row, block, tx, started, sent_at, included_at, challenge)
        # A task of its own: the record is written (and `drain` waits for it) even should the
        # settlement be cancelled meanwhile.
        task = self._record(row.id, outcome, write)
        await asyncio.wait([task])
        return outcome

    async def release_recorded(self, row: Payment, block: int, tx: str) -> SettleOutcome:
        """Release ``row``'s payment and answer once the release is recorded, with the record that
        stands: another task or process may have released it first, with a receipt of its own, and
        every answer for one payment carries one receipt. Concurrent calls for one payment (a retry
        and the worker finding it at once) share one release."""
        running = self._releasing.get(row.id)
        if running is None:
            running = asyncio.ensure_future(self._release_and_read(row, block, tx))
            self._releasing[row.id] = running
            running.add_done_callback(lambda _done: self._releasing.pop(row.id, None))
        return await asyncio.shield(running)

    async def _release_and_read(self, row: Payment, block: int, tx: str) -> SettleOutcome:
        now = time.perf_counter()
        _, write = self._released(row, block, tx, now, now, now, None)
        await write
        fresh = await self.writes.load(row.id)
        if fresh is None or fresh.status != "settled":  # the record did not take: answer from memory
            return outcome_for(row)
        return outcome_for(fresh)

    def _released(
        self,
        row: Payment,
        block: int | None,
        tx: str,
        started: float,
        sent_at: float,
        included_at: float,
        challenge: dict[str, Any] | None,
    ) -> tuple[SettleOutcome, Coroutine[Any, Any, None]]:
        """``row`` marked settled with a newly signed receipt: its outcome, and the write recording it."""
        settled_at = self.clock.now()
        fields = {
            "challengeId": row.challenge_id or "",
            "endpointId": row.endpoint_id or "",
            "network": f"eip155:{row.chain_id}",
            "asset": row.asset,
            "amount": str(row.amount_minor),
            "payer": row.payer,
            "payTo": row.pay_to,
            "transaction": tx,
            "settledAt": iso(settled_at),
        }
        if row.scheme == "upto":  # the amount settled, and the ceiling the payer signed
            fields["scheme"], fields["maxAmount"] = "upto", str(row.ceiling_minor)
        receipt = sign_receipt({k: v for k, v in fields.items() if v}, self.receipt_key)
        row.status, row.receipt, row.settled_at, row.block_number = "settled", receipt, settled_at, block
        row.transaction = tx or None  # the version of the transfer that was mined (none for 0 settled)
        chain_micros = int((included_at - sent_at) * 1e6)
        platform_micros = int((time.perf_counter() - started) * 1e6) - chain_micros
        event = None
        if row.merchant_id:
            event = event_row(
                merchant_id=row.merchant_id,
                livemode=row.livemode,
                type="agent_payment.settled",
                data=objects.AgentPaymentEnvelope(agent_payment=payment_of(row)).model_dump(mode="json"),
                at=settled_at,
            )
        outcome = outcome_for(row)
        write = self.writes.settled(
            row.id,
            transaction=tx or None,
            receipt=receipt,
            settled_at=settled_at,
            block=block,
            chain_micros=chain_micros,
            platform_micros=platform_micros,
            challenge_id=row.challenge_id,
            challenge=challenge,
            event=event,
        )
        return outcome, write

    def _record(self, payment_id: str, outcome: SettleOutcome, write: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        # Should the write fail, the payment stays `submitted` with its transaction, and recovery
        # releases it (with a receipt signed then); until the write is done, this process knows the
        # outcome (`answered`: it is settling the payment, recovery leaves it alone).
        task = asyncio.get_running_loop().create_task(write)
        self._recording[payment_id] = (outcome, task)
        self._background.add(task)

        def recorded(done: asyncio.Task[None]) -> None:
            self._background.discard(done)
            self._recording.pop(payment_id, None)
            if not done.cancelled() and done.exception() is not None:
                logger.error(
                    "settlement %s: recording the release failed; recovery will finish it",
                    payment_id,
                    exc_info=done.exception(),
                )

        task.add_done_callback(recorded)
        return task

    async def drain(self) -> None:
        """Wait until every release being recorded is, those released meanwhile too (before the
        writers close)."""
        while self._background:
            await asyncio.wait(list(self._background))
