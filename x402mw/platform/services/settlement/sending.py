"""Sending a claimed payment's transfer: the payer's wallet deployed if it must be, the transfer
simulated (or its simulation awaited), sent, waited for to the payment's release policy, and the
payment released with its receipt. Every scheme's settlement ends here (`Sender.execute`): an
``exact`` payment's, a captured hold's, an ``upto`` payment's usage.

What a transfer that was dropped or reverted became is the chain's to say: recovery finishes it
(`SettlementRecovery.finish`). A transfer sent is never answered failed for being slow: pending.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from x402mw import tracing
from x402mw.platform import metrics
from x402mw.platform.batching import unreachable
from x402mw.platform.chain.healing import TransactionDropped
from x402mw.platform.chain.relayer import ChainUnavailable, RelayerSignerUnavailable
from x402mw.platform.services.chains import ChainHandle
from x402mw.platform.services.settlement.checks import PaymentRefusal, simulation_outcome
from x402mw.platform.services.settlement.outcomes import Payment, SettleOutcome, failed, outcome_for, unavailable
from x402mw.platform.services.settlement.recovery import SettlementRecovery
from x402mw.platform.services.settlement.release import Releases
from x402mw.platform.services.settlement.smart_accounts import CodeCache, prepare_payer
from x402mw.platform.services.settlement.transfers import Transfer
from x402mw.platform.services.settlement.writes import SettlementWrites
from x402mw.protocol import reasons

logger = logging.getLogger("x402mw.platform.settlement")


class Sender:
    """Sends claimed payments' transfers and releases them, on settlement's writes, releases and recovery."""

    def __init__(
        self, codes: CodeCache, writes: SettlementWrites, releases: Releases, recovery: SettlementRecovery
    ) -> None:
        self.codes = codes
        self.writes = writes
        self.releases = releases
        self.recovery = recovery

    async def execute(
        self,
        row: Payment,
        chain: ChainHandle,
        transfer: Transfer,
        started: float,
        *,
        network: str,
        challenge: dict[str, Any] | None = None,
        simulation: asyncio.Future[Any] | None = None,
        simulate: bool = False,
    ) -> SettleOutcome:
        """Send ``transfer`` for the claimed ``row`` (after ``simulation``, or a simulation of its
        own with ``simulate``), wait for it (to the row's release policy) and release the payment;
        the outcome, recorded, answered on ``network`` (as the payer named it), with ``challenge``
        recorded unless it was already. While tracing is on, in an ``x402 settlement`` span."""
        if not tracing.enabled:
            return await self._execute(row, chain, transfer, started, network, challenge, simulation, simulate)
        with tracing.span(
            "x402 settlement",
            payment_id=row.id,
            challenge_id=row.challenge_id,
            endpoint_id=row.endpoint_id,
            scheme=transfer.scheme,
            network=network,
            amount=str(row.amount_minor),
            asset=transfer.asset,
            payer=transfer.payer,
        ) as span:
            outcome = await self._execute(row, chain, transfer, started, network, challenge, simulation, simulate)
            span.set(outcome=outcome.status, transaction=outcome.response.transaction or row.transaction or None)
            if outcome.status == "failed":
                span.failed(outcome.response.error_reason or "failed")
            return outcome

    async def _execute(
        self,
        row: Payment,
        chain: ChainHandle,
        transfer: Transfer,
        started: float,
        network: str,
        challenge: dict[str, Any] | None,
        simulation: asyncio.Future[Any] | None,
        simulate: bool,
    ) -> SettleOutcome:
        try:
            if transfer.deployment is not None and transfer.auth is not None:
                await prepare_payer(chain, transfer.asset, transfer.auth, transfer.deployment, self.codes)
            if simulation is not None:
                await simulation_outcome(simulation, transfer.scheme)
            elif simulate:
                await simulation_outcome(
                    chain.sender(transfer.scheme).simulate_soon(transfer.to, transfer.calldata), transfer.scheme
                )
            sent_at = time.perf_counter()
            # (Sending does not ask the node to run the call: a revert is found by the simulation,
            # or once mined, below.)
            tx = await chain.sender(transfer.scheme).send(
                transfer.to, transfer.calldata, gas=transfer.gas, valid_until=transfer.valid_until
            )
        except PaymentRefusal as refusal:
            await self.writes.failed(row.id, refusal.reason, challenge=challenge)
            return failed(network, refusal.reason, refusal.message, payment_id=row.id)
        except Exception as exc:
            if isinstance(exc, RelayerSignerUnavailable) or (
                (isinstance(exc, ChainUnavailable) or unreachable(exc)) and transfer.scheme == "upto"
            ):
                # The signer cannot sign (its keys are out of this process), or, for an upto payment,
                # the chain cannot be reached with the usage known and the resource served: the
                # claim stays, and recovery sends it once they are back (while the authorization is
                # valid). Pending, never failed.
                logger.warning("settlement %s: cannot be sent now (%s); left to recovery", row.id, exc)
                return outcome_for(row)
            if isinstance(exc, ChainUnavailable) or unreachable(exc):
                # Nothing was sent: give the claim up, so that the same signature can be sent again.
                logger.warning("settlement %s: the chain cannot be reached (%s); claim given up", row.id, exc)
                await self.writes.release(row.id)
                return unavailable(network)
            logger.exception("settlement %s failed unexpectedly before its transfer was sent", row.id)
            await self.writes.failed(row.id, reasons.UNEXPECTED_SETTLE_ERROR, challenge=challenge)
            return failed(network, reasons.UNEXPECTED_SETTLE_ERROR, "the transfer could not be sent", payment_id=row.id)
        row.transaction = tx
        confirmations = chain.confirmations if row.release_policy == "confirmed" else 0
        # Watch for inclusion while the transaction is recorded (for recovery, should we stop).
        inclusion = asyncio.ensure_future(chain.wait_for(tx, confirmations=confirmations))
        try:
            await self.writes.submitted(row.id, tx)
        except Exception:
            logger.warning("settlement %s: could not record transaction %s", row.id, tx, exc_info=True)
        try:
            receipt = await inclusion
        except TransactionDropped:
            # Its authorization ran out before the transfer could be mined: the chain says what became of it.
            return await self.recovery.finish(row, wait=0, owner=True)
        except Exception:
            # The transfer is out: whatever failed after, the payment is pending, never failed.
            logger.exception("settlement %s: waiting for transaction %s failed", row.id, tx)
            return outcome_for(row)
        included_at = time.perf_counter()
        if receipt.status != 1:
            try:
                used = await transfer.used(chain.rpc)
            except Exception:  # the chain went away: what became of it is for a retry or the worker to find
                logger.warning("settlement %s: reverted, and the chain cannot say why", row.id, exc_info=True)
                return outcome_for(row)
            if used:  # by another transaction: a process that took the payment over sent it too
                return await self.recovery.finish(row, wait=5.0, owner=True)
            await self.writes.failed(
                row.id, reasons.TRANSACTION_REVERTED, block=receipt.block_number, challenge=challenge
            )
            return failed(
                network,
                reasons.TRANSACTION_REVERTED,
                "the transfer reverted on-chain",
                transaction=receipt.transaction_hash,
                payment_id=row.id,
            )
        tx = receipt.transaction_hash  # the version of the transfer that was mined
        outcome = await self.releases.release(row, receipt.block_number, tx, started, sent_at, included_at, challenge)
        metrics.time_settlement(chain.network.caip2, started, sent_at, included_at, time.perf_counter())
        return outcome
