"""The deposit watcher: sees token transfers arrive at deposit addresses and moves orders along.

Each round, for each chain:

1. **scan** the blocks after the chain's cursor for ``Transfer`` logs of its tokens to the deposit
   addresses in use, record each once (unique chain, transaction, log index) and apply it to the
   order holding the address: ``amountReceived`` grows; the order goes to ``processing`` once it is
   covered; ``underpaid``, ``overpaid``, ``paid_late`` and ``wrong_asset`` are flagged;
2. **confirm** orders in ``processing``: a payment whose transaction is gone or moved to another block
   (a reorg) takes the order back to ``requires_payment`` (``payment_intent.reverted``); one with the
   chain's confirmations makes it ``succeeded`` and credits the merchant's balance. A reorg found in
   step 1 also reverts orders that had succeeded on transfers in the replaced blocks (their credit
   is taken back). The watcher's ``follower`` is told of each payment confirmed or reversed, in the
   transaction of the move (the platform's moves the subscription whose invoice the order pays);
3. **sweep** succeeded orders' deposit addresses to the treasury.

Several workers may run rounds at once: transfers count once, and every status change is conditional.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import to_checksum_address
from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.services.chains import ChainHandle, Chains
from x402mw.platform.services.deposits import DepositKeys, sweep_order
from x402mw.platform.services.ledger import InsufficientBalance, apply_entry
from x402mw.platform.services.payment_intents import OPEN_STATUSES, OrderFollower, transition

__all__ = ["TRANSFER_TOPIC", "DepositWatcher", "address_topic", "order_exceptions"]

logger = logging.getLogger("x402mw.platform.watcher")

TRANSFER_TOPIC = "0x" + keccak256(b"Transfer(address,address,uint256)").hex()
MAX_BLOCK_RANGE = 2_000
ADDRESSES_PER_QUERY = 500
REORG_DEPTH = 64  # how far back the watcher reads again when a block it read has changed
WATCH_AFTER_CLOSE = timedelta(days=30)  # late payments to closed orders are still seen this long


def address_topic(address: str) -> str:
    """An address as an indexed event argument (a 32-byte topic)."""
    return "0x" + "0" * 24 + address[2:].lower()


def order_exceptions(amount: int, received: int, *, late: bool, wrong_asset: bool) -> list[str]:
    """The ``exceptions`` field for an order of ``amount`` that has ``received`` (minor units)."""
    found = []
    if 0 < received < amount:
        found.append("underpaid")
    if received > amount:
        found.append("overpaid")
    if late and received:
        found.append("paid_late")
    if wrong_asset:
        found.append("wrong_asset")
    return found


@dataclass
class DepositWatcher:
    engine: AsyncEngine
    chains: Chains
    clock: Clock
    keys: DepositKeys
    treasury: str
    checkout_url_base: str
    follower: OrderFollower  # told of each payment confirmed or reversed, in the move's transaction

    def __post_init__(self) -> None:
        self._locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def run_once(self) -> None:
        for chain in self.chains:
            await self.scan(chain)
        await self.confirm()
        await self.sweep_due()

    async def start(self) -> None:
        """Set each new chain's cursor at its head: transfers from before the platform knew it are not ours."""
        for chain in self.chains:
            await self._cursor(chain)

    # -- 1. scan -------------------------------------------------------------------------------------

    async def scan(self, chain: ChainHandle) -> int:
        """Read the new blocks of ``chain``; how many transfers to deposit addresses were recorded."""
        async with self._locks[chain.chain_id]:
            head = int(await chain.rpc.request("eth_blockNumber", []), 16)
            cursor, known_hash = await self._cursor(chain, head)
            if known_hash is not None:
                block = await chain.rpc.request("eth_getBlockByNumber", [hex(cursor), False])
                if not block or block.get("hash") != known_hash:  # a reorg replaced the blocks we read
                    rewound = max(0, min(cursor, head) - REORG_DEPTH)
                    logger.warning("chain %s: block %d changed; reading again from %d", chain.chain_id, cursor, rewound)
                    await self._move_cursor(chain, rewound, None)
                    cursor = rewound
                    await self._recheck_succeeded(chain, rewound)
            tokens = [asset.address for asset in chain.network.assets.values()]
            taken = 0
            while cursor < head:
                end = min(head, cursor + MAX_BLOCK_RANGE)
                watched = await self._watched()
                logs: list[dict[str, Any]] = []
                for start in range(0, len(watched), ADDRESSES_PER_QUERY):
                    chunk = watched[start : start + ADDRESSES_PER_QUERY]
                    topics = [TRANSFER_TOPIC, None, [address_topic(address) for address in chunk]]
                    query = {"fromBlock": hex(cursor + 1), "toBlock": hex(end), "address": tokens, "topics": topics}
                    logs.extend(await chain.rpc.request("eth_getLogs", [query]))
                for log in sorted(logs, key=lambda item: (int(item["blockNumber"], 16), int(item["logIndex"], 16))):
                    taken += await self._take(chain, log)
                block = await chain.rpc.request("eth_getBlockByNumber", [hex(end), False])
                await self._move_cursor(chain, end, block.get("hash") if block else None)
                cursor = end
            return taken

    async def _cursor(self, chain: ChainHandle, head: int | None = None) -> tuple[int, str | None]:
        cursors = tables.chain_cursors
        async with self.engine.begin() as conn:
            found = (
                await conn.execute(
                    select(cursors.c.block_number, cursors.c.block_hash).where(cursors.c.chain_id == chain.chain_id)
                )
            ).first()
            if found is not None:
                return int(found[0]), found[1]
        if head is None:
            head = int(await chain.rpc.request("eth_blockNumber", []), 16)
        try:
            async with self.engine.begin() as conn:
                await conn.execute(
                    cursors.insert(), dict(chain_id=chain.chain_id, block_number=head, updated_at=self.clock.now())
                )
        except IntegrityError:
            return await self._cursor(chain, head)
        return head, None

    async def _move_cursor(self, chain: ChainHandle, number: int, block_hash: str | None) -> None:
        async with self.engine.begin() as conn:
            cursors = tables.chain_cursors
            await conn.execute(
                update(cursors)
                .where(cursors.c.chain_id == chain.chain_id)
                .values(block_number=number, block_hash=block_hash, updated_at=self.clock.now())
            )

    async def _watched(self) -> list[str]:
        intents = tables.payment_intents
        since = self.clock.now() - WATCH_AFTER_CLOSE
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(intents.c.deposit_address)
                .where(
                    intents.c.deposit_address.is_not(None),
                    intents.c.status.in_(OPEN_STATUSES) | (intents.c.updated_at >= since),
                )
                .distinct()
            )
            return [str(address) for address in rows.scalars()]

    async def _take(self, chain: ChainHandle, log: Mapping[Any, Any]) -> int:
        topics = log["topics"]
        to = to_checksum_address("0x" + topics[2][-40:])
        sender = to_checksum_address("0x" + topics[1][-40:])
        amount = int(log["data"], 16)
        token = to_checksum_address(log["address"])
        currency = next((a.symbol for a in chain.network.assets.values() if a.address.lower() == token.lower()), None)
        transfers, intents = tables.incoming_transfers, tables.payment_intents
        now = self.clock.now()
        try:
            async with self.engine.begin() as conn:
                seen = await conn.scalar(
                    select(transfers.c.id).where(
                        transfers.c.chain_id == chain.chain_id,
                        transfers.c.tx_hash == log["transactionHash"],
                        transfers.c.log_index == int(log["logIndex"], 16),
                        transfers.c.block_hash == log["blockHash"],
                    )
                )
                if seen is not None:
                    return 0
                open_first = case((intents.c.status.in_(OPEN_STATUSES), 0), else_=1)
                order = (
                    (
                        await conn.execute(
                            select(intents)
                            .where(intents.c.deposit_address == to)
                            .order_by(open_first, intents.c.created_at.desc())
                            .limit(1)
                            .with_for_update()
                        )
                    )
                    .mappings()
                    .first()
                )
                transfer_id = new_id()
                status = "unattributed"
                if order is not None:
                    status = await self._apply(conn, chain, order, transfer_id, currency, amount, sender, log, now)
                await conn.execute(
                    transfers.insert(),
                    dict(
                        id=transfer_id,
                        chain_id=chain.chain_id,
                        tx_hash=log["transactionHash"],
                        log_index=int(log["logIndex"], 16),
                        block_number=int(log["blockNumber"], 16),
                        block_hash=log["blockHash"],
                        token=token,
                        currency=currency,
                        from_address=sender,
                        to_address=to,
                        amount_minor=amount,
                        payment_intent_id=order["id"] if order is not None else None,
                        status=status,
                        created_at=now,
                    ),
                )
        except IntegrityError:
            return 0  # another worker recorded this transfer first
        return 1

    async def _apply(
        self,
        conn: AsyncConnection,
        chain: ChainHandle,
        order: Mapping[Any, Any],
        transfer_id: str,
        currency: str | None,
        amount: int,
        sender: str,
        log: Mapping[Any, Any],
        now: datetime,
    ) -> str:
        """Apply one transfer to ``order``; the transfer's status."""
        intents = tables.payment_intents
        late = order["status"] in ("expired", "canceled") or "paid_late" in order["exceptions"]
        wrong = (
            currency is None
            or currency not in order["accepted_currencies"]
            or order["paid_currency"] not in (None, currency)
            or order["chain_id"] not in (None, chain.chain_id)
        )
        if wrong:
            flags = order_exceptions(order["amount_minor"], order["amount_received_minor"], late=late, wrong_asset=True)
            await conn.execute(
                update(intents).where(intents.c.id == order["id"]).values(exceptions=flags, updated_at=now)
            )
            return "wrong_asset"
        received = order["amount_received_minor"] + amount
        changes: dict[str, Any] = {
            "amount_received_minor": received,
            "paid_currency": currency,
            "chain_id": chain.chain_id,
            "payer": order["payer"] or sender,
            "exceptions": order_exceptions(
                order["amount_minor"], received, late=late, wrong_asset="wrong_asset" in order["exceptions"]
            ),
        }
        if received >= order["amount_minor"] and order["status"] in ("requires_payment", "expired", "canceled"):
            changes.update(tx_hash=log["transactionHash"], paid_at=now)
            await transition(conn, order, "processing", now, self.checkout_url_base, changes)
            return "counted"
        await conn.execute(update(intents).where(intents.c.id == order["id"]).values(**changes, updated_at=now))
        if order["status"] in ("succeeded", "refunded"):  # more money for an order already paid: credit it
            await apply_entry(
                conn,
                merchant_id=order["merchant_id"],
                livemode=order["livemode"],
                chain_id=chain.chain_id,
                currency=str(currency),
                kind="payment",
                reference_id=transfer_id,
                available_delta=amount,
                at=now,
            )
        return "counted"

    # -- 2. confirm ----------------------------------------------------------------------------------

    async def confirm(self, *, limit: int = 200) -> None:
        intents = tables.payment_intents
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(intents).where(intents.c.status == "processing").order_by(intents.c.updated_at).limit(limit)
            )
            orders = list(rows.mappings())
        for order in orders:
            chain = self.chains.get(int(order["chain_id"])) if order["chain_id"] is not None else None
            if chain is not None:
                try:
                    await self._confirm_one(chain, order)
                except Exception:
                    logger.exception("confirming order %s failed", order["id"])

    async def _confirm_one(self, chain: ChainHandle, order: Mapping[Any, Any], *, settled: bool = False) -> None:
        """Revert ``order`` if a transfer it counted is gone; else, unless it ``settled`` already,
        make it succeed once the transfers have their confirmations."""
        transfers = tables.incoming_transfers
        async with self.engine.connect() as conn:
            counted = list(
                (
                    await conn.execute(
                        select(transfers)
                        .where(transfers.c.payment_intent_id == order["id"], transfers.c.status == "counted")
                        .order_by(transfers.c.block_number, transfers.c.log_index)
                    )
                ).mappings()
            )
        gone = []
        for transfer in counted:
            receipt = await chain.rpc.request("eth_getTransactionReceipt", [transfer["tx_hash"]])
            if not receipt or receipt.get("blockHash") != transfer["block_hash"] or receipt.get("status") != "0x1":
                gone.append(transfer)
        now = self.clock.now()
        if gone:
            await self._revert(order, counted, gone, now)
            return
        if settled:
            return
        deepest = max((t["block_number"] for t in counted), default=0)
        head = int(await chain.rpc.request("eth_blockNumber", []), 16)
        missing = deepest + chain.confirmations - 1 - head
        if missing > 0 and chain.network.local:  # a local chain makes blocks only on demand
            for _ in range(missing):
                await chain.rpc.request("evm_mine", [])
            head += missing
        if head - deepest + 1 < chain.confirmations:
            return
        async with self.engine.begin() as conn:
            moved = await transition(conn, order, "succeeded", now, self.checkout_url_base)
            if moved is None:
                return
            for transfer in counted:
                await apply_entry(
                    conn,
                    merchant_id=order["merchant_id"],
                    livemode=order["livemode"],
                    chain_id=chain.chain_id,
                    currency=str(transfer["currency"]),
                    kind="payment",
                    reference_id=str(transfer["id"]),
                    available_delta=int(transfer["amount_minor"]),
                    at=now,
                )
            # The follower after the credit: one that refunds a payment nobody owes (an invoice voided
            # while the payment was on its way) reserves the refund from this very credit.
            await self.follower(conn, moved, order["status"], now, self.checkout_url_base)

    async def _recheck_succeeded(self, chain: ChainHandle, since_block: int) -> None:
        """After a reorg that replaced blocks above ``since_block``: orders that succeeded on transfers in
        those blocks whose transactions are gone (or in other blocks) are reverted, and their credit
        taken back. Done before the blocks are read again, so that a transaction the new blocks include
        once more counts again, as a new payment."""
        transfers, intents = tables.incoming_transfers, tables.payment_intents
        async with self.engine.connect() as conn:
            ids = list(
                (
                    await conn.execute(
                        select(transfers.c.payment_intent_id)
                        .join(intents, intents.c.id == transfers.c.payment_intent_id)
                        .where(
                            transfers.c.chain_id == chain.chain_id,
                            transfers.c.status == "counted",
                            transfers.c.block_number > since_block,
                            intents.c.status == "succeeded",
                        )
                        .distinct()
                    )
                ).scalars()
            )
            orders = list((await conn.execute(select(intents).where(intents.c.id.in_(ids)))).mappings()) if ids else []
        for order in orders:
            try:
                await self._confirm_one(chain, order, settled=True)
            except Exception:
                logger.exception("checking order %s after a reorg failed", order["id"])

    async def _revert(
        self,
        order: Mapping[Any, Any],
        counted: Sequence[Mapping[Any, Any]],
        gone: Sequence[Mapping[Any, Any]],
        now: datetime,
    ) -> None:
        """Take the transfers a reorg removed off the order; back to ``requires_payment`` unless the
        others still cover it. For an order that had succeeded, the credit of each removed transfer is
        taken back from the merchant's balance (``payment_reversed``)."""
        transfers, intents = tables.incoming_transfers, tables.payment_intents
        kept = [t for t in counted if t not in gone]
        received = int(order["amount_received_minor"]) - sum(int(t["amount_minor"]) for t in gone)
        changes: dict[str, Any] = {
            "amount_received_minor": received,
            "exceptions": order_exceptions(
                order["amount_minor"],
                received,
                late="paid_late" in order["exceptions"],
                wrong_asset="wrong_asset" in order["exceptions"],
            ),
        }
        if not kept:
            changes.update(payer=None, paid_currency=None, chain_id=None)
        settled = order["status"] == "succeeded"
        if settled:
            changes["swept_at"] = None  # the sweep went with the reorg, or sweeps what comes next
        async with self.engine.begin() as conn:
            if received >= order["amount_minor"]:
                changes["tx_hash"] = kept[-1]["tx_hash"]
                moved = await conn.execute(
                    update(intents)
                    .where(intents.c.id == order["id"], intents.c.status == order["status"])
                    .values(**changes, updated_at=now)
                )
                if moved.rowcount != 1:
                    return
            else:
                changes.update(tx_hash=None, paid_at=None)
                back = await transition(
                    conn, order, "requires_payment", now, self.checkout_url_base, changes, event="reverted"
                )
                if back is None:
                    return
                if settled:
                    await self.follower(conn, back, order["status"], now, self.checkout_url_base)
            await conn.execute(
                update(transfers).where(transfers.c.id.in_([t["id"] for t in gone])).values(status="reverted")
            )
            for transfer in gone if settled else ():
                await self._take_back(conn, order, transfer, now)

    async def _take_back(
        self, conn: AsyncConnection, order: Mapping[Any, Any], transfer: Mapping[Any, Any], now: datetime
    ) -> None:
        """Debit a reverted transfer's credit; what the balance cannot cover (a refund spent it) is logged."""
        try:
            await apply_entry(
                conn,
                merchant_id=order["merchant_id"],
                livemode=order["livemode"],
                chain_id=int(transfer["chain_id"]),
                currency=str(transfer["currency"]),
                kind="payment_reversed",
                reference_id=str(transfer["id"]),
                available_delta=-int(transfer["amount_minor"]),
                at=now,
            )
        except InsufficientBalance:
            logger.error(
                "order %s: a reorg reversed %s minor units of %s, more than the merchant's available balance",
                order["id"],
                transfer["amount_minor"],
                transfer["currency"],
            )

    # -- 3. sweep ------------------------------------------------------------------------------------

    async def sweep_due(self, *, limit: int = 50) -> None:
        intents = tables.payment_intents
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(intents)
                .where(
                    intents.c.status.in_(("succeeded", "refunded")),
                    intents.c.swept_at.is_(None),
                    intents.c.chain_id.is_not(None),
                )
                .limit(limit)
            )
            orders = list(rows.mappings())
        for order in orders:
            chain = self.chains.get(int(order["chain_id"]))
            if chain is None:
                continue
            try:
                await sweep_order(self.engine, chain, self.keys, self.treasury, order, self.clock.now())
            except Exception:
                logger.exception("sweeping order %s failed", order["id"])
