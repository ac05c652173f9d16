"""The relayer's healing: what it does about the transactions a node loses, displaces or leaves
waiting, so that nothing it sent stays stuck (`Healer`, driven by `x402mw.platform.chain.relayer`).

Each pass (`Healer.heal`, which the relayer runs on errors, on timeouts and every reconcile interval
while anything is in flight) compares what the relayer has in flight with the account's nonces on
the node, and mends the difference:

- a transaction the node no longer knows is sent again, byte for byte, while its call can still
  succeed (``valid_until``, an authorization's ``validBefore``); past that, its nonce is filled
  with a zero-value transfer to the relayer itself and the transaction is given up
  (`TransactionDropped`);
- a transaction whose nonce went to another transaction (a filler, or another process sharing the
  account) is sent again under a new nonce, or given up when it no longer can succeed;
- a nonce that nobody sent, with later transactions waiting behind it, is filled;
- a transaction left waiting at a fee below the going one is replaced by the same call at a
  higher fee (waiters get the receipt of whichever version is mined).

Between passes, a nonce a refused send gave back, with later ones out already, is filled unless a
send takes it soon (`Healer.fill_released`). Nothing waits behind a gap for longer than one reconcile
interval.

The healer shares the relayer's book of what is in flight (``pending``, by nonce, and the
`NonceBook`) and sends through the relayer (`Sending`): a healed transaction leaves in the same
JSON-RPC batches, and is waited for in the same way, as any other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from x402mw.platform.chain.fees import FeeOracle
from x402mw.platform.chain.nonces import NonceBook
from x402mw.platform.chain.receipts import ReceiptPoller
from x402mw.platform.chain.rpc import JsonRpc, RpcError
from x402mw.platform.chain.transactions import SignedTransaction, TransactionSigner

logger = logging.getLogger("x402mw.platform.chain.relayer")  # the relayer's log: healing is its work

VALIDITY_MARGIN = 3
"""Seconds a call must stay valid after it is sent again: time for it to be included."""
GAP_GRACE = 0.05
"""Seconds a nonce a refused send gave back waits for the next send before it is filled."""
NONCE_ERRORS = (
    "nonce too low",
    "nonce too high",
    "invalid nonce",
    "replacement transaction underpriced",
    "already known",
    "known transaction",
    "already imported",
)
"""What nodes answer a transaction whose nonce is taken, or that they hold already."""
KNOWN = ("already known", "known transaction", "already imported")
"""What nodes answer a transaction they hold already."""


class TransactionDropped(Exception):
    """The relayer gave up a transaction: its call can no longer succeed (``valid_until`` passed)
    before the transaction could be mined. Nothing it would have done was done by it."""

    def __init__(self, tx_hash: str, reason: str) -> None:
        super().__init__(f"transaction {tx_hash} was dropped: {reason}")
        self.tx_hash = tx_hash
        self.reason = reason


@dataclass(eq=False)
class Submission:
    """One call the relayer keeps sending until it is mined, as one or more signed transactions."""

    to: str | None
    data: bytes
    gas: int
    value: int
    valid_until: int | None  # unix time after which the call cannot succeed; None: always can
    tx: SignedTransaction  # the newest version
    hashes: list[str] = field(default_factory=list)  # every version, oldest first
    sent_at: float = 0.0  # the healer's monotonic clock at the newest version's (re)broadcast

    @property
    def filler(self) -> bool:
        return not self.data and self.value == 0


@dataclass(frozen=True)
class Sending:
    """What the healer asks of the relayer that sends."""

    broadcast: Callable[[SignedTransaction], Awaitable[str]]  # send one signed transaction (batched)
    track: Callable[[Submission], None]  # hold a submission as pending under its nonce, by all its hashes
    remember: Callable[[str, Submission], None]  # a new version's hash names the submission too
    release: Callable[[int], None]  # give back a nonce that was not used
    resync: Callable[[], Awaitable[None]]  # read the account's pending nonce from the node again


class Healer:
    """Heals one account's transactions in flight (see the module's docstring).

    ``pending`` (by nonce) and ``nonces`` are the relayer's own, shared; ``displaced`` holds the
    submissions whose nonce went to another transaction until they are sent again. ``counts`` are
    the relayer's metrics by result (``rebroadcast``, ``replaced``, ``resent``, ``filler``,
    ``dropped``); ``clock`` is the wall clock that ``valid_until`` is read against, ``monotonic``
    the one that times how long a transaction or a nonce has waited.
    """

    def __init__(
        self,
        rpc: JsonRpc,
        signer: TransactionSigner,
        fees: FeeOracle,
        nonces: NonceBook,
        pending: dict[int, Submission],
        receipts: ReceiptPoller,
        sending: Sending,
        *,
        address: str,
        counts: Mapping[str, Any],
        reconcile_interval: float,
        stuck_after: float,
        clock: Callable[[], float],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rpc = rpc
        self._signer = signer
        self._fees = fees
        self._nonces = nonces
        self._pending = pending
        self._receipts = receipts
        self._sending = sending
        self.address = address
        self._counts = counts
        self.reconcile_interval = reconcile_interval
        self.stuck_after = stuck_after
        self._clock = clock
        self._monotonic = monotonic
        self.displaced: list[Submission] = []  # their nonce went to another transaction: to send again
        self._stalled: tuple[int, float] = (-1, 0.0)  # the mined nonce, and since when it has not moved

    async def heal(self, mined: int, pending: int) -> None:
        """One pass, given the account's nonces on the node, ``(mined, pending)``."""
        self._nonces.catch_up(pending)  # another process of this account sent those below it
        await self._settle_consumed(mined)
        await self._mend_waiting(mined)
        await self._fill_foreign_gap(mined, pending)

    async def fill_released(self) -> None:
        """Fill the nonces refused sends gave back, with later ones out already, that no send has
        taken within `GAP_GRACE`."""
        await asyncio.sleep(GAP_GRACE)
        while (nonce := self._nonces.next_unfilled()) is not None:
            await self._fill(nonce)

    async def _settle_consumed(self, mined: int) -> None:
        """Submissions whose nonce the chain has used: mined (forget them), or displaced by another
        transaction (send the call again under a new nonce, or give it up)."""
        consumed = [s for nonce, s in self._pending.items() if nonce < mined]
        if consumed:
            hashes = [h for s in consumed for h in s.hashes]
            found = await self._rpc.batch([("eth_getTransactionReceipt", [h]) for h in hashes])
            receipts = dict(zip(hashes, found, strict=True))
            for submission in consumed:
                if self._pending.get(submission.tx.nonce) is not submission:
                    continue
                del self._pending[submission.tx.nonce]
                if not submission.filler and not any(receipts.get(h) for h in submission.hashes):
                    self.displaced.append(submission)  # not mined: another transaction took its nonce
        displaced, self.displaced = self.displaced, []
        for submission in displaced:
            if not self._still_valid(submission):
                self._give_up(submission, "its nonce went to another transaction and its call has expired")
                continue
            logger.warning(
                "relayer %s: nonce %d went to another transaction; sending %s again under a new nonce",
                self.address,
                submission.tx.nonce,
                submission.hashes[0],
            )
            await self._resend_under_new_nonce(submission)

    async def _mend_waiting(self, mined: int) -> None:
        """Submissions not mined yet: send again those the node lost (at the going fees if theirs
        are below: a node may evict a transaction the base fee outgrew), replace those that wait
        priced too low."""
        now = self._monotonic()
        waiting = [
            s
            for nonce, s in sorted(self._pending.items())
            if nonce >= mined and nonce not in self._nonces.broadcasting and now - s.sent_at >= self.reconcile_interval
        ]
        if not waiting:
            return
        known = await self._rpc.batch([("eth_getTransactionByHash", [s.tx.hash]) for s in waiting])
        going = await self._fees.going()
        for submission, found in zip(waiting, known, strict=True):
            if self._pending.get(submission.tx.nonce) is not submission:
                continue
            cheap = submission.tx.fees.below(going)
            if not found and not (submission.filler or self._still_valid(submission)):
                self._give_up(submission, "the node lost it and its call has expired")
                await self._fill(submission.tx.nonce)
            elif not found and not cheap:
                logger.warning(
                    "relayer %s: the node lost nonce %d (%s); sending it again",
                    self.address,
                    submission.tx.nonce,
                    submission.tx.hash,
                )
                await self._rebroadcast(submission, submission.tx, "rebroadcast")
            elif cheap and (not found or now - submission.sent_at > self.stuck_after):
                replacement = await self._signer.sign(
                    submission.tx.nonce,
                    submission.to,
                    submission.data,
                    gas=submission.gas,
                    value=submission.value,
                    fees=submission.tx.fees.replacing(going),
                )
                logger.warning(
                    "relayer %s: nonce %d %s below the going fee; replacing %s by %s",
                    self.address,
                    submission.tx.nonce,
                    "was lost" if not found else f"waited {now - submission.sent_at:.0f} s",
                    submission.tx.hash,
                    replacement.hash,
                )
                await self._rebroadcast(submission, replacement, "replaced")

    async def _fill_foreign_gap(self, mined: int, pending: int) -> None:
        """A nonce nobody sent (a process of this account stopped between taking a nonce and
        sending it), with transactions of ours waiting behind it: fill it once it has been the
        lowest unmined nonce for a reconcile interval."""
        now = self._monotonic()
        if self._stalled[0] != mined:
            self._stalled = (mined, now)
            return
        blocked = pending == mined and any(nonce > mined for nonce in self._pending)
        overdue = now - self._stalled[1] >= self.reconcile_interval
        if blocked and overdue and not self._nonces.taken(mined):
            logger.warning(
                "relayer %s: nonce %d was never sent and holds later ones back; filling it", self.address, mined
            )
            await self._fill(mined)

    async def _fill(self, nonce: int) -> None:
        """Use ``nonce`` up with a zero-value transfer to the relayer itself."""
        tx = await self._signer.sign(nonce, self.address, b"", gas=21_000, value=0, fees=await self._fees.going())
        filler = Submission(self.address, b"", 21_000, 0, None, tx, [tx.hash])
        self._nonces.broadcasting.add(nonce)
        try:
            await self._sending.broadcast(tx)
        except RpcError as exc:
            message = exc.message.lower()
            if not any(marker in message for marker in NONCE_ERRORS):  # else: taken after all
                logger.warning("relayer %s: could not fill nonce %d: %s", self.address, nonce, exc.message)
            self._nonces.stale = True
            return
        except Exception:
            logger.warning("relayer %s: could not fill nonce %d", self.address, nonce, exc_info=True)
            self._nonces.stale = True
            return
        finally:
            self._nonces.broadcasting.discard(nonce)
        self._sending.track(filler)
        self._counts["filler"].inc()
        logger.info("relayer %s: filled nonce %d with %s", self.address, nonce, tx.hash)

    async def _rebroadcast(self, submission: Submission, tx: SignedTransaction, result: str) -> None:
        try:
            await self._sending.broadcast(tx)
        except RpcError as exc:
            message = exc.message.lower()
            if not any(marker in message for marker in KNOWN):
                # "nonce too low": mined or displaced meanwhile, which the next round sorts out;
                # a fee too low: the next round offers the going fees, read afresh.
                logger.info("relayer %s: nonce %d: %s", self.address, tx.nonce, exc.message)
                if "fee" in message or "underpriced" in message:
                    await self._fees.refresh()
                return
        if tx is not submission.tx:
            submission.tx = tx
            submission.hashes.append(tx.hash)
            self._sending.remember(tx.hash, submission)
        submission.sent_at = self._monotonic()
        self._counts[result].inc()

    async def _resend_under_new_nonce(self, submission: Submission) -> None:
        if not self._nonces.ready:
            await self._sending.resync()
        nonce = self._nonces.allocate()
        try:
            fees = await self._fees.going()
            tx = await self._signer.sign(
                nonce, submission.to, submission.data, gas=submission.gas, value=submission.value, fees=fees
            )
        except Exception as exc:  # the node or the signer: nothing was sent under it
            self._sending.release(nonce)
            self.displaced.append(submission)  # the next round tries again
            logger.warning("relayer %s: cannot send %s again now: %s", self.address, submission.hashes[0], exc)
            return
        self._nonces.broadcasting.add(nonce)
        try:
            await self._sending.broadcast(tx)
        except RpcError as exc:
            self._sending.release(nonce)
            self._nonces.stale = True
            self.displaced.append(submission)  # the next round tries again
            logger.warning("relayer %s: sending %s again failed: %s", self.address, submission.hashes[0], exc.message)
            return
        finally:
            self._nonces.broadcasting.discard(nonce)
        submission.tx = tx
        submission.hashes.append(tx.hash)
        self._sending.track(submission)
        self._counts["resent"].inc()

    def _still_valid(self, submission: Submission) -> bool:
        return submission.valid_until is None or submission.valid_until > self._clock() + VALIDITY_MARGIN

    def _give_up(self, submission: Submission, reason: str) -> None:
        logger.warning("relayer %s: giving up %s: %s", self.address, submission.hashes[0], reason)
        if self._pending.get(submission.tx.nonce) is submission:
            del self._pending[submission.tx.nonce]
        self._counts["dropped"].inc()
        self._receipts.fail(submission.hashes, TransactionDropped(submission.hashes[0], reason))
