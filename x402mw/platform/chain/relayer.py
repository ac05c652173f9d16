"""The relayer: the platform's gas-paying account, which submits settlement transactions and keeps
them moving until they are mined.

It allocates nonces itself (`nonces`) so that many transactions can be in flight at once without a
round trip per send, prices them (`fees`) and signs them locally (`transactions`), submits them
(this module), and resolves receipts through one shared poller (`receipts`). A node can lose
transactions (a restart drops its pool), hold them behind a nonce nobody sent, or leave them
waiting at a fee below the going one; the relayer heals each of these by itself (`healing`: sent
again, replaced at a higher fee, sent under a new nonce, a gap filled, or given up with
`TransactionDropped`), in `Relayer.reconcile`, run on errors, on timeouts and every
`RECONCILE_INTERVAL` while anything is in flight.

Several processes may share the account: a node's "nonce too low" or "replacement underpriced"
makes the sender resync and take the next nonce.

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
from typing import Any

import httpx
from eth_account import Account

from x402mw.evm.keccak import keccak256
from x402mw.platform.batching import Coalescer
from x402mw.platform.chain.fees import FeeOracle
from x402mw.platform.chain.healing import (
    KNOWN,
    NONCE_ERRORS,
    Healer,
    Sending,
    Submission,
)
from x402mw.platform.chain.nonces import NonceBook
from x402mw.platform.chain.receipts import ReceiptPoller
from x402mw.platform.chain.rpc import JsonRpc, RpcError
from x402mw.platform.chain.transactions import (
    RevertError,
    SignedTransaction,
    TransactionSigner,
    TxReceipt,
    simulated,
)
from x402mw.platform.metrics import RELAYER_NONCE_RESYNCS, RELAYER_TRANSACTIONS

logger = logging.getLogger(__name__)

RECONCILE_INTERVAL = 1.0
"""Seconds between two reconciliations while transactions are in flight (or the node is down)."""
IDLE_RECONCILE_INTERVAL = 5.0
"""Seconds between two reconciliations while nothing is in flight."""
STUCK_AFTER = 10.0
"""A transaction priced below the going fees this many seconds after it was sent is replaced."""

_UNREACHABLE = (httpx.TransportError, OSError, TimeoutError)
_POOL_FULL = ("txpool is full", "account limit exceeded", "in-flight transaction limit")  # geth; hosted providers
_FEE_TOO_LOW = "less than block base fee"  # geth: "max fee per gas less than block base fee"; anvil alike
_SEND_ATTEMPTS = 8
_FINISHED_KEPT = 100_000  # hashes of finished transactions remembered, for late waiters


class ChainUnavailable(Exception):
    """The node cannot be reached; nothing was sent."""


class RelayerBusy(ChainUnavailable):
    """Every account that could send is at its limit of transactions in flight (ours, or the node's
    for one sender: geth's ``txpool is full``); nothing was sent. Worth trying again in a moment."""


class Relayer:
    """Sends transactions from one account over one :class:`JsonRpc`.

    Concurrent :meth:`send` calls never share a nonce: each takes the next local nonce and submits
    without yielding in between, so submissions leave in nonce order (in one JSON-RPC batch when
    they are ready in the same turn of the event loop).

    ``available`` is False while the node cannot be reached (a send or a reconciliation failed to
    connect); it is True again after the next reconciliation that reaches it. Healing is its
    `x402mw.platform.chain.healing.Healer`'s, which shares its book of transactions in flight.
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
        self._signer = TransactionSigner(private_key, chain_id=chain_id)
        self._fees = FeeOracle(rpc)
        self._receipts = ReceiptPoller(rpc, name=f"x402mw-receipts-{self.address}", on_mined=self._mined)
        self._pending: dict[int, Submission] = {}  # by nonce: sent, not yet seen mined
        self._nonces = NonceBook(self._pending)
        self._by_hash: OrderedDict[str, Submission] = OrderedDict()  # every version of every submission
        self._resync_lock = asyncio.Lock()
        self._reconcile_lock = asyncio.Lock()
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
        sending = Sending(self._broadcast, self._track, self._remember, self._release, self._resync)
        self._healer = Healer(
            rpc,
            self._signer,
            self._fees,
            self._nonces,
            self._pending,
            self._receipts,
            sending,
            address=self.address,
            counts=self._counts,
            reconcile_interval=reconcile_interval,
            stuck_after=stuck_after,
            clock=clock,
        )

    def __repr__(self) -> str:
        return f"Relayer(address={self.address!r}, chain_id={self.chain_id})"

    @property
    def reconcile_interval(self) -> float:
        """Seconds between two reconciliations while transactions are in flight."""
        return self._healer.reconcile_interval

    @property
    def stuck_after(self) -> float:
        """Seconds after which a transaction priced below the going fees is replaced."""
        return self._healer.stuck_after

    @property
    def addresses(self) -> list[str]:
        """The accounts that send (this one)."""
        return [self.address]

    @property
    def in_flight(self) -> int:
        """Transactions sent (or being sent) and not yet seen mined."""
        return len(self._pending) + len(self._nonces.broadcasting) + len(self._healer.displaced)

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
            submission = Submission(to, data, gas, value, valid_until, tx, [tx.hash])
            self._nonces.broadcasting.add(nonce)
            try:
                await self._broadcast(tx)
            except RpcError as exc:
                message = exc.message.lower()
                if any(marker in message for marker in KNOWN):
                    self._track(submission)  # an earlier attempt of this very transaction got through
                    return tx.hash
                if any(marker in message for marker in NONCE_ERRORS) and await self._node_has(tx):
                    self._track(submission)  # sent before, by a broadcast whose answer was lost
                    return tx.hash
                if any(marker in message for marker in NONCE_ERRORS):
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

    def _track(self, submission: Submission) -> None:
        submission.sent_at = time.monotonic()
        self._pending[submission.tx.nonce] = submission
        for tx_hash in submission.hashes:
            self._remember(tx_hash, submission)

    def _remember(self, tx_hash: str, submission: Submission) -> None:
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
            self._pending.get(submission.tx.nonce) is submission or submission in self._healer.displaced
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
            self._gap_filler = asyncio.get_running_loop().create_task(self._healer.fill_released())

    async def _resync(self) -> None:
        async with self._resync_lock:
            pending = await self._rpc.request("eth_getTransactionCount", [self.address, "pending"])
            self._nonces.resync(int(pending, 16))

    # -- reconciling (the healing itself is the Healer's) ----------------------------------------

    def _ensure_reconciler(self) -> None:
        if self._closed:
            return
        if self._reconciler is None or self._reconciler.done():
            self._reconciler = asyncio.get_running_loop().create_task(
                self._reconcile_forever(), name=f"x402mw-relayer-{self.address}"
            )

    async def _reconcile_forever(self) -> None:
        while not self._closed:
            busy = bool(self._pending or self._healer.displaced) or not self.available
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.reconcile_interval if busy else IDLE_RECONCILE_INTERVAL):
                    await self._kick.wait()
            self._kick.clear()
            try:
                await self.reconcile()
            except Exception:
                logger.exception("relayer %s: reconciliation failed", self.address)

    async def reconcile(self) -> None:
        """Compare what the relayer has in flight with what the node holds, and mend the difference
        (`x402mw.platform.chain.healing`). Runs by itself; tests and tools may call it directly."""
        async with self._reconcile_lock:
            try:
                await self._reconcile()
            except (httpx.TransportError, OSError, TimeoutError) as exc:
                self._unreachable(exc)
                return

    async def _reconcile(self) -> None:
        mined, pending = await self.nonces()
        self.available = True
        await self._healer.heal(mined, pending)

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
