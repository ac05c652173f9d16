"""The relayer: the platform's gas-paying account, which submits settlement transactions and keeps
them moving until they are mined.

It allocates nonces itself (`nonces`) so that many transactions can be in flight at once without a
round trip per send, prices them (`fees`) and signs them locally (`transactions`), submits them
(this module), and resolves receipts through one shared poller (`receipts`). A node can lose
transactions (a restart drops its pool), hold them behind a nonce nobody sent, or leave them
waiting at a fee below the going one; the relayer heals each of these by itself
(`Relayer.reconcile`, run on errors, on timeouts and every `RECONCILE_INTERVAL` while anything is
in flight):

- a transaction the node no longer knows is sent again, byte for byte, while its call can still
  succeed (``valid_until``, an authorization's ``validBefore``); past that, its nonce is filled
  with a zero-value transfer to the relayer itself and the transaction is given up
  (`TransactionDropped`);
- a transaction whose nonce went to another transaction (a filler, or another process sharing the
  account) is sent again under a new nonce, or given up when it no longer can succeed;
- a nonce that nobody sent, with later transactions waiting behind it, is filled;
- a transaction left waiting at a fee below the going one is replaced by the same call at a
  higher fee (waiters get the receipt of whichever version is mined).

Nothing waits behind a gap for longer than one reconcile interval. Several processes may share the
account: a node's "nonce too low" or "replacement underpriced" makes the sender resync and take the
next nonce.

>>> relayer = Relayer(rpc, key, chain_id=31337)  # doctest: +SKIP
>>> await relayer.start()  # doctest: +SKIP
>>> await relayer.simulate(token, calldata)  # raises RevertError("authorization is expired")  # doctest: +SKIP
>>> receipt = await relayer.wait_for_receipt(await relayer.send(token, calldata))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from eth_account import Account

from x402mw.evm.keccak import keccak256
from x402mw.platform.batching import Coalescer
from x402mw.platform.chain.fees import FeeOracle
from x402mw.platform.chain.nonces import NonceBook
from x402mw.platform.chain.receipts import ReceiptPoller
from x402mw.platform.chain.rpc import JsonRpc, RpcError
from x402mw.platform.chain.transactions import (
    RevertError,
    SignedTransaction,
    TransactionSigner,
    TxReceipt,
    revert_reason,
    simulated,
)
from x402mw.platform.metrics import RELAYER_NONCE_RESYNCS, RELAYER_TRANSACTIONS

__all__ = [
    "RECONCILE_INTERVAL",
    "ChainUnavailable",
    "Relayer",
    "RelayerBusy",
    "RevertError",
    "TransactionDropped",
    "TxReceipt",
    "revert_reason",
    "simulated",
    "transact",
]

logger = logging.getLogger(__name__)

RECONCILE_INTERVAL = 1.0
"""Seconds between two reconciliations while transactions are in flight (or the node is down)."""
IDLE_RECONCILE_INTERVAL = 5.0
"""Seconds between two reconciliations while nothing is in flight."""
STUCK_AFTER = 10.0
"""A transaction priced below the going fees this many seconds after it was sent is replaced."""
VALIDITY_MARGIN = 3
"""Seconds a call must stay valid after it is sent again: time for it to be included."""

_NONCE_ERRORS = (
    "nonce too low",
    "nonce too high",
    "invalid nonce",
    "replacement transaction underpriced",
    "already known",
    "known transaction",
    "already imported",
)
_KNOWN = ("already known", "known transaction", "already imported")
_UNREACHABLE = (httpx.TransportError, OSError, TimeoutError)
_POOL_FULL = ("txpool is full", "account limit exceeded", "in-flight transaction limit")  # geth; hosted providers
_FEE_TOO_LOW = "less than block base fee"  # geth: "max fee per gas less than block base fee"; anvil alike
_SEND_ATTEMPTS = 8
_GAP_GRACE = 0.05
_FINISHED_KEPT = 100_000  # hashes of finished transactions remembered, for late waiters


class ChainUnavailable(Exception):
    """The node cannot be reached; nothing was sent."""


class RelayerBusy(ChainUnavailable):
    """Every account that could send is at its limit of transactions in flight (ours, or the node's
    for one sender: geth's ``txpool is full``); nothing was sent. Worth trying again in a moment."""


class TransactionDropped(Exception):
    """The relayer gave up a transaction: its call can no longer succeed (``valid_until`` passed)
    before the transaction could be mined. Nothing it would have done was done by it."""

    def __init__(self, tx_hash: str, reason: str) -> None:
        super().__init__(f"transaction {tx_hash} was dropped: {reason}")
        self.tx_hash = tx_hash
        self.reason = reason


@dataclass(eq=False)
class _Submission:
    """One call the relayer keeps sending until it is mined, as one or more signed transactions."""

    to: str | None
    data: bytes
    gas: int
    value: int
    valid_until: int | None  # unix time after which the call cannot succeed; None: always can
    tx: SignedTransaction  # the newest version
    hashes: list[str] = field(default_factory=list)  # every version, oldest first
    sent_at: float = 0.0  # time.monotonic() of the newest version's (re)broadcast

    @property
    def filler(self) -> bool:
        return not self.data and self.value == 0


class Relayer:
    """Sends transactions from one account over one :class:`JsonRpc`.

    Concurrent :meth:`send` calls never share a nonce: each takes the next local nonce and submits
    without yielding in between, so submissions leave in nonce order (in one JSON-RPC batch when
    they are ready in the same turn of the event loop).

    ``available`` is False while the node cannot be reached (a send or a reconciliation failed to
    connect); it is True again after the next reconciliation that reaches it.
    """

    def __init__(
        self,
        rpc: JsonRpc,
        private_key: bytes,
        *,
        chain_id: int,
        reconcile_interval: float = RECONCILE_INTERVAL,
        stuck_after: float = STUCK_AFTER,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._rpc = rpc
        # Simulations of concurrent settlements go to the node as one JSON-RPC batch; a batch in which
        # one call reverts is split by the Coalescer, so each caller gets its own revert. Two batches
        # may be out at once (a node serves them in parallel): a burst need not wait for the one before.
        self._calls: Coalescer[tuple[str, list[Any]], Any] = Coalescer(rpc.batch, max_batch=64, flushes=2)
        self.address: str = Account.from_key(private_key).address
        self.chain_id = chain_id
        self.reconcile_interval = reconcile_interval
        self.stuck_after = stuck_after
        self._clock = clock
        self._signer = TransactionSigner(private_key, chain_id=chain_id)
        self._fees = FeeOracle(rpc)
        self._receipts = ReceiptPoller(rpc, name=f"x402mw-receipts-{self.address}", on_mined=self._mined)
        self._pending: dict[int, _Submission] = {}  # by nonce: sent, not yet seen mined
        self._nonces = NonceBook(self._pending)
        self._displaced: list[_Submission] = []  # their nonce went to another transaction: to send again
        self._by_hash: OrderedDict[str, _Submission] = OrderedDict()  # every version of every submission
        self._resync_lock = asyncio.Lock()
        self._reconcile_lock = asyncio.Lock()
        self._stalled: tuple[int, float] = (-1, 0.0)  # the mined nonce, and since when it has not moved
        self._outbox: list[tuple[str, asyncio.Future[str]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._gap_filler: asyncio.Task[None] | None = None
        self._reconciler: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._closed = False
        self.available = True
        network = f"eip155:{chain_id}"
        self._counts = {result: RELAYER_TRANSACTIONS.labels(network, result) for result in _RESULTS}
        self._resyncs = RELAYER_NONCE_RESYNCS.labels(network, self.address)

    def __repr__(self) -> str:
        return f"Relayer(address={self.address!r}, chain_id={self.chain_id})"

    @property
    def addresses(self) -> list[str]:
        """The accounts that send (this one)."""
        return [self.address]

    @property
    def in_flight(self) -> int:
        """Transactions sent (or being sent) and not yet seen mined."""
        return len(self._pending) + len(self._nonces.broadcasting) + len(self._displaced)

    async def gas_cost(self, gas: int = 120_000) -> int:
        """What ``gas`` costs at most at the going fees, in wei."""
        return gas * (await self._fees.going()).max_fee

    async def start(self) -> None:
        """Read the account's pending nonce and the current fees; start reconciling in the background."""
        await self._resync()
        await self._fees.refresh()
        self._ensure_reconciler()

    # -- calls ------------------------------------------------------------------------------------

    async def simulate(self, to: str, data: bytes) -> None:
        """Run the call from the relayer's address against the latest block; raise :class:`RevertError`
        with the decoded reason if it would revert."""
        await simulated(self.simulate_soon(to, data))

    def simulate_soon(self, to: str, data: bytes) -> asyncio.Future[Any]:
        """Queue the simulation now (it joins the next JSON-RPC batch) and return at once; pass the
        future to :func:`simulated` for the outcome. Cancel it if the outcome is no longer wanted."""
        call = {"from": self.address, "to": to, "data": "0x" + data.hex()}
        future = self._calls.enqueue(("eth_call", [call, "latest"]))
        future.add_done_callback(self._heard)
        return future

    def _heard(self, call: asyncio.Future[Any]) -> None:
        # A call that could not reach the node says as much as a send that could not.
        if not call.cancelled() and isinstance(call.exception(), _UNREACHABLE):
            self._unreachable(call.exception() or ConnectionError())

    async def probe(self, *, timeout: float = 3.0) -> bool:
        """Ask the node for its head now (within ``timeout`` seconds); whether it answered. Sets
        ``available`` either way."""
        try:
            async with asyncio.timeout(timeout):
                await self._rpc.request("eth_blockNumber", [])
        except (*_UNREACHABLE, RpcError) as exc:
            self._unreachable(exc)
            return False
        self.available = True
        return True

    # -- sending ----------------------------------------------------------------------------------

    async def send(
        self, to: str | None, data: bytes, *, gas: int = 120_000, value: int = 0, valid_until: int | None = None
    ) -> str:
        """Sign and submit an EIP-1559 transaction (``to=None`` creates a contract); return its hash.

        The transaction is not awaited: pass the hash to :meth:`wait_for_receipt`, which answers
        with the receipt of whichever version of it is mined. ``valid_until`` (unix seconds) is when
        the call can no longer succeed (an authorization's ``validBefore``): the relayer stops
        sending it again after that. Raises :class:`ChainUnavailable` when the node cannot be
        reached, or when other senders of the account took every nonce tried (nothing was sent),
        :class:`RpcError` when the node refuses the transaction.
        Should the node fail to answer after the transaction went out, the hash is returned all
        the same: the transaction is in flight, and reconciliation sends it again if the node lost it.
        """
        self._ensure_reconciler()
        try:
            if not self._nonces.ready:
                await self._resync()
            fees = await self._fees.going()
        except (httpx.TransportError, OSError, TimeoutError) as exc:
            self._unreachable(exc)
            raise ChainUnavailable(f"the node at chain {self.chain_id} cannot be reached: {exc}") from exc
        for attempt in range(_SEND_ATTEMPTS):
            nonce = self._nonces.allocate()
            tx = self._signer.sign(nonce, to, data, gas=gas, value=value, fees=fees)
            submission = _Submission(to, data, gas, value, valid_until, tx, [tx.hash])
            self._nonces.broadcasting.add(nonce)
            try:
                await self._broadcast(tx)
            except RpcError as exc:
                message = exc.message.lower()
                if any(marker in message for marker in _KNOWN):
                    self._track(submission)  # an earlier attempt of this very transaction got through
                    return tx.hash
                if any(marker in message for marker in _NONCE_ERRORS) and await self._node_has(tx):
                    self._track(submission)  # sent before, by a broadcast whose answer was lost
                    return tx.hash
                if any(marker in message for marker in _NONCE_ERRORS):
                    if attempt + 1 == _SEND_ATTEMPTS:  # other senders of the account keep taking them
                        raise ChainUnavailable(f"no free nonce after {_SEND_ATTEMPTS} attempts: {exc.message}") from exc
                    logger.info("relayer %s: nonce %d refused (%s); resyncing", self.address, nonce, exc.message)
                    self._resyncs.inc()
                    await self._resync()
                    continue
                if any(marker in message for marker in _POOL_FULL):
                    self._release(nonce)  # the node holds as many of ours as it takes: nothing was sent
                    busy = f"the node takes no more transactions from {self.address} now: {exc.message}"
                    raise RelayerBusy(busy) from exc
                if attempt + 1 < _SEND_ATTEMPTS and _FEE_TOO_LOW in message:
                    self._release(nonce)
                    fees = await self._fees.refresh()  # the base fee outgrew the fees last read
                    continue
                self._release(nonce)  # the node refused the transaction, so its nonce is still free
                self._counts["refused"].inc()
                raise
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                self._release(nonce)  # the request never reached the node
                self._unreachable(exc)
                raise ChainUnavailable(f"the node at chain {self.chain_id} cannot be reached: {exc}") from exc
            except (httpx.TransportError, OSError, TimeoutError) as exc:
                # The node may or may not have taken it: it is in flight, and reconciliation finds out.
                logger.warning("relayer %s: sending nonce %d: %s; reconciling", self.address, nonce, exc)
                self._track(submission)
                self._kick.set()
                return tx.hash
            except BaseException:
                self._nonces.stale = True  # cancelled mid-send: the node may or may not have it
                raise
            finally:
                self._nonces.broadcasting.discard(nonce)
            self._track(submission)
            self._counts["sent"].inc()
            self.available = True
            return tx.hash
        raise AssertionError("unreachable")  # pragma: no cover

    async def _node_has(self, tx: SignedTransaction) -> bool:
        return bool(await self._rpc.request("eth_getTransactionByHash", [tx.hash]))

    def _track(self, submission: _Submission) -> None:
        submission.sent_at = time.monotonic()
        self._pending[submission.tx.nonce] = submission
        for tx_hash in submission.hashes:
            self._remember(tx_hash, submission)

    def _remember(self, tx_hash: str, submission: _Submission) -> None:
        self._by_hash[tx_hash] = submission
        self._by_hash.move_to_end(tx_hash)
        while len(self._by_hash) > _FINISHED_KEPT + len(self._pending):
            self._by_hash.popitem(last=False)

    async def _broadcast(self, tx: SignedTransaction) -> str:
        # Sends that are ready in the same turn of the event loop leave as one JSON-RPC batch, in
        # the order they were signed (that is, in nonce order).
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._outbox.append((tx.raw, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._outbox:
            items, self._outbox = self._outbox, []
            try:
                hashes = await self._rpc.batch([("eth_sendRawTransaction", [raw]) for raw, _ in items])
            except RpcError:
                await self._broadcast_one_by_one(items)
            except BaseException as exc:
                for _, future in items:
                    if not future.done():
                        future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                for (_, future), sent in zip(items, hashes, strict=True):
                    if not future.done():
                        future.set_result(str(sent))

    async def _broadcast_one_by_one(self, items: list[tuple[str, asyncio.Future[str]]]) -> None:
        # Some transaction of the batch was refused: learn which of them the node has, and send the
        # others again one at a time so that each gets its own answer.
        hashes = ["0x" + keccak256(bytes.fromhex(raw[2:])).hex() for raw, _ in items]
        known = await self._rpc.batch([("eth_getTransactionByHash", [tx_hash]) for tx_hash in hashes])
        for (raw, future), tx_hash, found in zip(items, hashes, known, strict=True):
            if future.done():
                continue
            if found:
                future.set_result(tx_hash)
                continue
            try:
                future.set_result(str(await self._rpc.request("eth_sendRawTransaction", [raw])))
            except Exception as exc:
                future.set_exception(exc)

    def knows(self, tx_hash: str) -> bool:
        """Whether ``tx_hash`` is a transaction (or a version of one) this relayer sent."""
        return tx_hash.lower() in self._by_hash

    def sending(self, tx_hash: str) -> bool:
        """Whether ``tx_hash`` is a transaction (or a version of one) this relayer is still sending."""
        submission = self._by_hash.get(tx_hash.lower())
        return submission is not None and (
            self._pending.get(submission.tx.nonce) is submission or submission in self._displaced
        )

    # -- receipts ---------------------------------------------------------------------------------

    async def wait_for_receipt(self, tx_hash: str, *, confirmations: int = 0, timeout: float = 60.0) -> TxReceipt:
        """Wait until ``tx_hash`` (or a version of it the relayer sent in its place) is mined and,
        with ``confirmations``, until the head is that many blocks past it; return the receipt of
        the version mined, whatever its status (its ``transaction_hash`` names it). Raise
        :class:`TimeoutError`, or :class:`TransactionDropped` when the relayer gave the
        transaction up."""
        key = tx_hash.lower()
        submission = self._by_hash.get(key)
        hashes = submission.hashes if submission is not None else [key]
        try:
            return await self._receipts.wait(hashes, confirmations=confirmations, timeout=timeout)
        except TimeoutError:
            self._kick.set()  # a wait that runs out is a sign to look at what the node holds
            raise

    def _mined(self, receipt: TxReceipt) -> None:
        submission = self._by_hash.get(receipt.transaction_hash)
        if submission is not None and self._pending.get(submission.tx.nonce) is submission:
            del self._pending[submission.tx.nonce]

    # -- nonces -----------------------------------------------------------------------------------

    async def nonces(self) -> tuple[int, int]:
        """The account's nonces on the node: ``(mined, pending)``. Transactions of the relayer are
        waiting to be mined while the two differ."""
        mined, pending = await self._rpc.batch(
            [
                ("eth_getTransactionCount", [self.address, "latest"]),
                ("eth_getTransactionCount", [self.address, "pending"]),
            ]
        )
        return int(mined, 16), int(pending, 16)

    def _release(self, nonce: int) -> None:
        # Should later nonces be out already, the next send takes this one, and if none comes soon
        # a zero-value transfer to ourselves fills it, so the later transactions are not stuck.
        if self._nonces.release(nonce) and (self._gap_filler is None or self._gap_filler.done()):
            self._gap_filler = asyncio.get_running_loop().create_task(self._fill_released())

    async def _fill_released(self) -> None:
        await asyncio.sleep(_GAP_GRACE)
        while (nonce := self._nonces.next_unfilled()) is not None:
            await self._fill(nonce)

    async def _resync(self) -> None:
        async with self._resync_lock:
            pending = await self._rpc.request("eth_getTransactionCount", [self.address, "pending"])
            self._nonces.resync(int(pending, 16))

    # -- healing ----------------------------------------------------------------------------------

    def _ensure_reconciler(self) -> None:
        if self._closed:
            return
        if self._reconciler is None or self._reconciler.done():
            self._reconciler = asyncio.get_running_loop().create_task(
                self._reconcile_forever(), name=f"x402mw-relayer-{self.address}"
            )

    async def _reconcile_forever(self) -> None:
        while not self._closed:
            busy = bool(self._pending or self._displaced) or not self.available
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self.reconcile_interval if busy else IDLE_RECONCILE_INTERVAL)
            self._kick.clear()
            try:
                await self.reconcile()
            except Exception:
                logger.exception("relayer %s: reconciliation failed", self.address)

    async def reconcile(self) -> None:
        """Compare what the relayer has in flight with what the node holds, and mend the difference
        (see the module's docstring). Runs by itself; tests and tools may call it directly."""
        async with self._reconcile_lock:
            try:
                await self._reconcile()
            except (httpx.TransportError, OSError, TimeoutError) as exc:
                self._unreachable(exc)
                return

    async def _reconcile(self) -> None:
        mined, pending = await self.nonces()
        self.available = True
        self._nonces.catch_up(pending)  # another process of this account sent those below it
        await self._settle_consumed(mined)
        await self._mend_waiting(mined)
        await self._fill_foreign_gap(mined, pending)

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
                    self._displaced.append(submission)  # not mined: another transaction took its nonce
        displaced, self._displaced = self._displaced, []
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
        now = time.monotonic()
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
                replacement = self._signer.sign(
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
        now = time.monotonic()
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
        tx = self._signer.sign(nonce, self.address, b"", gas=21_000, value=0, fees=await self._fees.going())
        filler = _Submission(self.address, b"", 21_000, 0, None, tx, [tx.hash])
        self._nonces.broadcasting.add(nonce)
        try:
            await self._broadcast(tx)
        except RpcError as exc:
            message = exc.message.lower()
            if not any(marker in message for marker in _NONCE_ERRORS):  # else: taken after all
                logger.warning("relayer %s: could not fill nonce %d: %s", self.address, nonce, exc.message)
            self._nonces.stale = True
            return
        except Exception:
            logger.warning("relayer %s: could not fill nonce %d", self.address, nonce, exc_info=True)
            self._nonces.stale = True
            return
        finally:
            self._nonces.broadcasting.discard(nonce)
        self._track(filler)
        self._counts["filler"].inc()
        logger.info("relayer %s: filled nonce %d with %s", self.address, nonce, tx.hash)

    async def _rebroadcast(self, submission: _Submission, tx: SignedTransaction, result: str) -> None:
        try:
            await self._broadcast(tx)
        except RpcError as exc:
            message = exc.message.lower()
            if not any(marker in message for marker in _KNOWN):
                # "nonce too low": mined or displaced meanwhile, which the next round sorts out;
                # a fee too low: the next round offers the going fees, read afresh.
                logger.info("relayer %s: nonce %d: %s", self.address, tx.nonce, exc.message)
                if "fee" in message or "underpriced" in message:
                    await self._fees.refresh()
                return
        if tx is not submission.tx:
            submission.tx = tx
            submission.hashes.append(tx.hash)
            self._remember(tx.hash, submission)
        submission.sent_at = time.monotonic()
        self._counts[result].inc()

    async def _resend_under_new_nonce(self, submission: _Submission) -> None:
        if not self._nonces.ready:
            await self._resync()
        nonce = self._nonces.allocate()
        fees = await self._fees.going()
        tx = self._signer.sign(
            nonce, submission.to, submission.data, gas=submission.gas, value=submission.value, fees=fees
        )
        self._nonces.broadcasting.add(nonce)
        try:
            await self._broadcast(tx)
        except RpcError as exc:
            self._release(nonce)
            self._nonces.stale = True
            self._displaced.append(submission)  # the next round tries again
            logger.warning("relayer %s: sending %s again failed: %s", self.address, submission.hashes[0], exc.message)
            return
        finally:
            self._nonces.broadcasting.discard(nonce)
        submission.tx = tx
        submission.hashes.append(tx.hash)
        self._track(submission)
        self._counts["resent"].inc()

    def _still_valid(self, submission: _Submission) -> bool:
        return submission.valid_until is None or submission.valid_until > self._clock() + VALIDITY_MARGIN

    def _give_up(self, submission: _Submission, reason: str) -> None:
        logger.warning("relayer %s: giving up %s: %s", self.address, submission.hashes[0], reason)
        if self._pending.get(submission.tx.nonce) is submission:
            del self._pending[submission.tx.nonce]
        self._counts["dropped"].inc()
        self._receipts.fail(submission.hashes, TransactionDropped(submission.hashes[0], reason))

    def _unreachable(self, exc: BaseException) -> None:
        if self.available:
            logger.warning("relayer %s: the node cannot be reached: %s", self.address, exc)
        self.available = False
        self._nonces.stale = True

    async def aclose(self) -> None:
        self._closed = True
        for task in (self._gap_filler, self._flusher):
            if task is not None and not task.done():
                await asyncio.wait([task], timeout=5)
        reconciler, self._reconciler = self._reconciler, None
        if reconciler is not None:
            reconciler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reconciler
        await self._receipts.aclose()


_RESULTS = ("sent", "refused", "rebroadcast", "replaced", "resent", "filler", "dropped")

# Administrative writes from one account over one connection run one at a time: see transact().
_write_locks: weakref.WeakKeyDictionary[JsonRpc, dict[str, asyncio.Lock]] = weakref.WeakKeyDictionary()


async def transact(
    rpc: JsonRpc, private_key: bytes, to: str | None, data: bytes, *, gas: int = 120_000, value: int = 0
) -> TxReceipt:
    """Send one transaction from ``private_key``, wait for it, and raise :class:`RevertError` if it
    reverts (with the reason, when a call made beforehand can tell it).

    For occasional writes from keys that no :class:`Relayer` owns (deploying, minting, funding):
    each takes a fresh nonce from the node, under a per-account lock.
    """
    address = Account.from_key(private_key).address
    lock = _write_locks.setdefault(rpc, {}).setdefault(address, asyncio.Lock())
    async with lock:
        chain_id = int(await rpc.request("eth_chainId", []), 16)
        sender = Relayer(rpc, private_key, chain_id=chain_id)
        try:
            await sender.start()
            if to is not None and data:
                await sender.simulate(to, data)
            receipt = await sender.wait_for_receipt(await sender.send(to, data, gas=gas, value=value))
        finally:
            await sender.aclose()
    if receipt.status != 1:
        raise RevertError(f"transaction {receipt.transaction_hash} reverted")
    return receipt
