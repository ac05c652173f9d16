"""Finishing a settlement that no task of this process is running (`SettlementRecovery`): one left
behind by a process that stopped, one whose transaction the chain lost, or one an agent retries at
another process than the one settling it.

The chain is the judge: an authorization it shows used is settled with the transaction that used
it (found by its ``AuthorizationUsed`` log), whoever sent it; one that can no longer be used (the
chain's time is past its ``validBefore``) is recorded failed; one still unused is sent again, from
the signed authorization the claim keeps, once the payment is old enough that its own process
would have sent it (`TAKEOVER_AFTER`, and under a lease so that one process at a time does). A
transfer sent twice moves the money once: the token accepts an authorization once.

The worker runs `SettlementRecovery.finish_left` for payments older than that, and drops held
payments (paid MCP tools) whose authorization expired without being settled or released, and upto
holds whose permit expired unsettled (their challenges recorded unpaid).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import select, update

from x402mw.platform.chain.relayer import ChainUnavailable
from x402mw.platform.chain.token import authorization_state, find_authorization_use
from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentPayment
from x402mw.platform.services.chains import ChainHandle, Chains
from x402mw.platform.services.challenges import record_challenges
from x402mw.platform.services.settlement.checks import PaymentRefusal
from x402mw.platform.services.settlement.outcomes import Payment, SettleOutcome, outcome_for
from x402mw.platform.services.settlement.release import Releases
from x402mw.platform.services.settlement.smart_accounts import CodeCache, prepare_payer
from x402mw.platform.services.settlement.transfers import transfer_of
from x402mw.platform.services.settlement.writes import SettlementWrites
from x402mw.protocol import reasons

logger = logging.getLogger("x402mw.platform.settlement")

TAKEOVER_AFTER = timedelta(seconds=20)
"""By default (`PlatformSettings.takeover_seconds`): a payment whose authorization is still unused
this long after its claim is sent again by whoever finishes it (its own process sends within
milliseconds of claiming, and keeps a lost transaction moving); the worker looks at payments still
unfinished this long after their claim; a process that sends a payment again holds it this long."""
_POLL_SECONDS = 0.25
_WAIT_FOR_RECEIPT = 1.0


class SettlementRecovery:
    """Finishes payments for a `SettlementService` (its ``recovery``). ``finishing`` tells whether
    that service is settling a payment itself, or answered for it and is recording it."""

    def __init__(
        self,
        chains: Chains,
        clock: Clock,
        writes: SettlementWrites,
        releases: Releases,
        finishing: Callable[[Payment], bool],
        codes: CodeCache | None = None,
        *,
        takeover_after: timedelta = TAKEOVER_AFTER,
    ) -> None:
        self.codes = codes or CodeCache()
        self.chains = chains
        self.clock = clock
        self.writes = writes
        self.releases = releases
        self.finishing = finishing
        self.takeover_after = takeover_after
        # A claim of a payment without its signature (made before the claim kept it), left
        # `claimed` with its authorization unused, by id: the relayer's pending nonce when it was
        # first found so (see `_nothing_pending_since`).
        self._unused_since: dict[str, int] = {}

    async def finish(self, row: Payment, *, wait: float, owner: bool = False) -> SettleOutcome:
        """Bring ``row``'s payment as far as the chain allows within ``wait`` seconds (at least one
        look); its outcome then (pending while it is not final). ``owner``: the caller is the task
        settling it (which others leave to answer for it)."""
        deadline = self.clock.monotonic() + wait
        while True:
            outcome = await self._step(row, owner)
            if outcome is not None:
                return outcome
            if self.clock.monotonic() >= deadline:
                return outcome_for(row)
            await asyncio.sleep(min(_POLL_SECONDS, max(0.0, deadline - self.clock.monotonic())))
            fresh = await self.writes.load(row.id)  # another process may have finished it meanwhile
            if fresh is None:
                return outcome_for(row)
            row = fresh

    async def finish_left(self) -> int:
        """One look at every payment still unfinished `takeover_after` after its claim that this
        process is not settling; how many became final. Held payments (paid MCP tools) whose
        authorization expired are recorded failed: their seller never settled nor released them."""
        expired = await self.writes.expire_holds(int(self.clock.time()))
        if expired:
            logger.warning("%d held payments failed: their authorization expired unsettled", expired)
        finished = await self.close_lapsed_holds(int(self.clock.time()))
        for row in await self._left():
            try:
                outcome = await self.finish(row, wait=0)
            except (ChainUnavailable, httpx.TransportError, OSError, TimeoutError) as exc:
                logger.warning("recovery of settlement %s: the chain cannot be reached (%s)", row.id, exc)
                continue
            if outcome.status != "pending":
                finished += 1
        await self.releases.drain()
        return finished

    async def close_lapsed_holds(self, now: int) -> int:
        """Record the upto payments held for a request that never settled them (its seller stopped)
        whose permit expired before ``now`` (Unix seconds) as failed (``permit2_deadline_expired``,
        what a capture of one answers): nothing was or can be charged. Each leaves what any
        challenge that was not paid leaves, its challenge recorded without a payment (recorded with
        the hold; here for a hold made before holds recorded theirs). How many."""
        table = tables.agent_payments
        lapsed = (
            update(table)
            .where(table.c.status == "authorized", table.c.valid_before <= now, table.c.transaction.is_(None))
            .values(status="failed", error_reason=reasons.PERMIT2_DEADLINE_EXPIRED, locked_until=None)
        )
        columns = [
            table.c[name]
            for name in ("challenge_id", "merchant_id", "endpoint_id", "livemode", "chain_id", "asset", "pay_to")
        ]
        columns += [table.c.ceiling_minor, table.c.resource, table.c.valid_before]
        async with self.writes.engine.begin() as conn:
            rows = (await conn.execute(lapsed.returning(*columns))).all()
            challenges = [
                {
                    "id": row.challenge_id,
                    "merchant_id": row.merchant_id,
                    "endpoint_id": row.endpoint_id,
                    "livemode": row.livemode,
                    "network": f"eip155:{row.chain_id}",
                    "asset": row.asset,
                    "pay_to": row.pay_to,
                    "amount_minor": row.ceiling_minor,
                    "resource": row.resource,
                    # The challenge's own expiry is not kept with the hold: it could be paid by this
                    # authorization until the permit's deadline.
                    "expires_at": datetime.fromtimestamp(row.valid_before, UTC),
                    "created_at": self.clock.now(),
                    "payment_id": None,
                }
                for row in rows
                if row.challenge_id
            ]
            if challenges:
                await record_challenges(conn, challenges)
        return len(rows)

    async def _step(self, row: Payment, owner: bool) -> SettleOutcome | None:
        """One look at the chain, and what it calls for; the outcome once final, else None."""
        if row.status in ("settled", "failed"):
            return outcome_for(row)
        chain = self.chains.get(row.chain_id)
        if chain is None or not chain.sender(row.scheme).available:
            return None
        nonce = bytes.fromhex(row.nonce[2:])
        transfer = transfer_of(row, chain.domain(row.asset))
        upto = row.scheme == "upto"
        if upto:
            used = transfer is not None and await transfer.used(chain.rpc)
        else:
            used = await authorization_state(chain.rpc, row.asset, row.payer, nonce)
        if used:
            return await self._settle_used(chain, row, nonce, owner)
        if row.valid_before is not None and await chain.head_time() >= row.valid_before:
            # The token refuses it from now on, whatever is still waiting to be mined.
            await self.writes.failed(row.id, reasons.INVALID_VALID_BEFORE)
            row.status, row.error_reason = "failed", reasons.INVALID_VALID_BEFORE
            return outcome_for(row)
        age = self.clock.now() - _aware(row.created_at)
        if age < self.takeover_after:
            return None  # its own process is (or was a moment ago) sending it
        if transfer is None:
            return await self._release_unsigned(chain, row)
        if row.transaction is not None:
            mined = await chain.rpc.request("eth_getTransactionReceipt", [row.transaction])
            if mined and int(mined["status"], 16) != 1:
                # Mined and reverted, its authorization still unused: it did nothing, for good.
                await self.writes.failed(row.id, reasons.TRANSACTION_REVERTED, block=int(mined["blockNumber"], 16))
                row.status, row.error_reason = "failed", reasons.TRANSACTION_REVERTED
                return outcome_for(row)
            if not mined and chain.sender(row.scheme).sending(row.transaction):
                return None  # this process's relayer keeps it moving
        now = self.clock.now()
        if not await self.writes.take_over(row.id, now, now + self.takeover_after):
            return None  # another process is sending it again
        if transfer.deployment is not None and transfer.auth is not None:
            # a smart account whose deployment its own process may not have sent
            try:
                await prepare_payer(chain, row.asset, transfer.auth, transfer.deployment, self.codes)
            except PaymentRefusal as refusal:
                await self.writes.failed(row.id, refusal.reason)
                row.status, row.error_reason = "failed", refusal.reason
                return outcome_for(row)
        logger.warning(
            "settlement %s: its authorization is still unused %s after its claim; sending it again", row.id, age
        )
        tx = await chain.sender(row.scheme).send(
            transfer.to, transfer.calldata, gas=transfer.gas, valid_until=transfer.valid_until
        )
        row.transaction, row.status = tx, "submitted"
        await self.writes.submitted(row.id, tx)
        return None

    async def _settle_used(self, chain: ChainHandle, row: Payment, nonce: bytes, owner: bool) -> SettleOutcome | None:
        if row.scheme == "upto":
            # Permit2 logs no use of a nonce: only the transaction recorded can be ours; one that
            # reverted means something else used the nonce.
            tx = row.transaction
            if tx is not None:
                mined = await chain.rpc.request("eth_getTransactionReceipt", [tx])
                if mined and int(mined["status"], 16) != 1:
                    tx = None
        else:
            tx = await find_authorization_use(chain.rpc, row.asset, row.payer, nonce)
        if tx is None:  # used beyond the window searched, or canceled by the payer
            await self.writes.failed(row.id, reasons.NONCE_USED)
            row.status, row.error_reason = "failed", reasons.NONCE_USED
            return outcome_for(row)
        confirmations = chain.confirmations if row.release_policy == "confirmed" else 0
        try:
            receipt = await chain.wait_for(tx, confirmations=confirmations, timeout=_WAIT_FOR_RECEIPT)
        except TimeoutError:
            return None
        if not owner and self.finishing(row):
            return None  # this process's own settlement of it is answering
        # Answered only once recorded, from the record: should this process's own settlement or
        # another process have released it first (``row`` may be a read from before that), its
        # receipt stands, and no caller is ever shown a second one.
        return await self.releases.release_recorded(row, receipt.block_number, receipt.transaction_hash)

    async def _release_unsigned(self, chain: ChainHandle, row: Payment) -> SettleOutcome | None:
        """A payment claimed before claims kept the signature: it cannot be sent again. Once no
        transfer the relayer had sent when it was first found unused can still be waiting to be
        mined, it is recorded failed without a transaction, so that the same signature may be
        sent again by the agent."""
        if row.transaction is not None:
            try:
                receipt = await chain.relayer.wait_for_receipt(row.transaction, timeout=_WAIT_FOR_RECEIPT)
            except TimeoutError:
                return None
            if receipt.status != 1:
                await self.writes.failed(row.id, reasons.TRANSACTION_REVERTED, block=receipt.block_number)
                row.status, row.error_reason = "failed", reasons.TRANSACTION_REVERTED
                return outcome_for(row)
            return None  # mined, yet its authorization unused: another look will find its use
        mined, pending = await chain.relayer.nonces()
        if not self._nothing_pending_since(row.id, mined, pending):
            return None
        await self.writes.failed(row.id, reasons.UNEXPECTED_SETTLE_ERROR)
        row.status, row.error_reason = "failed", reasons.UNEXPECTED_SETTLE_ERROR
        return outcome_for(row)

    async def _left(self) -> list[AgentPayment]:
        """Payments unfinished `takeover_after` after their claim, that this process is not settling."""
        table = tables.agent_payments
        cutoff = self.clock.now() - self.takeover_after
        async with self.writes.engine.connect() as conn:
            found = await conn.execute(
                select(table).where(table.c.status.in_(("claimed", "submitted")), table.c.created_at <= cutoff)
            )
            rows = [AgentPayment.model_validate(dict(r)) for r in found.mappings()]
        return [row for row in rows if not self.finishing(row)]

    def _nothing_pending_since(self, payment_id: str, mined: int, pending: int) -> bool:
        """Whether every transaction the relayer had sent when payment ``payment_id`` was first
        found unused is mined now (``mined`` and ``pending`` are the relayer's nonces). A transfer
        the stopped process sent for it could otherwise still be waiting in the node's pool: failing
        the payment then would let the same signature be relayed twice (the second reverts, and the
        first would settle a payment recorded failed)."""
        waited_for = self._unused_since.setdefault(payment_id, pending)
        if mined < waited_for:
            return False
        del self._unused_since[payment_id]
        return True


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)  # SQLite answers naive UTC
