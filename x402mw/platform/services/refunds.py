"""Refunds: always the whole amount an order received, to the wallet that paid it, from the treasury.

Creating a refund is one transaction: it locks the order, inserts the refund holding the order (a
unique ``hold``: one live refund per order, whatever the concurrency) and reserves the amount from
the merchant's available balance (`ledger.apply_entry`, which refuses to go below zero: 422
``insufficient_balance``). Sending is done afterwards, by the request that created it and, should that
one stop, by the worker:

- the treasury signs an EIP-3009 authorization whose nonce is derived from the refund's id, and the
  relayer submits it (paying the gas). The token accepts an authorization once, so however often a
  refund is sent, its money moves once;
- ``processing`` → ``completed`` when the transfer has the chain's confirmations (the reservation
  is spent, the order becomes ``refunded``), or → ``failed`` with a reason (the reservation goes
  back to the available balance, and the order may be refunded again).

Events: ``refund.processing``, ``refund.completed``, ``refund.failed``, and ``payment_intent.refunded``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Row, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import address_of
from x402mw.platform.chain.token import authorization_state
from x402mw.platform.chain.transactions import RevertError
from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.models import new_id
from x402mw.platform.objects.payments import Refund, RefundEnvelope
from x402mw.platform.services.chains import ChainHandle, Chains
from x402mw.platform.services.deposits import DepositKeys, authorization_call, sweep_order
from x402mw.platform.services.errors import ServiceError
from x402mw.platform.services.ledger import InsufficientBalance, apply_entry
from x402mw.platform.services.merchants import newest_rows
from x402mw.platform.services.outbox import record_event
from x402mw.platform.services.payment_intents import amount_text, at_scale_of, transition
from x402mw.platform.services.watcher import address_topic
from x402mw.protocol.prices import format_amount

logger = logging.getLogger("x402mw.platform.refunds")

CLAIM = timedelta(seconds=20)  # by default: how long a sender owns a refund before another may take it over
AUTHORIZATION_USED_TOPIC = "0x" + keccak256(b"AuthorizationUsed(address,bytes32)").hex()


class RefundError(ServiceError):
    """A refund request the rules refuse (404, 409, 422)."""


def refund_of(row: Mapping[Any, Any]) -> Refund:
    """The public form of a refund: the API's ``refund`` and the events' ``data.refund``."""
    return Refund(
        id=row["id"],
        payment_id=row["payment_intent_id"],
        status=row["status"],
        amount=Decimal(amount_text(row)),
        currency=row["currency"],
        network=f"eip155:{row['chain_id']}",
        destination=row["destination"],
        reason=row["reason"],
        tx_hash=row["tx_hash"],
        failure_reason=row["failure_reason"],
        livemode=bool(row["livemode"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        completed_at=row["completed_at"],
    )


@dataclass
class RefundService:
    engine: AsyncEngine
    chains: Chains
    clock: Clock
    keys: DepositKeys
    treasury_key: bytes
    checkout_url_base: str
    claim: timedelta = CLAIM  # a refund's sender owns it this long; then another process may send it

    @property
    def treasury(self) -> str:
        return address_of(self.treasury_key)

    async def create(
        self, merchant_id: str, livemode: bool, payment_id: str, reason: str | None, *, wait: float = 10.0
    ) -> Refund:
        """Refund the order in full; the refund as it stands after up to ``wait`` seconds of sending.
        Raises `RefundError` (404, 409, 422)."""
        await self._chain_reachable(payment_id)
        refund = await self.reserve(merchant_id, livemode, payment_id, reason)
        try:
            async with asyncio.timeout(wait):
                await self.send(refund, wait=wait)
        except TimeoutError:  # the refund is reserved and recorded: the worker finishes it
            logger.warning("refund %s is not complete after %.0f s; the worker finishes it", refund["id"], wait)
            await self._release_claim(refund)
        except Exception:
            logger.exception("sending refund %s failed; the worker will retry", refund["id"])
        return refund_of(await self.get(refund["id"]))

    async def _chain_reachable(self, payment_id: str) -> None:
        """503 ``chain_unavailable`` when the chain the order was paid on cannot be reached: nothing
        is reserved for a refund that could not be sent."""
        intents = tables.payment_intents
        async with self.engine.connect() as conn:
            chain_id = await conn.scalar(select(intents.c.chain_id).where(intents.c.id == payment_id))
        chain = self.chains.get(int(chain_id)) if chain_id is not None else None
        if chain is not None and not await chain.relayer.probe():
            raise RefundError(
                503, "chain_unavailable", f"Chain {chain.chain_id} cannot be reached right now; retry shortly"
            )

    async def get(self, refund_id: str) -> Mapping[Any, Any]:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(tables.refunds).where(tables.refunds.c.id == refund_id))).mappings().one()
        return row

    async def reserve(self, merchant_id: str, livemode: bool, payment_id: str, reason: str | None) -> Mapping[Any, Any]:
        """Record a processing refund of the whole order and reserve its amount (one transaction); the
        caller then owns sending it for ``claim``. Raises `RefundError` (404, 409, 422)."""
        intents, refunds = tables.payment_intents, tables.refunds
        now = self.clock.now()
        try:
            async with self.engine.begin() as conn:
                order = (
                    (
                        await conn.execute(
                            select(intents)
                            .where(
                                intents.c.id == payment_id,
                                intents.c.merchant_id == merchant_id,
                                intents.c.livemode == livemode,
                            )
                            .with_for_update()
                        )
                    )
                    .mappings()
                    .first()
                )
                if order is None:
                    raise RefundError(404, "resource_missing", f"No such payment intent: '{payment_id}'", param="id")
                live = await conn.scalar(select(refunds.c.id).where(refunds.c.hold == payment_id))
                if live is not None or order["status"] == "refunded":
                    raise _already_refunded(live)
                if order["status"] != "succeeded":
                    raise RefundError(
                        409,
                        "payment_intent_unexpected_state",
                        f"Only a succeeded payment intent can be refunded; this one is {order['status']}",
                    )
                chain = self.chains.get(int(order["chain_id"]))
                asset = chain.asset(str(order["paid_currency"])) if chain else None
                if chain is None or asset is None:
                    raise RefundError(
                        409, "chain_unavailable", f"The platform no longer serves chain {order['chain_id']}"
                    )
                try:
                    row = await reserve_refund(
                        conn, order, token=asset.address, reason=reason, now=now, claim_until=now + self.claim
                    )
                except InsufficientBalance:
                    raise RefundError(
                        422,
                        "insufficient_balance",
                        f"The available {order['paid_currency']} balance on eip155:{chain.chain_id} cannot cover "
                        f"this refund of {format_amount(order['amount_received_minor'], 6)}",
                    ) from None
        except IntegrityError:  # another request created the refund first
            async with self.engine.connect() as conn:
                live = await conn.scalar(select(refunds.c.id).where(refunds.c.hold == payment_id))
            raise _already_refunded(live) from None
        return row

    async def resume_due(self, *, limit: int = 50) -> int:
        """Send the processing refunds nobody is sending (their claim ran out); how many were taken."""
        refunds = tables.refunds
        now = self.clock.now()
        async with self.engine.connect() as conn:
            due = list(
                (
                    await conn.execute(
                        select(refunds.c.id)
                        .where(refunds.c.status == "processing", refunds.c.locked_until <= now)
                        .limit(limit)
                    )
                ).scalars()
            )
        taken = 0
        for refund_id in due:
            async with self.engine.begin() as conn:
                claimed = await conn.execute(
                    update(refunds)
                    .where(refunds.c.id == refund_id, refunds.c.status == "processing", refunds.c.locked_until <= now)
                    .values(locked_until=now + self.claim, attempts=refunds.c.attempts + 1)
                )
            if claimed.rowcount == 1:
                taken += 1
                try:
                    wait = self.claim.total_seconds()
                    async with asyncio.timeout(wait):
                        await self.send(await self.get(refund_id), wait=wait)
                except Exception:
                    logger.exception("sending refund %s failed; will retry", refund_id)
        return taken

    async def send(self, refund: Mapping[Any, Any], *, wait: float) -> None:
        """Send a processing refund (or find that it was sent) and wait up to ``wait`` seconds for its
        confirmations; completes or fails it, or leaves it to the worker's next round."""
        chain = self.chains.get(int(refund["chain_id"]))
        if chain is None:
            return
        token = str(refund["token"])
        async with self.engine.connect() as conn:
            order = await _order(conn, str(refund["payment_intent_id"]))
        if order["swept_at"] is None and not await sweep_order(
            self.engine, chain, self.keys, self.treasury, order, self.clock.now()
        ):
            await self._release_claim(refund)
            return
        data, nonce, valid_before = authorization_call(
            chain,
            token,
            self.treasury_key,
            str(refund["destination"]),
            int(refund["amount_minor"]),
            b"x402mw refund:" + str(refund["id"]).encode(),
        )
        tx = refund["tx_hash"]
        if await authorization_state(chain.rpc, token, self.treasury, nonce):
            tx = await self._authorization_tx(chain, token, nonce) or tx  # sent before, its hash not kept
            if tx != refund["tx_hash"]:
                await self._update(refund, tx_hash=tx)
        elif tx is None or not await chain.rpc.request("eth_getTransactionByHash", [tx]):
            # Never sent, or its transaction vanished (a node that lost it, a sender that stopped):
            # send it (again). The authorization's nonce is the refund's, so it moves money once.
            try:
                await chain.relayer.simulate(token, data)
            except RevertError as exc:
                await self._fail(refund, f"the refund transfer would revert: {exc.reason}")
                return
            tx = await chain.relayer.send(token, data, valid_until=valid_before)
            await self._update(refund, tx_hash=tx)
        try:
            async with asyncio.timeout(wait):
                receipt = await chain.wait_for(str(tx), confirmations=chain.confirmations)
        except TimeoutError:
            await self._release_claim(refund)
            return
        if receipt.status == 1:
            # The version of the transfer that was mined: the relayer may have replaced the one sent
            # (at a higher fee, or under a new nonce), and the record names what moved the money.
            await self._complete(refund, receipt.transaction_hash)
        elif await authorization_state(chain.rpc, token, self.treasury, nonce):
            await self._complete(refund, await self._authorization_tx(chain, token, nonce) or str(tx))
        else:
            await self._fail(refund, f"the refund transaction {tx} reverted")

    async def _authorization_tx(self, chain: ChainHandle, token: str, nonce: bytes) -> str | None:
        query = {
            "fromBlock": "0x0",
            "toBlock": "latest",
            "address": [token],
            "topics": [AUTHORIZATION_USED_TOPIC, address_topic(self.treasury), "0x" + nonce.hex()],
        }
        logs = await chain.rpc.request("eth_getLogs", [query])
        return str(logs[0]["transactionHash"]) if logs else None

    async def _complete(self, refund: Mapping[Any, Any], tx: str | None) -> None:
        now = self.clock.now()
        async with self.engine.begin() as conn:
            row = await _end(conn, refund, status="completed", tx_hash=tx, completed_at=now, updated_at=now)
            if row is None:
                return
            await self._entry(conn, row, "refund_sent", 0, -int(refund["amount_minor"]), now)
            await self._event(conn, row, "completed", now)
            order = await _order(conn, str(refund["payment_intent_id"]))
            await transition(conn, order, "refunded", now, self.checkout_url_base)

    async def _fail(self, refund: Mapping[Any, Any], reason: str) -> None:
        now = self.clock.now()
        async with self.engine.begin() as conn:
            row = await _end(conn, refund, status="failed", failure_reason=reason[:500], hold=None, updated_at=now)
            if row is None:
                return
            amount = int(refund["amount_minor"])
            await self._entry(conn, row, "refund_released", amount, -amount, now)
            await self._event(conn, row, "failed", now)

    async def _update(self, refund: Mapping[Any, Any], **values: Any) -> None:
        async with self.engine.begin() as conn:
            refunds = tables.refunds
            await conn.execute(
                update(refunds).where(refunds.c.id == refund["id"]).values(**values, updated_at=self.clock.now())
            )

    async def _release_claim(self, refund: Mapping[Any, Any]) -> None:
        """Let the worker take the refund over on its next round."""
        await self._update(refund, locked_until=self.clock.now())

    async def _entry(
        self, conn: AsyncConnection, refund: Mapping[Any, Any], kind: str, available: int, reserved: int, at: datetime
    ) -> None:
        await _entry(conn, refund, kind, available, reserved, at)

    async def _event(self, conn: AsyncConnection, refund: Mapping[Any, Any], kind: str, at: datetime) -> None:
        await _event(conn, refund, kind, at)


async def reserve_refund(
    conn: AsyncConnection,
    order: Mapping[Any, Any],
    *,
    token: str,
    reason: str | None,
    now: datetime,
    claim_until: datetime,
) -> dict[str, Any]:
    """In ``conn``'s transaction, with ``order`` (succeeded) locked: record a processing refund of all
    it received, in ``token`` to its payer, reserve the amount from the merchant's available balance
    and write ``refund.processing``; the refund's row. Whoever sends it owns it until
    ``claim_until`` (the worker's `RefundService.resume_due` takes it then). Raises
    `InsufficientBalance` with nothing written, and ``IntegrityError`` when the order has a live
    refund already (the unique ``hold``)."""
    row: dict[str, Any] = {
        "id": new_id(),
        "merchant_id": order["merchant_id"],
        "livemode": order["livemode"],
        "payment_intent_id": order["id"],
        "hold": order["id"],
        "chain_id": int(order["chain_id"]),
        "currency": order["paid_currency"],
        "token": token,
        "amount_minor": order["amount_received_minor"],
        # at the scale the order was sent with (None: sent as a JSON number, answered plain)
        "amount_text": at_scale_of(order["amount_text"], order["amount_received_minor"])
        if order["amount_text"]
        else None,
        "destination": order["payer"],
        "reason": reason,
        "status": "processing",
        "failure_reason": None,
        "tx_hash": None,
        "attempts": 1,
        "locked_until": claim_until,
        "created_at": now,
        "updated_at": now,
        "completed_at": None,
    }
    await _entry(conn, row, "refund_reserved", -row["amount_minor"], row["amount_minor"], now)
    await conn.execute(tables.refunds.insert(), row)
    await _event(conn, row, "processing", now)
    return row


async def _entry(
    conn: AsyncConnection, refund: Mapping[Any, Any], kind: str, available: int, reserved: int, at: datetime
) -> None:
    await apply_entry(
        conn,
        merchant_id=refund["merchant_id"],
        livemode=refund["livemode"],
        chain_id=int(refund["chain_id"]),
        currency=str(refund["currency"]),
        kind=kind,
        reference_id=str(refund["id"]),
        available_delta=available,
        reserved_delta=reserved,
        at=at,
    )


async def _event(conn: AsyncConnection, refund: Mapping[Any, Any], kind: str, at: datetime) -> None:
    await record_event(
        conn,
        merchant_id=refund["merchant_id"],
        livemode=refund["livemode"],
        type=f"refund.{kind}",
        data=RefundEnvelope(refund=refund_of(refund)).model_dump(mode="json"),
        at=at,
    )


async def _end(conn: AsyncConnection, refund: Mapping[Any, Any], **values: Any) -> dict[Any, Any] | None:
    """Move a ``processing`` refund to its end state (``values``: its status and what comes with it),
    unlocked; the refund as it now stands, or None when it is no longer processing (another worker
    ended it first)."""
    refunds = tables.refunds
    done = await conn.execute(
        update(refunds)
        .where(refunds.c.id == refund["id"], refunds.c.status == "processing")
        .values(**values, locked_until=None)
    )
    return {**refund, **values} if done.rowcount == 1 else None


def _already_refunded(refund_id: str | None) -> RefundError:
    which = f" by refund {refund_id}" if refund_id else ""
    return RefundError(
        409, "payment_intent_already_refunded", f"This payment intent is already refunded or being refunded{which}"
    )


async def _order(conn: AsyncConnection, payment_id: str) -> Mapping[Any, Any]:
    intents = tables.payment_intents
    return (await conn.execute(select(intents).where(intents.c.id == payment_id))).mappings().one()


async def order_refunds(engine: AsyncEngine, payment_id: str) -> list[Row[Any]]:
    """The refunds of an order."""
    refunds = tables.refunds
    async with engine.connect() as conn:
        return list(await conn.execute(select(refunds).where(refunds.c.payment_intent_id == payment_id)))


async def newest_refunds(engine: AsyncEngine, merchant_id: str, livemode: bool, limit: int = 100) -> list[Row[Any]]:
    """The merchant's refunds of this mode, newest first."""
    return await newest_rows(engine, tables.refunds, merchant_id, livemode, limit)
