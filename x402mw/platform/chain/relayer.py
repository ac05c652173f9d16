"""The relayer: the platform's gas-paying account, which submits settlement transactions.

It allocates nonces itself so that many transactions can be in flight at once without a round trip
per send, signs EIP-1559 transactions locally, and resolves receipts through one shared poller that
asks the node for every awaited transaction in a single batch.

>>> relayer = Relayer(rpc, key, chain_id=31337)  # doctest: +SKIP
>>> await relayer.start()  # doctest: +SKIP
>>> await relayer.simulate(token, calldata)  # raises RevertError("authorization is expired")  # doctest: +SKIP
>>> receipt = await relayer.wait_for_receipt(await relayer.send(token, calldata))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

import rlp
from coincurve import PrivateKey
from eth_abi.abi import decode as abi_decode
from eth_abi.exceptions import DecodingError
from eth_account import Account

from x402mw.evm.keccak import keccak256
from x402mw.platform.batching import Coalescer
from x402mw.platform.chain.rpc import JsonRpc, RpcError
from x402mw.platform.metrics import RELAYER_TRANSACTIONS

__all__ = ["Relayer", "RevertError", "TxReceipt", "simulated"]

logger = logging.getLogger(__name__)

_ERROR_SELECTOR = "08c379a0"  # Error(string)
_NONCE_ERRORS = (
    "nonce too low",
    "nonce too high",
    "already known",
    "known transaction",
    "already imported",
    "replacement transaction underpriced",
    "invalid nonce",
)
_FEE_TTL = 15.0
_POLL_MIN = 0.01
_POLL_MAX = 1.0
_BATCH_LIMIT = 256
_GAP_GRACE = 0.05


class RevertError(Exception):
    """A transaction or call reverted; ``reason`` is the decoded ``Error(string)`` or the node's text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class TxReceipt:
    transaction_hash: str
    status: int
    block_number: int
    block_hash: str
    gas_used: int

    @classmethod
    def from_json(cls, receipt: dict[str, Any]) -> TxReceipt:
        return cls(
            transaction_hash=str(receipt["transactionHash"]),
            status=int(receipt["status"], 16),
            block_number=int(receipt["blockNumber"], 16),
            block_hash=str(receipt["blockHash"]),
            gas_used=int(receipt["gasUsed"], 16),
        )


@dataclass
class _Waiter:
    confirmations: int
    future: asyncio.Future[TxReceipt]


async def simulated(simulation: Awaitable[Any]) -> None:
    """Wait for a simulation (:meth:`Relayer.simulate_soon`); :class:`RevertError` with the decoded
    reason if the call would revert."""
    try:
        await simulation
    except RpcError as exc:
        reason = revert_reason(exc)
        if reason is None:
            raise
        raise RevertError(reason) from None


class Relayer:
    """Sends transactions from one account over one :class:`JsonRpc`.

    Concurrent :meth:`send` calls never share a nonce: each takes the next local nonce and submits
    without yielding in between, so submissions leave in nonce order. A nonce whose transaction the
    node rejected is handed to the next send, and "nonce too low"/"already known" answers trigger a
    resync from the node's pending count and one retry.
    """

    def __init__(self, rpc: JsonRpc, private_key: bytes, *, chain_id: int) -> None:
        self._rpc = rpc
        # Simulations of concurrent settlements go to the node as one JSON-RPC batch; a batch in which
        # one call reverts is split by the Coalescer, so each caller gets its own revert. Two batches
        # may be out at once (a node serves them in parallel): a burst need not wait for the one before.
        self._calls: Coalescer[tuple[str, list[Any]], Any] = Coalescer(rpc.batch, max_batch=64, flushes=2)
        self._account = Account.from_key(private_key)
        self.address: str = self._account.address
        self.chain_id = chain_id
        self._next_nonce: int | None = None
        self._released: list[int] = []
        self._inflight: set[int] = set()
        self._resync_due = False
        self._resync_lock = asyncio.Lock()
        self._max_fee = 0
        self._priority_fee = 0
        self._fees_at = 0.0
        self._fee_lock = asyncio.Lock()
        self._waiting: dict[str, list[_Waiter]] = {}
        self._fresh: set[str] = set()  # awaited since the last look at receipts
        self._head = -1  # the newest block number seen
        self._wake = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None
        self._signer = PrivateKey(private_key)
        self._outbox: list[tuple[str, str, asyncio.Future[str]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._gap_filler: asyncio.Task[None] | None = None
        self._sent = RELAYER_TRANSACTIONS.labels(f"eip155:{chain_id}", "sent")
        self._refused = RELAYER_TRANSACTIONS.labels(f"eip155:{chain_id}", "refused")

    def __repr__(self) -> str:
        return f"Relayer(address={self.address!r}, chain_id={self.chain_id})"

    async def start(self) -> None:
        """Read the account's pending nonce and the current fees."""
        await self._resync()
        await self._refresh_fees()

    async def simulate(self, to: str, data: bytes) -> None:
        """Run the call from the relayer's address against the latest block; raise :class:`RevertError`
        with the decoded reason if it would revert."""
        await simulated(self.simulate_soon(to, data))

    def simulate_soon(self, to: str, data: bytes) -> asyncio.Future[Any]:
        """Queue the simulation now (it joins the next JSON-RPC batch) and return at once; pass the
        future to :func:`simulated` for the outcome. Cancel it if the outcome is no longer wanted."""
        call = {"from": self.address, "to": to, "data": "0x" + data.hex()}
        return self._calls.enqueue(("eth_call", [call, "latest"]))

    async def send(self, to: str | None, data: bytes, *, gas: int = 120_000, value: int = 0) -> str:
        """Sign and submit an EIP-1559 transaction (``to=None`` creates a contract); return its hash.

        The transaction is not awaited: pass the hash to :meth:`wait_for_receipt`.
        """
        if self._next_nonce is None or self._resync_due:
            await self._resync()
        if time.monotonic() - self._fees_at > _FEE_TTL:
            await self._refresh_fees()
        for attempt in range(2):
            nonce = self._allocate()
            raw, local_hash = self._sign(nonce, to, data, gas, value)
            self._inflight.add(nonce)
            try:
                sent = await self._submit("0x" + raw.hex(), local_hash)
            except RpcError as exc:
                message = exc.message.lower()
                if "already known" in message or "already imported" in message:
                    self._sent.inc()
                    return local_hash  # an earlier attempt of this very transaction got through
                if attempt == 0 and any(marker in message for marker in _NONCE_ERRORS):
                    logger.info("relayer %s: nonce %d refused (%s); resyncing", self.address, nonce, exc.message)
                    await self._resync()
                    continue
                self._release(nonce)  # the node refused the transaction, so its nonce is still free
                self._refused.inc()
                raise
            except BaseException:
                self._resync_due = True  # the node may or may not have taken it: ask next time
                raise
            finally:
                self._inflight.discard(nonce)
            self._sent.inc()
            return str(sent)
        raise AssertionError("unreachable")  # pragma: no cover

    def _sign(self, nonce: int, to: str | None, data: bytes, gas: int, value: int) -> tuple[bytes, str]:
        # EIP-1559 envelope signed with coincurve directly: byte-identical to eth-account's
        # sign_transaction (both use RFC 6979 nonces and low s), at a tenth of the cost.
        fields = [
            self.chain_id,
            nonce,
            self._priority_fee,
            self._max_fee,
            gas,
            bytes.fromhex(to[2:]) if to is not None else b"",
            value,
            data,
            [],
        ]
        digest = keccak256(b"\x02" + rlp.encode(fields))
        signature = self._signer.sign_recoverable(digest, hasher=None)
        r, s, y_parity = signature[:32], signature[32:64], signature[64]
        raw = b"\x02" + rlp.encode([*fields, y_parity, int.from_bytes(r, "big"), int.from_bytes(s, "big")])
        return raw, "0x" + keccak256(raw).hex()

    async def _submit(self, raw_hex: str, tx_hash: str) -> str:
        # Sends that are ready in the same turn of the event loop leave as one JSON-RPC batch, in
        # the order they were signed (that is, in nonce order).
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._outbox.append((raw_hex, tx_hash, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._outbox:
            items, self._outbox = self._outbox, []
            try:
                hashes = await self._rpc.batch([("eth_sendRawTransaction", [raw]) for raw, _, _ in items])
            except RpcError:
                await self._submit_one_by_one(items)
            except BaseException as exc:
                for _, _, future in items:
                    if not future.done():
                        future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                for (_, _, future), sent in zip(items, hashes, strict=True):
                    if not future.done():
                        future.set_result(str(sent))

    async def _submit_one_by_one(self, items: list[tuple[str, str, asyncio.Future[str]]]) -> None:
        # Some transaction of the batch was refused: learn which of them the node has, and send the
        # others again one at a time so that each gets its own answer.
        known = await self._rpc.batch([("eth_getTransactionByHash", [tx_hash]) for _, tx_hash, _ in items])
        for (raw, tx_hash, future), found in zip(items, known, strict=True):
            if future.done():
                continue
            if found:
                future.set_result(tx_hash)
                continue
            try:
                future.set_result(str(await self._rpc.request("eth_sendRawTransaction", [raw])))
            except Exception as exc:
                future.set_exception(exc)

    async def wait_for_receipt(self, tx_hash: str, *, confirmations: int = 0, timeout: float = 60.0) -> TxReceipt:
        """Wait until ``tx_hash`` is mined (and, with ``confirmations``, until the head is that many
        blocks past it); return its receipt, whatever its status. Raise :class:`TimeoutError`."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(confirmations, loop.create_future())
        key = tx_hash.lower()
        self._waiting.setdefault(key, []).append(waiter)
        self._fresh.add(key)
        self._wake.set()
        if self._poller is None or self._poller.done():
            self._poller = loop.create_task(self._poll(), name=f"x402mw-receipts-{self.address}")
        try:
            return await asyncio.wait_for(waiter.future, timeout)
        finally:
            waiters = self._waiting.get(key)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self._waiting[key]

    async def aclose(self) -> None:
        for task in (self._gap_filler, self._flusher):
            if task is not None and not task.done():
                await asyncio.wait([task], timeout=5)
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        for waiters in self._waiting.values():
            for waiter in waiters:
                waiter.future.cancel()
        self._waiting.clear()

    def _allocate(self) -> int:
        assert self._next_nonce is not None
        while self._released:
            nonce = heapq.heappop(self._released)
            if nonce < self._next_nonce and nonce not in self._inflight:
                return nonce
        nonce = self._next_nonce
        while nonce in self._inflight:
            nonce += 1
        self._next_nonce = nonce + 1
        return nonce

    def _release(self, nonce: int) -> None:
        if self._next_nonce is not None and nonce == self._next_nonce - 1:
            self._next_nonce = nonce
            return
        # Later nonces are already out: the next send takes this one, and if none comes soon a
        # zero-value transfer to ourselves fills it, so the later transactions are not stuck.
        heapq.heappush(self._released, nonce)
        if self._gap_filler is None or self._gap_filler.done():
            self._gap_filler = asyncio.get_running_loop().create_task(self._fill_gaps())

    async def _fill_gaps(self) -> None:
        await asyncio.sleep(_GAP_GRACE)
        while self._released and self._next_nonce is not None:
            nonce = heapq.heappop(self._released)
            if nonce >= self._next_nonce or nonce in self._inflight:
                continue
            raw, tx_hash = self._sign(nonce, self.address, b"", 21_000, 0)
            self._inflight.add(nonce)
            try:
                await self._submit("0x" + raw.hex(), tx_hash)
                logger.info("relayer %s: filled nonce gap %d with %s", self.address, nonce, tx_hash)
            except Exception:
                logger.warning("relayer %s: could not fill nonce gap %d", self.address, nonce, exc_info=True)
                self._resync_due = True
            finally:
                self._inflight.discard(nonce)

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

    async def _resync(self) -> None:
        async with self._resync_lock:
            pending = await self._rpc.request("eth_getTransactionCount", [self.address, "pending"])
            self._next_nonce = int(pending, 16)
            self._released.clear()
            self._resync_due = False

    async def _refresh_fees(self) -> None:
        async with self._fee_lock:
            if time.monotonic() - self._fees_at <= _FEE_TTL and self._max_fee:
                return
            block, tip = await self._rpc.batch([("eth_getBlockByNumber", ["latest", False]), ("eth_gasPrice", [])])
            base_fee = int(block.get("baseFeePerGas") or "0x0", 16)
            try:
                priority = int(await self._rpc.request("eth_maxPriorityFeePerGas", []), 16)
            except RpcError:
                priority = max(int(tip, 16) - base_fee, 0)
            self._priority_fee = max(priority, 1)
            self._max_fee = 2 * base_fee + self._priority_fee
            self._fees_at = time.monotonic()

    async def _poll(self) -> None:
        interval = _POLL_MIN
        while self._waiting:
            self._wake.clear()
            try:
                await self._poll_once()
            except Exception:
                logger.warning("relayer %s: receipt poll failed", self.address, exc_info=True)
            if not self._waiting:
                break
            try:
                await asyncio.wait_for(self._wake.wait(), interval)
            except TimeoutError:
                interval = min(interval * 1.5, _POLL_MAX)
            else:
                interval = _POLL_MIN

    async def _poll_once(self) -> None:
        # Receipts only change with a new block: a poll asks for the head, and for the receipts of
        # every awaited transaction when it moved, else only of those awaited since the last look.
        head = int(await self._rpc.request("eth_blockNumber", []), 16)
        moved, self._head = head != self._head, head
        hashes = list(self._waiting) if moved else [h for h in self._fresh if h in self._waiting]
        self._fresh.clear()  # those still awaited are in hashes
        results: list[Any] = []
        for start in range(0, len(hashes), _BATCH_LIMIT):
            chunk = hashes[start : start + _BATCH_LIMIT]
            results += await self._rpc.batch([("eth_getTransactionReceipt", [h]) for h in chunk])
        for tx_hash, found in zip(hashes, results, strict=True):
            if not found or found.get("blockNumber") is None:
                continue
            receipt = TxReceipt.from_json(found)
            for waiter in self._waiting.get(tx_hash, ()):
                if waiter.future.done():
                    continue
                if waiter.confirmations <= 0 or head >= receipt.block_number + waiter.confirmations:
                    waiter.future.set_result(receipt)


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


def revert_reason(error: RpcError) -> str | None:
    """The revert reason in a node's error answer to ``eth_call``/``eth_estimateGas``, or ``None``
    when the error is not a revert."""
    data: Any = error.data
    if isinstance(data, dict):
        data = data.get("data")
    if isinstance(data, str) and data[2:10].lower() == _ERROR_SELECTOR:
        try:
            return str(abi_decode(["string"], bytes.fromhex(data[10:]))[0])
        except (ValueError, DecodingError):
            # A malformed Error(string) payload: the node's own message below still names the revert.
            logger.debug("undecodable revert data %s", data[:200])
    if error.code == 3 or "revert" in error.message.lower():
        return error.message.removeprefix("execution reverted").lstrip(": ") or "execution reverted"
    return None
