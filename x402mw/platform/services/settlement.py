"""Agent payment settlement: verify an EIP-3009 authorization, claim it once, relay it, sign a receipt.

The unique constraint on (chain, token, payer, nonce) is the replay guard across every process:
the first request to insert the claim settles; any other request with the same signed payload
waits for that settlement and gets the same receipt; a different payload with a used nonce is
refused. A settlement that outlives the caller's wait is *pending* (with its transaction), never
failed; it completes in the background and a retry gets the receipt.

An authorization has one outcome, forever: a retry of it, to any process, at any time (after its
challenge expired too), gets the receipt, the pending transaction, or the final refusal. A retry
that finds no process settling the payment finishes it itself (`SettlementRecovery.finish`).
While the chain cannot be reached, a new payment is answered *unavailable* at once and nothing is
recorded: the same signature may be sent again later.

Beside this module: `settlement_checks` (what is checked before the chain), `settlement_writes`
(the batched database writes) and `settlement_recovery` (finishing what no process is finishing).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.evm.receipts import sign_receipt
from x402mw.platform import metrics
from x402mw.platform.batching import unreachable
from x402mw.platform.chain.relayer import ChainUnavailable, RevertError, TransactionDropped
from x402mw.platform.chain.token import authorization_state, transfer_calldata
from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentPayment, new_id
from x402mw.platform.objects import agents as objects
from x402mw.platform.services.chains import Chains
from x402mw.platform.services.outbox import event_row
from x402mw.platform.services.settlement_checks import (
    Refusal,
    Verified,
    revert_reason,
    simulation_outcome,
    verify_payment,
)
from x402mw.platform.services.settlement_recovery import TAKEOVER_AFTER, SettlementRecovery
from x402mw.platform.services.settlement_writes import SettlementWrites
from x402mw.platform.timestamps import iso
from x402mw.protocol import reasons
from x402mw.protocol.models import PaymentPayload, PaymentRequirements, SettlementResponse

__all__ = ["Refusal", "SettleOutcome", "SettleRequest", "SettlementService", "payment_of"]

logger = logging.getLogger("x402mw.platform.settlement")

POLL_SECONDS = 0.05


@dataclass(slots=True)
class Claimed:
    """The ``agent_payments`` row of a payment being claimed, every column, as a plain record: the
    settlement's hot path builds one per payment, where an `AgentPayment` (a table model, each
    attribute instrumented) costs about 50 µs to build. A test holds its fields to the table's."""

    id: str
    merchant_id: str | None
    endpoint_id: str | None
    challenge_id: str | None
    livemode: bool
    chain_id: int
    asset: str
    currency: str
    payer: str
    nonce: str
    pay_to: str
    amount_minor: int
    payload_hash: str
    resource: str
    release_policy: str
    status: str
    created_at: datetime
    transaction: str | None = None
    block_number: int | None = None
    error_reason: str | None = None
    receipt: dict[str, Any] | None = None
    chain_micros: int | None = None
    platform_micros: int | None = None
    settled_at: datetime | None = None
    signature: str | None = None
    valid_after: int | None = None
    valid_before: int | None = None
    locked_until: datetime | None = None

    def row(self) -> dict[str, Any]:
        """The row to insert: every column by name."""
        return {name: getattr(self, name) for name in self.__slots__}


Payment = AgentPayment | Claimed
"""An ``agent_payments`` row as settlement reads and updates it: loaded from the database, or just
claimed by this process."""


@dataclass(frozen=True, slots=True)
class SettleRequest:
    accepted: PaymentRequirements
    payload: PaymentPayload
    merchant_id: str | None = None
    endpoint_id: str | None = None
    challenge_id: str | None = None
    resource: str = ""
    livemode: bool = False
    release_policy: str = "included"
    wait_seconds: float = 20.0
    challenge: dict[str, Any] | None = None  # the challenge's row, recorded with the outcome
    known_only: bool = False  # the challenge expired: answer a payment already made, settle no new one


@dataclass(frozen=True, slots=True)
class SettleOutcome:
    """``unavailable``: the chain could not be reached and nothing was sent or recorded."""

    status: Literal["settled", "pending", "failed", "unavailable"]
    response: SettlementResponse
    message: str | None = None
    payment_id: str | None = None


def payment_of(row: Payment) -> objects.AgentPayment:
    """The public form of an agent payment (``agent_payment.settled`` data, challenge status)."""
    return objects.AgentPayment(
        id=row.id,
        status=row.status,
        challenge_id=row.challenge_id,
        endpoint_id=row.endpoint_id,
        network=f"eip155:{row.chain_id}",
        asset=row.asset,
        currency=row.currency,
        amount_minor=row.amount_minor,
        payer=row.payer,
        pay_to=row.pay_to,
        transaction=row.transaction,
        block_number=row.block_number,
        error_reason=row.error_reason,
        receipt=row.receipt,
        livemode=row.livemode,
        created_at=row.created_at,
        settled_at=row.settled_at,
    )


def _authorization_key(chain_id: int, token: str, payer: str, nonce: bytes) -> str:
    """What names an authorization in this process's bookkeeping (the claim's unique columns)."""
    return f"{chain_id}:{token.lower()}:{payer.lower()}:{nonce.hex()}"


def _drop(simulation: asyncio.Future[Any] | None) -> None:
    """Give up a simulation nobody will await: cancel it, or take its outcome so that none is reported lost."""
    if simulation is not None and not simulation.cancel() and not simulation.cancelled():
        simulation.exception()


class SettlementService:
    def __init__(
        self,
        engine: AsyncEngine,
        chains: Chains,
        receipt_key: bytes,
        clock: Clock,
        *,
        simulate: bool = True,
        takeover_after: timedelta = TAKEOVER_AFTER,
    ) -> None:
        self.engine = engine
        self.chains = chains
        self.receipt_key = receipt_key
        self.clock = clock
        self.simulate = simulate
        self._inflight: dict[str, asyncio.Task[SettleOutcome | None]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._recording: dict[str, SettleOutcome] = {}  # answered, and being recorded
        self.recovery = SettlementRecovery(self, takeover_after=takeover_after)
        self.writes = SettlementWrites(engine)

    # -- verification (no side effects) -------------------------------------------------------

    def verify(self, accepted: PaymentRequirements, payload: PaymentPayload) -> Verified:
        """Check everything that can be checked off-chain (`verify_payment`); `Refusal` otherwise."""
        return verify_payment(self.chains, self.clock, accepted, payload)

    async def check_on_chain(self, verified: Verified, token: str) -> None:
        """Simulate the transfer from the relayer; `Refusal` with the revert's reason code."""
        await simulation_outcome(self._simulate_soon(verified, token))

    def _simulate_soon(self, verified: Verified, token: str) -> asyncio.Future[Any]:
        return verified.chain.relayer.simulate_soon(token, self._calldata(verified))

    @staticmethod
    def _calldata(verified: Verified) -> bytes:
        return transfer_calldata(verified.auth, verified.signature)

    # -- settlement ------------------------------------------------------------------------------

    async def settle(self, request: SettleRequest) -> SettleOutcome:
        """Settle one payment: verify it, claim its authorization, simulate, send and wait (up to
        ``request.wait_seconds``) for the release; a retry of the same payment gets its outcome."""
        outcome = await self._settle(request)
        metrics.count_settlement(
            self.network_label(request.accepted.network), outcome.status, outcome.response.error_reason
        )
        return outcome

    def network_label(self, network: str) -> str:
        """``network`` if the platform serves it, else ``other``: what the metrics may name."""
        chain = self.chains.by_network(network)
        return chain.network.caip2 if chain is not None else metrics.OTHER_NETWORK

    async def _settle(self, request: SettleRequest) -> SettleOutcome:
        started = time.perf_counter()
        network = request.accepted.network
        try:
            verified = self.verify(request.accepted, request.payload)
        except Refusal as refusal:
            return self.failed(network, refusal.reason, refusal.message)
        key = _authorization_key(verified.chain.chain_id, request.accepted.asset, verified.payer, verified.auth.nonce)
        if request.known_only:
            existing = await self._load_by_authorization(request, verified)
            if existing is None:
                return self.failed(network, reasons.CHALLENGE_EXPIRED, "the challenge has expired; pay the new one")
            return await self._join_existing(key, request, verified, existing)
        if not verified.chain.relayer.available:
            return self.unavailable(network)
        loop = asyncio.get_running_loop()
        # The simulation (it has no side effects) and the claim are queued at once, without waiting
        # for a turn of the event loop, each to go out in the next batch of its kind.
        simulation = self._simulate_soon(verified, request.accepted.asset) if self.simulate else None
        row = self._new_payment(request, verified)
        claim = self.writes.claim(row.row())
        # One task takes the claim's answer and goes on to the chain without waiting for this
        # coroutine to resume (a turn of the event loop less before the transfer is sent); it is
        # also what keeps the settlement going should this caller be cancelled.
        claimed: asyncio.Future[bool] = loop.create_future()
        task = loop.create_task(
            self._claim_and_execute(key, row, claim, request, verified, started, simulation, claimed)
        )
        if not await claimed:  # or the claim's exception
            return await self._join_existing(key, request, verified)
        return await self._wait(task, row.id, network, request.wait_seconds)

    async def _claim_and_execute(
        self,
        key: str,
        row: Claimed,
        claim: asyncio.Future[bool],
        request: SettleRequest,
        verified: Verified,
        started: float,
        simulation: asyncio.Future[Any] | None,
        claimed: asyncio.Future[bool],
    ) -> SettleOutcome | None:
        try:
            won = await claim
        except asyncio.CancelledError:
            _drop(simulation)
            claimed.cancel()
            raise
        except Exception as exc:
            _drop(simulation)
            if not claimed.done():
                claimed.set_exception(exc)
            return None  # the caller has the exception
        if not claimed.done():  # done only if the caller was cancelled meanwhile
            claimed.set_result(won)
        if not won:  # this authorization is claimed already
            _drop(simulation)
            return None
        task = asyncio.current_task()
        if task is not None:
            self._inflight[key] = task
            task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        return await self._execute(row, request, verified, started, simulation)

    def _new_payment(self, request: SettleRequest, verified: Verified) -> Claimed:
        auth = verified.auth
        asset = verified.chain.network.asset_by_address(request.accepted.asset)
        return Claimed(
            id=new_id(),
            merchant_id=request.merchant_id,
            endpoint_id=request.endpoint_id,
            challenge_id=request.challenge_id,
            livemode=request.livemode,
            chain_id=verified.chain.chain_id,
            asset=request.accepted.asset,
            currency=asset.symbol if asset else "",
            payer=verified.payer,
            nonce="0x" + auth.nonce.hex(),
            pay_to=auth.to,
            amount_minor=auth.value,
            payload_hash=verified.payload_hash,
            resource=request.resource[:2048],
            release_policy=request.release_policy,
            status="claimed",
            created_at=self.clock.now(),
            signature="0x" + verified.signature.hex(),
            valid_after=auth.valid_after,
            valid_before=auth.valid_before,
        )

    async def _join_existing(
        self, key: str, request: SettleRequest, verified: Verified, existing: AgentPayment | None = None
    ) -> SettleOutcome:
        network = request.accepted.network
        existing = existing or await self._load_by_authorization(request, verified)
        if existing is None:  # its claim was given up meanwhile (the chain could not be reached)
            return self.unavailable(network)
        if existing.payload_hash != verified.payload_hash or existing.merchant_id != request.merchant_id:
            # Another payload with this nonce, or this payload settled for another merchant: either
            # way this caller's authorization is used, and the other payment is none of its business.
            return self.failed(network, reasons.NONCE_USED, "this authorization nonce has already been used")
        if existing.status == "failed" and existing.transaction is None and not request.known_only:
            # Refused before reaching the chain (e.g. insufficient funds): the same signature may try again.
            async with self.engine.begin() as conn:
                taken = await conn.execute(
                    update(tables.agent_payments)
                    .where(
                        tables.agent_payments.c.id == existing.id,
                        tables.agent_payments.c.status == "failed",
                    )
                    .values(status="claimed", error_reason=None)
                )
            if taken.rowcount == 1:
                existing.status, existing.error_reason = "claimed", None
                task = asyncio.get_running_loop().create_task(
                    self._execute(existing, request, verified, time.perf_counter())
                )
                self._inflight[key] = task
                task.add_done_callback(lambda _t: self._inflight.pop(key, None))
                return await self._wait(task, existing.id, network, request.wait_seconds)
        running = self._inflight.get(key)
        if running is not None:
            return await self._wait(running, existing.id, network, request.wait_seconds)
        answered = self._recording.get(existing.id)
        if answered is not None or existing.status in ("settled", "failed"):
            return answered or self.outcome_for(existing)
        return await self.recovery.finish(existing, wait=request.wait_seconds)

    async def _wait(
        self, task: asyncio.Task[SettleOutcome | None], payment_id: str, network: str, wait_seconds: float
    ) -> SettleOutcome:
        try:
            outcome = await asyncio.wait_for(asyncio.shield(task), timeout=max(0.1, wait_seconds))
        except TimeoutError:
            outcome = None
        except Exception:  # logged where it happened; what is recorded answers
            logger.warning("settlement %s: its task failed", payment_id, exc_info=True)
            outcome = None
        return outcome or await self._outcome_of(payment_id, network)

    async def _poll(self, payment_id: str, network: str, wait_seconds: float) -> SettleOutcome:
        deadline = time.monotonic() + wait_seconds
        while True:
            outcome = await self._outcome_of(payment_id, network)
            if outcome.status != "pending" or time.monotonic() >= deadline:
                return outcome
            await asyncio.sleep(POLL_SECONDS)

    async def _outcome_of(self, payment_id: str, network: str) -> SettleOutcome:
        answered = self._recording.get(payment_id)
        if answered is not None:
            return answered
        row = await self.load(payment_id)
        if row is None:
            return self.failed(network, reasons.UNEXPECTED_SETTLE_ERROR, "settlement record missing")
        return self.outcome_for(row)

    def outcome_for(self, row: Payment) -> SettleOutcome:
        network = f"eip155:{row.chain_id}"
        if row.status == "settled":
            response = SettlementResponse(
                success=True,
                payer=row.payer,
                transaction=row.transaction or "",
                network=network,
                amount=row.amount_minor,
                extensions={"receipt": row.receipt},
            )
            return SettleOutcome("settled", response, payment_id=row.id)
        if row.status == "failed":
            return self.failed(
                network,
                row.error_reason or reasons.UNEXPECTED_SETTLE_ERROR,
                f"the payment failed: {row.error_reason}",
                transaction=row.transaction,
                payment_id=row.id,
            )
        response = SettlementResponse(
            success=False,
            error_reason=reasons.SETTLEMENT_PENDING,
            payer=row.payer,
            transaction=row.transaction or "",
            network=network,
            amount=row.amount_minor,
        )
        return SettleOutcome("pending", response, "the transfer is not final yet", payment_id=row.id)

    @staticmethod
    def failed(
        network: str,
        reason: str,
        message: str,
        *,
        transaction: str | None = None,
        payment_id: str | None = None,
    ) -> SettleOutcome:
        response = SettlementResponse(
            success=False, error_reason=reason, transaction=transaction or "", network=network
        )
        return SettleOutcome("failed", response, message, payment_id)

    @staticmethod
    def unavailable(network: str) -> SettleOutcome:
        response = SettlementResponse(
            success=False, error_reason=reasons.CHAIN_UNAVAILABLE, transaction="", network=network
        )
        return SettleOutcome("unavailable", response, "the chain cannot be reached; retry shortly")

    async def _execute(
        self,
        row: Payment,
        request: SettleRequest,
        verified: Verified,
        started: float,
        simulation: asyncio.Future[Any] | None = None,
    ) -> SettleOutcome:
        chain = verified.chain
        network = request.accepted.network
        try:
            if simulation is not None:
                await simulation_outcome(simulation)
            elif self.simulate:
                await self.check_on_chain(verified, request.accepted.asset)
            sent_at = time.perf_counter()
            tx = await chain.relayer.send(
                request.accepted.asset, self._calldata(verified), valid_until=verified.auth.valid_before
            )
        except Refusal as refusal:
            await self.writes.failed(row.id, refusal.reason, challenge=request.challenge)
            return self.failed(network, refusal.reason, refusal.message, payment_id=row.id)
        except RevertError as exc:
            reason = revert_reason(exc.reason)
            await self.writes.failed(row.id, reason, challenge=request.challenge)
            return self.failed(network, reason, f"the transfer reverted: {exc.reason}", payment_id=row.id)
        except Exception as exc:
            if isinstance(exc, ChainUnavailable) or unreachable(exc):
                # Nothing was sent: give the claim up, so that the same signature can be sent again.
                logger.warning("settlement %s: the chain cannot be reached (%s); claim given up", row.id, exc)
                await self.writes.release(row.id)
                return self.unavailable(network)
            logger.exception("settlement %s failed unexpectedly before its transfer was sent", row.id)
            await self.writes.failed(row.id, reasons.UNEXPECTED_SETTLE_ERROR, challenge=request.challenge)
            return self.failed(
                network, reasons.UNEXPECTED_SETTLE_ERROR, "the transfer could not be sent", payment_id=row.id
            )
        row.transaction = tx
        confirmations = chain.confirmations if request.release_policy == "confirmed" else 0
        # Watch for inclusion while the transaction is recorded (for recovery, should we stop).
        inclusion = asyncio.ensure_future(chain.wait_for(tx, confirmations=confirmations))
        try:
            await self.writes.submitted(row.id, tx)
        except Exception:
            logger.warning("settlement %s: could not record transaction %s", row.id, tx, exc_info=True)
        try:
            receipt = await inclusion
        except TransactionDropped:
            # Its authorization ran out before the transfer could be mined: the chain says what became of it.
            return await self.recovery.finish(row, wait=0, owner=True)
        except Exception:
            # The transfer is out: whatever failed after, the payment is pending, never failed.
            logger.exception("settlement %s: waiting for transaction %s failed", row.id, tx)
            return self.outcome_for(row)
        included_at = time.perf_counter()
        if receipt.status != 1:
            nonce = verified.auth.nonce
            try:
                used = await authorization_state(chain.rpc, request.accepted.asset, verified.payer, nonce)
            except Exception:  # the chain went away: what became of it is for a retry or the worker to find
                logger.warning("settlement %s: reverted, and the chain cannot say why", row.id, exc_info=True)
                return self.outcome_for(row)
            if used:  # by another transaction: a process that took the payment over sent it too
                return await self.recovery.finish(row, wait=5.0, owner=True)
            await self.writes.failed(
                row.id, reasons.TRANSACTION_REVERTED, block=receipt.block_number, challenge=request.challenge
            )
            return self.failed(
                network,
                reasons.TRANSACTION_REVERTED,
                "the transfer reverted on-chain",
                transaction=receipt.transaction_hash,
                payment_id=row.id,
            )
        tx = receipt.transaction_hash  # the version of the transfer that was mined
        outcome = self.release(row, receipt.block_number, tx, started, sent_at, included_at, request.challenge)
        metrics.time_settlement(chain.network.caip2, started, sent_at, included_at, time.perf_counter())
        return outcome

    def release(
        self,
        row: Payment,
        block: int,
        tx: str,
        started: float,
        sent_at: float,
        included_at: float,
        challenge: dict[str, Any] | None = None,
    ) -> SettleOutcome:
        """Sign the receipt and answer with it; record the release meanwhile (`_record`)."""
        outcome, write = self._released(row, block, tx, started, sent_at, included_at, challenge)
        self._record(row.id, outcome, write)
        return outcome

    async def release_recorded(self, row: Payment, block: int, tx: str) -> SettleOutcome:
        """Release ``row``'s payment and answer once the release is recorded, with the record that
        stands: another task or process may have released it first, with a receipt of its own, and
        every answer for one payment carries one receipt."""
        now = time.perf_counter()
        _, write = self._released(row, block, tx, now, now, now, None)
        await write
        fresh = await self.load(row.id)
        if fresh is None or fresh.status != "settled":  # the record did not take: answer from memory
            return self.outcome_for(row)
        return self.outcome_for(fresh)

    def _released(
        self,
        row: Payment,
        block: int,
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
        receipt = sign_receipt({k: v for k, v in fields.items() if v}, self.receipt_key)
        row.status, row.receipt, row.settled_at, row.block_number = "settled", receipt, settled_at, block
        row.transaction = tx  # the version of the transfer that was mined
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
        outcome = self.outcome_for(row)
        write = self.writes.settled(
            row.id,
            transaction=tx,
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

    def _record(self, payment_id: str, outcome: SettleOutcome, write: Coroutine[Any, Any, None]) -> None:
        # The transfer is final on the chain and the receipt is signed: the caller gets them now,
        # not one transaction later. Until the write commits, this process answers for the payment
        # from memory; should the process stop first, the payment stays `submitted` with its
        # transaction, and recovery releases it (with a receipt signed then).
        self._recording[payment_id] = outcome
        task = asyncio.get_running_loop().create_task(write)
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

    async def recorded(self) -> None:
        """Wait until the settlements this process has answered so far are recorded: a read of the
        agent API made after a receipt then finds the payment settled (within this process; another
        process's records may land a few milliseconds later). Later settlements are not waited for."""
        if self._background:
            await asyncio.wait(list(self._background))

    async def drain(self) -> None:
        """Wait until every answered settlement is recorded, those answered meanwhile too."""
        while self._background:
            await self.recorded()

    async def aclose(self) -> None:
        """Record what was answered and release the writers' connections (before the engine closes)."""
        await self.drain()
        await self.writes.aclose()

    async def load(self, payment_id: str) -> AgentPayment | None:
        async with self.engine.connect() as conn:
            found = (
                (await conn.execute(select(tables.agent_payments).where(tables.agent_payments.c.id == payment_id)))
                .mappings()
                .first()
            )
        return AgentPayment.model_validate(dict(found)) if found else None

    async def _load_by_authorization(self, request: SettleRequest, verified: Verified) -> AgentPayment | None:
        table = tables.agent_payments
        async with self.engine.connect() as conn:
            found = (
                (
                    await conn.execute(
                        select(table).where(
                            table.c.chain_id == verified.chain.chain_id,
                            table.c.asset == request.accepted.asset,
                            table.c.payer == verified.payer,
                            table.c.nonce == "0x" + verified.auth.nonce.hex(),
                        )
                    )
                )
                .mappings()
                .first()
            )
        return AgentPayment.model_validate(dict(found)) if found else None

    def finishing(self, row: Payment) -> bool:
        """Whether this process is settling ``row``'s payment, or has answered for it and is recording it."""
        key = _authorization_key(row.chain_id, row.asset, row.payer, bytes.fromhex(row.nonce[2:]))
        return key in self._inflight or row.id in self._recording
