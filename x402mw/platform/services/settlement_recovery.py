"""Finishing the settlements a stopped process left behind (a worker duty, `SettlementRecovery`).

A process records a payment ``claimed`` before it relays the transfer and ``submitted`` once the
transfer is out. Should it stop in between, the payment stays so; recovery looks at those older
than `RECOVER_AFTER` (a live process finishes its own long before) and settles them with the
transaction that used the authorization, or fails them when it is certain that none will.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import select

from x402mw.platform.chain.token import authorization_state, find_authorization_use
from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentPayment
from x402mw.protocol import reasons

if TYPE_CHECKING:
    from x402mw.platform.services.settlement import SettlementService

__all__ = ["RECOVER_AFTER", "SettlementRecovery"]

RECOVER_AFTER = timedelta(minutes=2)
"""A settlement still ``claimed`` or ``submitted`` this long after its claim was left by a process
that stopped."""


class SettlementRecovery:
    """Finishes what stopped processes left, for a `SettlementService` (its ``recovery``)."""

    def __init__(self, service: SettlementService) -> None:
        self.service = service
        # A payment left `claimed` with its authorization unused, by id: the relayer's pending nonce
        # when recovery first found it so (see finish_claimed).
        self._unused_since: dict[str, int] = {}

    async def finish_claimed(self) -> int:
        """Settle or release payments that a stopped process left ``claimed``: it may have sent the
        transfer without recording it. Each is looked up on the chain: an authorization used there
        is settled with the transaction that used it (found by its ``AuthorizationUsed`` log); one
        still unused is recorded failed, so that the same signature may be tried again, once no
        transfer the relayer had sent by then can still be waiting to be mined
        (`_nothing_pending_since`). Returns how many."""
        service = self.service
        finished = 0
        relayer_nonces: dict[int, tuple[int, int]] = {}  # read once per chain and round
        for row in await self._left("claimed"):
            chain = service.chains.get(row.chain_id)
            if chain is None:
                continue
            nonce = bytes.fromhex(row.nonce[2:])
            if not await authorization_state(chain.rpc, row.asset, row.payer, nonce):
                if chain.chain_id not in relayer_nonces:
                    relayer_nonces[chain.chain_id] = await chain.relayer.nonces()
                if self._nothing_pending_since(row.id, *relayer_nonces[chain.chain_id]):
                    await service.writes.failed(row.id, reasons.UNEXPECTED_SETTLE_ERROR)
                    finished += 1
                continue
            self._unused_since.pop(row.id, None)
            tx = await find_authorization_use(chain.rpc, row.asset, row.payer, nonce)
            if tx is None:  # used beyond the window searched, or canceled by the payer
                await service.writes.failed(row.id, reasons.NONCE_USED)
                finished += 1
                continue
            try:
                receipt = await chain.relayer.wait_for_receipt(tx, timeout=1.0)
            except TimeoutError:
                continue
            now = time.perf_counter()
            service.release(row, receipt.block_number, tx, now, now, now)
            finished += 1
        await service.drain()
        return finished

    async def finish_submitted(self) -> int:
        """Release settlements that a stopped process left ``submitted``, with their transaction's
        receipt, or fail them if it reverted. Returns how many it released or failed."""
        service = self.service
        finished = 0
        for row in await self._left("submitted"):
            chain = service.chains.get(row.chain_id)
            if chain is None or not row.transaction:
                continue
            try:
                receipt = await chain.relayer.wait_for_receipt(row.transaction, timeout=1.0)
            except TimeoutError:
                continue
            if service.finishing(row):
                continue  # this process finished it meanwhile
            if receipt.status == 1:
                now = time.perf_counter()
                service.release(row, receipt.block_number, row.transaction, now, now, now)
            else:
                await service.writes.failed(row.id, reasons.TRANSACTION_REVERTED, block=receipt.block_number)
            finished += 1
        await service.drain()
        return finished

    async def _left(self, status: str) -> list[AgentPayment]:
        """Payments in ``status`` older than `RECOVER_AFTER` that this process is not finishing."""
        table = tables.agent_payments
        cutoff = self.service.clock.now() - RECOVER_AFTER
        async with self.service.engine.connect() as conn:
            found = await conn.execute(select(table).where(table.c.status == status, table.c.created_at <= cutoff))
            rows = [AgentPayment.model_validate(dict(r)) for r in found.mappings()]
        return [row for row in rows if not self.service.finishing(row)]

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
