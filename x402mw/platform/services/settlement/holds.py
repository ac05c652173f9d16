"""Held payments, for every scheme: captured (settled) or released by their id, the second step of
the two that pay for work done before it is settled (``POST /agent/settlements/{id}/capture`` and
``/release``). The first step, the hold, is settlement's (`Payments.settle`).

Two kinds of payment are held, each verified, simulated and claimed before the work runs, nothing
sent: an ``exact`` payment of a paid MCP tool (``held``: captured for its amount once the tool
succeeded, or released when it failed) and an ``upto`` payment of a metered route (``authorized``:
captured for the usage its handler reported, 0 up to the signed ceiling). A capture takes the
payment once (``held``/``authorized`` -> ``claimed``, with its amount), then sends, waits and
releases it as any settlement (`Sender.execute`). The payment's row keeps everything
the transfer needs (`transfer_of`), so a capture carries nothing but the id and the amount.

One capture settles a payment: a capture sent again, or a second one, gets the outcome of the first
(whatever amount it names). A held payment whose authorization ran out meanwhile is not sent: it is
recorded ``failed`` (``..._valid_before`` for an ``exact`` hold, ``permit2_deadline_expired`` for an
``upto`` one), as the worker records those nobody captured (`Recovery.finish_left`), so that a
capture answers the same whichever of the two came first.

A paid tool's payment that failed is released (`Holds.release`): its claim is deleted, nothing was
taken, and the same authorization may be used again. An ``upto`` authorization is not released: its
handler's failure is a capture of 0.
"""

from __future__ import annotations

import time
from typing import Literal

from x402mw.platform.db.models import AgentPayment
from x402mw.platform.services.settlement.checks import MIN_VALIDITY_SECONDS, PaymentRefusal
from x402mw.platform.services.settlement.outcomes import (
    Claimed,
    SettleOutcome,
    authorization_key,
    failed,
    outcome_for,
    unavailable,
)
from x402mw.platform.services.settlement.service import SettlementService
from x402mw.platform.services.settlement.transfers import transfer_of
from x402mw.protocol import reasons

HELD = ("held", "authorized")
"""The statuses of a payment held for a capture: an exact payment's, an upto payment's."""


class Holds:
    """Captures and releases of held payments, on a `SettlementService` (its writes, sending and recovery)."""

    def __init__(self, service: SettlementService) -> None:
        self.service = service

    async def capture(
        self, merchant_id: str | None, payment_id: str, amount: int | None, *, wait_seconds: float
    ) -> SettleOutcome | None:
        """Settle the held payment ``payment_id`` of ``merchant_id`` (None: the facilitator's own) for
        ``amount`` atomic units: an upto payment's usage (required, at most its ceiling), or an exact
        payment's held amount (None, or that amount). Its outcome, waited for up to
        ``wait_seconds`` (pending after that); None when the merchant has no such payment (never
        held, or released). A held payment whose authorization ran out is recorded failed, and
        answered so (as a payment the worker recorded failed is). `PaymentRefusal` for an amount it
        cannot take: nothing was done."""
        service = self.service
        started = time.perf_counter()
        valid_until = int(service.clock.time()) + MIN_VALIDITY_SECONDS
        row = await service.writes.capture(payment_id, merchant_id, amount, valid_until)
        if row is None:  # not taken: why, from the record
            row = await service.writes.find(payment_id)
            if row is None or row.merchant_id != merchant_id:
                return None
            network = _network(service, row)
            if row.status in HELD:
                _amount(row, amount)  # the refusal of an amount it cannot take
                if row.valid_before is not None and row.valid_before < valid_until:
                    return service.counted(network, await self._expired(row, network))
                if row.scheme == "exact" and amount is not None:  # its own amount, named
                    return await self.capture(merchant_id, payment_id, None, wait_seconds=wait_seconds)
                found = await service.writes.find(payment_id)  # taken by another capture, or released, meanwhile
                if found is None:
                    return None
                if found.status in HELD:  # not taken, for no reason it shows: try again later
                    return service.counted(network, unavailable(network))
                row = found
            return service.counted(network, await service.join(row, network, wait_seconds))
        network = _network(service, row)
        return service.counted(network, await self._send(row, network, started, wait_seconds))

    async def release(self, merchant_id: str, payment_id: str) -> AgentPayment | Literal["released"] | None:
        """Give up a held payment (its tool failed): its claim is deleted, nothing was taken, and the
        same authorization may be used again. ``released``; the payment as it stands if it is not
        held (being settled, or settled); None if the merchant has no such payment."""
        writes = self.service.writes
        existing = await writes.load(payment_id)
        if existing is None or existing.merchant_id != merchant_id:
            return None
        if existing.status == "held" and await writes.release(payment_id, status="held"):
            return "released"
        return await writes.load(payment_id) or "released"

    async def _send(self, row: Claimed, network: str, started: float, wait_seconds: float) -> SettleOutcome:
        service = self.service
        chain = service.chains.get(row.chain_id)
        if chain is None:  # no longer served here: left to a process that serves it (recovery)
            return outcome_for(row)
        if row.scheme == "upto" and row.amount_minor == 0:  # nothing to move: settled for 0, no transaction
            return await service.releases.release(row, None, "", started, started, started, None)
        transfer = transfer_of(row, chain.domain(row.asset))
        assert transfer is not None  # a held payment keeps its signature
        # An exact hold is simulated again (time passed while its tool ran); an upto payment was
        # simulated for its whole ceiling, and a payer whose balance fell since is refused by the chain.
        work = service.sender.execute(
            row, chain, transfer, started, network=network, simulate=service.simulate and row.scheme == "exact"
        )
        return await service.run_settlement(_key(row), row.id, network, wait_seconds, work)

    async def _expired(self, row: Claimed, network: str) -> SettleOutcome:
        """The answer for a held payment whose authorization ran out: recorded failed (as the worker
        records those it finds first), so that this capture and any later one answer the same."""
        if row.scheme == "upto":
            reason, message = reasons.PERMIT2_DEADLINE_EXPIRED, "the permit expired before its usage was settled"
        else:
            reason, message = (
                reasons.INVALID_VALID_BEFORE,
                "the authorization expired before the tool's payment was settled",
            )
        if not await self.service.writes.expire_hold(row.id, row.status, reason):
            found = await self.service.writes.find(row.id)  # captured, released or expired meanwhile
            if found is None:
                return failed(network, reason, message)
            return await self.service.join(found, network, 0)
        return failed(network, reason, message, payment_id=row.id)


def _network(service: SettlementService, row: Claimed) -> str:
    chain = service.chains.get(row.chain_id)
    return chain.network.caip2 if chain is not None else f"eip155:{row.chain_id}"


def _amount(row: Claimed, amount: int | None) -> int:
    """The amount a capture of ``row`` settles, or `PaymentRefusal`."""
    if row.scheme == "upto":
        if amount is None:
            raise PaymentRefusal(reasons.INVALID_PAYLOAD, "an upto payment is captured for an amount: its usage")
        if amount < 0 or amount > (row.ceiling_minor or 0):
            raise PaymentRefusal(
                reasons.UPTO_SETTLEMENT_EXCEEDS_AMOUNT,
                f"the amount {amount} is not from 0 to the signed ceiling {row.ceiling_minor}",
            )
        return amount
    if amount is not None and amount != row.amount_minor:
        raise PaymentRefusal(
            reasons.INVALID_PAYLOAD,
            f"an exact payment is captured for its held amount, {row.amount_minor}, not {amount}",
        )
    return row.amount_minor


def _key(row: Claimed) -> str:
    return authorization_key(row.chain_id, row.asset, row.payer, bytes.fromhex(row.nonce[2:]))
