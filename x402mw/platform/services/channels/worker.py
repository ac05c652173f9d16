"""The channels' on-chain work, done by the worker in batches, off the requests' path:

- claims: the latest voucher of every channel charged beyond what was claimed, many channels a
  ``claimWithSignature`` transaction (up to `CLAIM_BATCH`; one per receiver authorizer), signed by
  the merchant's receiver authorizer, once a channel has been idle `claim_after` or a withdrawal
  of it began (the escrow lets a claim land until the withdrawal finalizes);
- settles: one ``settle(receiver, token)`` per receiver and token with claims not paid out;
- cooperative refunds: of channels whose payer asked (`ChannelService.refund_channel`) or idle
  past their endpoint's ``idleRefundSeconds``;
- withdrawals: the escrow's ``WithdrawInitiated`` events, read from a cursor, make their channels
  due for a claim at once.

Every transaction is recorded (``channel_transactions``) before it is sent and its effect written
only once its receipt says it succeeded; one whose outcome is unknown (the process stopped, the
receipt did not come) is looked at again. The escrow ignores a claim row at or below what was
claimed and a settle of nothing, so sending one again never moves money twice; a claim confirmed
and never settled is settled by the next pass: nothing is lost between the two.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, case, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from x402mw.evm.batch_settlement import (
    BATCH_SETTLEMENT_ADDRESS,
    ChannelDomain,
    VoucherClaim,
    channel_id,
    claim_batch_digest,
)
from x402mw.evm.eip712 import sign_digest
from x402mw.platform.chain.channels import (
    EVENTS,
    claim_with_signature_calldata,
    read_channel,
    read_receiver,
    settle_calldata,
)
from x402mw.platform.chain.rpc import RpcError
from x402mw.platform.chain.transactions import RevertError
from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.services.chains import ChainHandle, Chains
from x402mw.platform.services.channels import store
from x402mw.platform.services.channels.checks import ChannelRefusal
from x402mw.platform.services.channels.onchain import config_of
from x402mw.platform.services.channels.service import ChannelService
from x402mw.platform.services.outbox import record_event

logger = logging.getLogger("x402mw.platform.channels")

CLAIM_BATCH = 200
"""Channels claimed in one transaction at most."""
CLAIM_GAS_BASE = 120_000
CLAIM_GAS_ROW = 60_000
SETTLE_GAS = 150_000
UNKNOWN_AFTER = timedelta(minutes=2)
"""How long a transaction recorded without a hash (its process stopped while sending) is waited for."""


class ChannelWorker:
    """The channels' claims, settles, refunds and withdrawal watch (`run_once`)."""

    def __init__(
        self,
        engine: AsyncEngine,
        chains: Chains,
        clock: Clock,
        service: ChannelService,
        *,
        claim_after: timedelta = timedelta(seconds=30),
        receipt_wait: float = 20.0,
    ) -> None:
        self.engine = engine
        self.chains = chains
        self.clock = clock
        self.service = service
        self.claim_after = claim_after
        self.receipt_wait = receipt_wait
        self._cursors: dict[int, int] = {}

    async def run_once(self) -> None:
        await self.finish_sent()
        await self.watch_withdrawals()
        await self.claim()
        await self.settle()
        await self.refund_due()

    # -- claims ----------------------------------------------------------------------------------

    async def claim(self, *, everything: bool = False) -> list[str]:
        """Claim what is due (``everything``: every channel charged beyond its claims); the hashes of
        the transactions, each waited for."""
        table = tables.payment_channels
        now = self.clock.now()
        due = and_(table.c.charged > table.c.claimed, table.c.signature != "")
        if not everything:
            due = and_(due, (table.c.last_request_at <= now - self.claim_after) | (table.c.withdraw_requested_at > 0))
        async with self.engine.connect() as conn:
            rows = list(await conn.execute(select(table).where(due).order_by(table.c.last_request_at)))
        groups: dict[tuple[int, str], list[Any]] = defaultdict(list)
        for row in rows:
            groups[(row.chain_id, row.receiver_authorizer.lower())].append(row)
        sent = []
        for (chain_id, authorizer), members in groups.items():
            chain = self.chains.get(chain_id)
            key = await self.service.authorizers.key_of(authorizer)
            if chain is None or key is None:
                continue
            for start in range(0, len(members), CLAIM_BATCH):
                batch = members[start : start + CLAIM_BATCH]
                claims = [
                    VoucherClaim(
                        config_of(r), r.signed_max, bytes.fromhex(r.signature[2:]), min(r.charged, r.signed_max)
                    )
                    for r in batch
                ]
                data = claim_with_signature_calldata(claims, _sign(key, chain_id, claims))
                try:
                    await chain.relayer.simulate(BATCH_SETTLEMENT_ADDRESS, data)
                except (RevertError, RpcError) as exc:
                    # One row the chain no longer takes (a withdrawal drained its channel) must not
                    # hold up the others: each row capped at what its channel holds now.
                    logger.warning("channels: a claim of %d channel(s) would fail (%s); capping them", len(claims), exc)
                    claims = await self._capped(chain, claims)
                    if not claims:
                        continue
                    data = claim_with_signature_calldata(claims, _sign(key, chain_id, claims))
                ids = {"0x" + channel_id(ChannelDomain(chain_id), c.config).hex(): c for c in claims}
                rows_out = [[r.id, ids[r.id].total_claimed] for r in batch if r.id in ids]
                gas = CLAIM_GAS_BASE + CLAIM_GAS_ROW * len(claims)
                found = await self._send(chain, "claim", batch[0].receiver, batch[0].token, data, gas, rows_out)
                if found:
                    sent.append(found)
        return sent

    async def _capped(self, chain: ChainHandle, claims: list[VoucherClaim]) -> list[VoucherClaim]:
        """``claims`` each capped at what its channel holds on chain; those with nothing more to claim left out."""
        domain = ChannelDomain(chain.chain_id)
        kept = []
        for claim in claims:
            state = await read_channel(chain.rpc, channel_id(domain, claim.config))
            total = min(claim.total_claimed, state.balance)
            if total > state.total_claimed:
                kept.append(dataclasses.replace(claim, total_claimed=total))
        return kept

    # -- settles ---------------------------------------------------------------------------------

    async def settle(self) -> list[str]:
        """Pay out what was claimed and not settled, one transfer per receiver and token."""
        table = tables.payment_channels
        async with self.engine.connect() as conn:
            rows = list(await conn.execute(select(table).where(table.c.claimed > table.c.settled)))
        groups: dict[tuple[int, str, str], list[Any]] = defaultdict(list)
        for row in rows:
            groups[(row.chain_id, row.receiver, row.token)].append(row)
        sent = []
        for (chain_id, receiver, token), members in groups.items():
            chain = self.chains.get(chain_id)
            if chain is None:
                continue
            rows_out = [[r.id, r.claimed] for r in members]
            claimed, settled = await read_receiver(chain.rpc, receiver, token)
            if claimed == settled:  # paid out already (a settle whose record was lost): the chain says so
                async with self.engine.begin() as conn:
                    await self._apply(conn, "settle", rows_out, None)
                continue
            found = await self._send(
                chain, "settle", receiver, token, settle_calldata(receiver, token), SETTLE_GAS, rows_out
            )
            if found:
                sent.append(found)
        return sent

    # -- refunds and withdrawals -------------------------------------------------------------------

    async def refund_due(self) -> int:
        """Refund the channels whose payer asked, or idle past their endpoint's refund time; how many."""
        channels, endpoints = tables.payment_channels, tables.agent_endpoints
        now = self.clock.now()
        query = (
            select(channels, endpoints.c.channel_idle_refund_seconds)
            .join(endpoints, endpoints.c.id == channels.c.endpoint_id)
            .where(channels.c.balance > channels.c.charged, channels.c.hold_id.is_(None))
        )
        async with self.engine.connect() as conn:
            rows = list(await conn.execute(query))
        done = 0
        for row in rows:
            idle = row.channel_idle_refund_seconds
            asked = row.refund_asked is not None
            if not asked and (idle is None or row.last_request_at > now - timedelta(seconds=idle)):
                continue
            try:
                transaction, amount = await self.service.refund_channel(row, row.refund_asked or None)
            except ChannelRefusal as refusal:
                logger.info("channel %s: no refund: %s", row.id, refusal.message)
                async with self.engine.begin() as conn:
                    await conn.execute(update(channels).where(channels.c.id == row.id).values(refund_asked=None))
                continue
            async with self.engine.begin() as conn:
                await self._event(
                    conn, row, "channel.refunded", {"transaction": transaction, "amountMinor": str(amount)}
                )
            done += 1
        return done

    async def watch_withdrawals(self) -> None:
        """Read the escrow's ``WithdrawInitiated`` events since the last look: their channels are
        claimed at once (the next `claim`)."""
        for chain in self.chains:
            head = int(await chain.rpc.request("eth_blockNumber", []), 16)
            start = self._cursors.get(chain.chain_id, max(0, head - 5_000))
            if start > head:
                continue
            logs = await chain.rpc.request(
                "eth_getLogs",
                [
                    {
                        "address": BATCH_SETTLEMENT_ADDRESS,
                        "fromBlock": hex(start),
                        "toBlock": hex(head),
                        "topics": ["0x" + EVENTS["WithdrawInitiated"].hex()],
                    }
                ],
            )
            self._cursors[chain.chain_id] = head + 1
            # The event says a withdrawal began; what stands now (a refund may have cancelled it
            # since) is the chain's to say: each of our channels it names is read again.
            for channel in sorted({str(log["topics"][1]).lower() for log in logs or []}):
                if await store.load(self.engine, channel) is None:
                    continue  # not a channel of ours
                state = await read_channel(chain.rpc, bytes.fromhex(channel[2:]))
                await store.mirror(self.engine, channel, state, self.clock.now())

    # -- transactions ------------------------------------------------------------------------------

    async def _send(
        self, chain: ChainHandle, kind: str, receiver: str, token: str, data: bytes, gas: int, rows: list[list[Any]]
    ) -> str | None:
        """Record, send and wait for one transaction; its hash (None if it could not be sent)."""
        record = new_id()
        txs = tables.channel_transactions
        now = self.clock.now()
        async with self.engine.begin() as conn:
            await conn.execute(
                txs.insert(),
                {
                    "id": record,
                    "kind": kind,
                    "chain_id": chain.chain_id,
                    "receiver": receiver,
                    "token": token,
                    "transaction": "",
                    "status": "sending",
                    "amount": 0,
                    "rows": rows,
                    "created_at": now,
                    "updated_at": now,
                },
            )
        try:
            transaction = await chain.relayer.send(BATCH_SETTLEMENT_ADDRESS, data, gas=gas)
        except (RpcError, OSError) as exc:
            logger.warning("channels: %s of %d channel(s) not sent: %s", kind, len(rows), exc)
            async with self.engine.begin() as conn:
                await conn.execute(update(txs).where(txs.c.id == record).values(status="failed", updated_at=now))
            return None
        async with self.engine.begin() as conn:
            await conn.execute(update(txs).where(txs.c.id == record).values(transaction=transaction, status="sent"))
        await self._finish(chain, record, kind, transaction, rows)
        return transaction

    async def finish_sent(self) -> None:
        """Look again at the transactions whose outcome is not recorded."""
        txs = tables.channel_transactions
        async with self.engine.connect() as conn:
            rows = list(await conn.execute(select(txs).where(txs.c.status.in_(("sending", "sent")))))
        for row in rows:
            chain = self.chains.get(row.chain_id)
            if chain is None:
                continue
            if row.status == "sending":  # its process stopped while sending: sent again by the next pass
                if row.created_at <= self.clock.now() - UNKNOWN_AFTER:
                    async with self.engine.begin() as conn:
                        await conn.execute(update(txs).where(txs.c.id == row.id).values(status="failed"))
                continue
            await self._finish(chain, row.id, row.kind, row.transaction, row.rows)

    async def _finish(
        self, chain: ChainHandle, record: str, kind: str, transaction: str, rows: list[list[Any]]
    ) -> None:
        txs = tables.channel_transactions
        try:
            receipt = await chain.wait_for(transaction, timeout=self.receipt_wait)
        except TimeoutError:
            return  # pending: looked at again by the next pass
        status = "confirmed" if receipt.status == 1 else "failed"
        amount = 0
        if status == "confirmed" and kind == "settle":
            amount = settled_amount(await self._logs(chain, receipt.transaction_hash))
        # The outcome and its effect on the channels in one transaction: whichever process records
        # it first (this one, or another's pass over unfinished transactions) writes both.
        async with self.engine.begin() as conn:
            changed = await conn.execute(
                update(txs)
                .where(txs.c.id == record, txs.c.status.in_(("sending", "sent")))
                .values(status=status, amount=amount, transaction=receipt.transaction_hash, updated_at=self.clock.now())
            )
            if changed.rowcount == 1 and status == "confirmed":
                await self._apply(conn, kind, rows, receipt.transaction_hash)

    async def _logs(self, chain: ChainHandle, transaction: str) -> list[Any]:
        found = await chain.rpc.request("eth_getTransactionReceipt", [transaction])
        return list(found["logs"]) if found else []

    async def _apply(self, conn: AsyncConnection, kind: str, rows: list[list[Any]], transaction: str | None) -> None:
        """Write a confirmed claim's or settle's effect on its channels, with their events, in ``conn``'s
        transaction (each total only ever grows)."""
        table = tables.payment_channels
        now = self.clock.now()
        column = table.c.claimed if kind == "claim" else table.c.settled
        event = "channel.claimed" if kind == "claim" else "channel.settled"
        for channel, value in rows:
            row = (await conn.execute(select(table).where(table.c.id == channel))).first()
            if row is None:
                continue
            values: dict[str, Any] = {column.name: value, "updated_at": now}
            if kind == "claim":
                values["total_claimed"] = case((table.c.total_claimed < value, value), else_=table.c.total_claimed)
            done = await conn.execute(update(table).where(table.c.id == channel, column < value).values(**values))
            if done.rowcount == 1:
                before = row.claimed if kind == "claim" else row.settled
                data = {"transaction": transaction or "", "amountMinor": str(value - before), "totalMinor": str(value)}
                await self._event(conn, row, event, data)

    async def _event(self, conn: AsyncConnection, row: Any, type_: str, data: dict[str, Any]) -> None:
        payload = {
            "channel": {
                "id": row.id,
                "endpointId": row.endpoint_id,
                "network": f"eip155:{row.chain_id}",
                "payer": row.payer,
                "receiver": row.receiver,
                "currency": row.currency,
                **data,
            }
        }
        await record_event(
            conn,
            merchant_id=row.merchant_id,
            livemode=bool(row.livemode),
            type=type_,
            data=payload,
            at=self.clock.now(),
        )


def _sign(key: bytes, chain_id: int, claims: list[VoucherClaim]) -> bytes:
    return sign_digest(key, claim_batch_digest(ChannelDomain(chain_id), claims))


def settled_amount(logs: list[Any]) -> int:
    topic = "0x" + EVENTS["Settled"].hex()
    total = 0
    for log in logs:
        if str(log["address"]).lower() == BATCH_SETTLEMENT_ADDRESS.lower() and str(log["topics"][0]).lower() == topic:
            total += int(str(log["data"]), 16)
    return total
