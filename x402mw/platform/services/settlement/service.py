"""Agent payment settlement: verify an EIP-3009 authorization, claim it once, relay it, sign a receipt.

The unique constraint on (chain, token, payer, nonce) is the replay guard across every process:
the first request to insert the claim settles; any other request with the same signed payload
waits for that settlement and gets the same receipt; a different payload with a used nonce is
refused. A settlement that outlives the caller's wait is *pending* (with its transaction), never
failed; it completes in the background and a retry gets the receipt.

For an MCP tool (`SettleRequest.hold`) the order is the x402 MCP transport's: the authorization is
verified, simulated and claimed as *held* before the tool runs, nothing sent; once the tool
succeeded the seller settles it by its id (`Holds.capture`, the same step as an ``upto`` payment's
usage), and when the tool failed it releases it (`Holds.release`): the claim is deleted, nothing was
taken, and the same authorization may be used again. While it is held, any other use of it is refused
(`payment_in_use`); once used, a hold of it is refused (a tool call is never served again on a used
authorization).

An authorization has one outcome, forever: a retry of it, to any process, at any time (after its
challenge expired too), gets the receipt, the pending transaction, or the final refusal. A retry
that finds no process settling the payment finishes it itself (`SettlementRecovery.finish`).
While the chain cannot be reached, a new payment is answered *unavailable* at once and nothing is
recorded: the same signature may be sent again later; a retry of a payment already claimed gets
that payment's outcome (pending while its transfer waits for the chain).

This module claims. Beside it in the package, each named for its job: `checks` (verifying: what is
checked before the chain), `sending` (sending a claimed payment's transfer and waiting for it),
`outcomes` (what a settlement answers, from what record), `writes` (the batched database writes and
reads), `release` (signing the receipt, answering and recording the release), `recovery` (finishing
what no process is finishing), `holds` (capturing and releasing held payments) and `payments` (the
entry point that chooses the scheme).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform import metrics
from x402mw.platform.batching import unreachable
from x402mw.platform.chain.relayer import ChainUnavailable
from x402mw.platform.clock import Clock
from x402mw.platform.db import tables
from x402mw.platform.db.models import AgentPayment
from x402mw.platform.services.chains import Chains
from x402mw.platform.services.settlement.checks import (
    EndpointPolicy,
    PaymentRefusal,
    Verified,
    simulation_outcome,
    verify_payment,
)
from x402mw.platform.services.settlement.outcomes import (
    Claimed,
    Payment,
    SettleOutcome,
    SettleRequest,
    authorization_key,
    failed,
    held,
    outcome_for,
    unavailable,
)
from x402mw.platform.services.settlement.payment_identifiers import (
    PaymentIdentifiers,
    payment_fingerprint,
    payment_identifier,
)
from x402mw.platform.services.settlement.recovery import TAKEOVER_AFTER, SettlementRecovery
from x402mw.platform.services.settlement.release import Releases
from x402mw.platform.services.settlement.sending import Sender
from x402mw.platform.services.settlement.smart_accounts import (
    CodeCache,
    check_balance,
    token_calldata,
    verify_contract_signer,
)
from x402mw.platform.services.settlement.transfers import exact_transfer
from x402mw.platform.services.settlement.writes import SettlementWrites
from x402mw.protocol import reasons
from x402mw.protocol.models import AnyPaymentPayload, PaymentPayload, PaymentRequirements

logger = logging.getLogger("x402mw.platform.settlement")

POLL_SECONDS = 0.05


def _key_of(row: Payment) -> str:
    return authorization_key(row.chain_id, row.asset, row.payer, bytes.fromhex(row.nonce[2:]))


def _drop(simulation: asyncio.Future[Any] | None) -> None:
    """Give up a simulation nobody will await: cancel it, or take its outcome so that none is reported lost."""
    if simulation is not None and not simulation.cancel() and not simulation.cancelled():
        simulation.exception()


class SettlementService:
    def __init__(
        self,
        engine: AsyncEngine,
        chains: Chains,
        receipt_key: bytes,
        clock: Clock,
        *,
        simulate: bool = True,
        takeover_after: timedelta = TAKEOVER_AFTER,
    ) -> None:
        self.engine = engine
        self.chains = chains
        self.receipt_key = receipt_key
        self.clock = clock
        self.simulate = simulate
        self._inflight: dict[str, asyncio.Task[SettleOutcome | None]] = {}
        self.codes = CodeCache()
        self.identifiers = PaymentIdentifiers(engine, clock)
        self.writes = SettlementWrites(engine)
        self.releases = Releases(self.writes, receipt_key, clock)
        self.recovery = SettlementRecovery(
            chains, clock, self.writes, self.releases, self.finishing, self.codes, takeover_after=takeover_after
        )
        self.sender = Sender(self.codes, self.writes, self.releases, self.recovery)

    # -- verification (no side effects) -------------------------------------------------------

    async def verify(
        self, accepted: PaymentRequirements, payload: AnyPaymentPayload, endpoint: EndpointPolicy | None = None
    ) -> Verified:
        """Check the payment and its signature (`verify_payment`: a key's is recovered locally; a
        smart account's is asked of its wallet on-chain, `verify_contract_signer`); `PaymentRefusal`
        otherwise, `ChainUnavailable` when a smart account's wallet cannot be asked."""
        if not isinstance(payload, PaymentPayload):
            raise PaymentRefusal(reasons.INVALID_SCHEME, "an upto payload cannot pay exact terms")
        verified = verify_payment(self.chains, self.clock, accepted, payload, endpoint)
        if verified.smart:
            verified = await verify_contract_signer(verified.chain, verified, self.codes)
        return verified

    async def check(self, accepted: PaymentRequirements, payload: PaymentPayload, *, x402_version: int = 2) -> str:
        """The facilitator's verify: `verify` and `check_on_chain`, counted (metrics); the payer, or
        `PaymentRefusal` (`ChainUnavailable` when the chain cannot be asked: not counted)."""
        try:
            if x402_version not in (1, 2):
                raise PaymentRefusal(reasons.INVALID_X402_VERSION, "unsupported x402Version")
            verified = await self.verify(accepted, payload)
            await self.check_on_chain(verified, accepted.asset)
        except PaymentRefusal as refusal:
            self.count_verification(accepted.network, refusal.reason)
            raise
        self.count_verification(accepted.network, None)
        return verified.payer

    async def check_on_chain(self, verified: Verified, token: str) -> None:
        """Simulate the transfer from the relayer; `PaymentRefusal` with the revert's reason code. (A smart
        account not deployed yet cannot pay before its deployment: its balance is checked instead.)"""
        if verified.deployment is not None:
            await check_balance(verified.chain, token, verified.auth)
            return
        await simulation_outcome(self._simulate_soon(verified, token))

    def _simulate_soon(self, verified: Verified, token: str) -> asyncio.Future[Any]:
        signature = verified.token_signature or verified.signature
        calldata = token_calldata(verified.auth, signature, smart=verified.smart)
        return verified.chain.relayer.simulate_soon(token, calldata)

    # -- settlement ------------------------------------------------------------------------------

    async def settle(self, request: SettleRequest) -> SettleOutcome:
        """Settle one payment: verify it, claim its authorization, simulate, send and wait (up to
        ``request.wait_seconds``) for the release; a retry of the same payment gets its outcome. A
        payment carrying a ``payment-identifier`` is settled once per id (`PaymentIdentifiers`):
        `IdentifierConflict` when its id came with another payment before."""
        try:
            # (A paid tool's hold and capture are two steps of one payment: its id binds neither.)
            payload = request.payload if isinstance(request.payload, PaymentPayload) else None
            plain = payload is not None and request.merchant_id is not None and not request.hold
            identifier = payment_identifier(payload) if plain and payload is not None else None
        except PaymentRefusal as refusal:
            outcome = failed(request.accepted.network, refusal.reason, refusal.message)
        else:
            if identifier is None or payload is None:
                outcome = await self._settle(request)
            else:
                outcome = await self.identifiers.settle_once(
                    f"{request.merchant_id}:{int(request.livemode)}",
                    identifier,
                    payment_fingerprint(request.accepted, payload, f"{request.endpoint_id} {request.resource}"),
                    lambda: self._settle(request),
                    wait_seconds=request.wait_seconds,
                )
        return self.counted(request.accepted.network, outcome)

    # -- metrics: settlement's are counted here, and only here -------------------------------------

    def refuse(self, network: str, reason: str, message: str) -> SettleOutcome:
        """A settle call refused before it reached settlement (its body's bounds): the outcome, counted."""
        return self.counted(network, failed(network, reason, message))

    def counted(self, network: str, outcome: SettleOutcome) -> SettleOutcome:
        """``outcome``, counted as one settle call answered (`metrics.count_settlement`)."""
        metrics.count_settlement(self._network_label(network), outcome.status, outcome.response.error_reason)
        return outcome

    def count_verification(self, network: str, reason: str | None) -> None:
        """One facilitator verify call answered (valid when ``reason`` is None)."""
        metrics.count_verification(self._network_label(network), reason)

    def _network_label(self, network: str) -> str:
        """``network`` if the platform serves it, else ``other``: what the metrics may name."""
        chain = self.chains.by_network(network)
        return chain.network.caip2 if chain is not None else metrics.OTHER_NETWORK

    async def _settle(self, request: SettleRequest) -> SettleOutcome:
        started = time.perf_counter()
        network = request.accepted.network
        try:
            if not isinstance(request.payload, PaymentPayload):
                raise PaymentRefusal(reasons.INVALID_SCHEME, "an upto payload cannot pay exact terms")
            verified = verify_payment(self.chains, self.clock, request.accepted, request.payload, request.terms)
            if verified.smart:  # not a key's signature: its wallet says (the key path never comes here)
                verified = await verify_contract_signer(verified.chain, verified, self.codes)
        except PaymentRefusal as refusal:
            return failed(network, refusal.reason, refusal.message)
        except ChainUnavailable:
            return unavailable(network)
        key = authorization_key(verified.chain.chain_id, request.accepted.asset, verified.payer, verified.auth.nonce)
        if request.known_only:
            existing = await self.writes.load_by_authorization(
                verified.chain.chain_id, request.accepted.asset, verified.payer, verified.auth.nonce
            )
            if existing is None:
                return failed(network, reasons.CHALLENGE_EXPIRED, "the challenge has expired; pay the new one")
            return await self._join_existing(key, request, verified, existing)
        if not verified.chain.relayer.available:
            # No new transfer can go out; but a retry of a payment already claimed gets its outcome
            # (pending while its transfer waits for the chain, or settled), never a 503 that would
            # tell the payer nothing was taken.
            existing = await self.writes.load_by_authorization(
                verified.chain.chain_id, request.accepted.asset, verified.payer, verified.auth.nonce
            )
            if existing is None or (existing.status == "failed" and existing.transaction is None):
                return unavailable(network)
            return await self._join_existing(key, request, verified, existing)
        loop = asyncio.get_running_loop()
        # The simulation (it has no side effects) and the claim are queued at once, without waiting
        # for a turn of the event loop, each to go out in the next batch of its kind.
        # (A wallet not deployed yet cannot be simulated paying: it is, once deployed, in `_execute`.)
        simulation = (
            self._simulate_soon(verified, request.accepted.asset)
            if self.simulate and verified.deployment is None
            else None
        )
        row = self._new_payment(request, verified)
        claim = self.writes.claim(row.row(), request.challenge if request.hold else None)
        # One task takes the claim's answer and goes on to the chain without waiting for this
        # coroutine to resume (a turn of the event loop less before the transfer is sent); it is
        # also what keeps the settlement going should this caller be cancelled.
        claimed: asyncio.Future[bool] = loop.create_future()
        task = loop.create_task(
            self._claim_and_execute(key, row, claim, request, verified, started, simulation, claimed)
        )
        if not await claimed:  # or the claim's exception
            return await self._join_existing(key, request, verified)
        return await self._wait(task, row.id, network, request.wait_seconds)

    async def _claim_and_execute(
        self,
        key: str,
        row: Claimed,
        claim: asyncio.Future[bool],
        request: SettleRequest,
        verified: Verified,
        started: float,
        simulation: asyncio.Future[Any] | None,
        claimed: asyncio.Future[bool],
    ) -> SettleOutcome | None:
        try:
            won = await claim
        except asyncio.CancelledError:
            _drop(simulation)
            claimed.cancel()
            raise
        except Exception as exc:
            _drop(simulation)
            if not claimed.done():
                claimed.set_exception(exc)
            return None  # the caller has the exception
        if not claimed.done():  # done only if the caller was cancelled meanwhile
            claimed.set_result(won)
        if not won:  # this authorization is claimed already
            _drop(simulation)
            return None
        task = asyncio.current_task()
        if task is not None:
            self._inflight[key] = task
            task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        if request.hold:
            return await self._hold(row, request, verified, simulation)
        return await self._execute(row, request, verified, started, simulation)

    async def _hold(
        self, row: Payment, request: SettleRequest, verified: Verified, simulation: asyncio.Future[Any] | None
    ) -> SettleOutcome:
        """Finish holding a claimed payment: simulate its transfer (nothing is sent)."""
        network = request.accepted.network
        try:
            if simulation is not None:
                await simulation_outcome(simulation)
            elif self.simulate:
                await self.check_on_chain(verified, request.accepted.asset)
        except PaymentRefusal as refusal:
            await self.writes.failed(row.id, refusal.reason, challenge=request.challenge)
            return failed(network, refusal.reason, refusal.message, payment_id=row.id)
        except Exception as exc:
            if not (isinstance(exc, ChainUnavailable) or unreachable(exc)):
                logger.exception("hold %s: the simulation failed unexpectedly; claim given up", row.id)
            await self.writes.release(row.id, status="held")
            return unavailable(network)
        return held(row, network)

    def _new_payment(self, request: SettleRequest, verified: Verified) -> Claimed:
        auth = verified.auth
        return request.claim(
            verified,
            nonce="0x" + auth.nonce.hex(),
            pay_to=auth.to,
            amount_minor=auth.value,
            status="held" if request.hold else "claimed",
            created_at=self.clock.now(),
            valid_after=auth.valid_after,
            valid_before=auth.valid_before,
        )

    async def _join_existing(
        self, key: str, request: SettleRequest, verified: Verified, existing: AgentPayment | None = None
    ) -> SettleOutcome:
        network = request.accepted.network
        existing = existing or await self.writes.load_by_authorization(
            verified.chain.chain_id, request.accepted.asset, verified.payer, verified.auth.nonce
        )
        if existing is None:  # its claim was given up meanwhile (the chain could not be reached)
            return unavailable(network)
        if existing.payload_hash != verified.payload_hash or existing.merchant_id != request.merchant_id:
            # Another payload with this nonce, or this payload settled for another merchant: either
            # way this caller's authorization is used, and the other payment is none of its business.
            return failed(network, reasons.NONCE_USED, "this authorization nonce has already been used")
        if existing.status == "held":
            return failed(
                network,
                reasons.PAYMENT_IN_USE,
                "this authorization is held for a tool call still in progress; nothing was taken",
            )
        if existing.status == "failed" and existing.transaction is None and not request.known_only:
            # ServiceError before reaching the chain (e.g. insufficient funds): the same signature may try again.
            taken = await self._take(existing, "failed", "held" if request.hold else "claimed")
            if taken and request.hold:
                return await self._hold(existing, request, verified, None)
            if taken:
                return await self._run_again(key, existing, request, verified)
        if request.hold:
            # Used already: a tool call is never served again on a used authorization.
            if existing.status == "failed":
                return outcome_for(existing)
            return failed(network, reasons.NONCE_USED, "this authorization has already been used; sign a new one")
        return await self.join(existing, network, request.wait_seconds)

    async def join(self, existing: Payment, network: str, wait_seconds: float) -> SettleOutcome:
        """The outcome of a payment taken for settlement already: this process's settlement of it
        (waited for up to ``wait_seconds``), what was recorded, or else recovery's finish of it now."""
        running = self._inflight.get(_key_of(existing))
        if running is not None:
            return await self._wait(running, existing.id, network, wait_seconds)
        answered = await self.releases.recorded_outcome(existing.id)
        if answered is not None or existing.status in ("settled", "failed"):
            return answered or outcome_for(existing)
        return await self.recovery.finish(existing, wait=wait_seconds)

    async def _take(self, existing: AgentPayment, before: str, after: str) -> bool:
        """Move ``existing`` from status ``before`` to ``after``, unless another caller moved it first."""
        async with self.engine.begin() as conn:
            taken = await conn.execute(
                update(tables.agent_payments)
                .where(tables.agent_payments.c.id == existing.id, tables.agent_payments.c.status == before)
                .values(status=after, error_reason=None)
            )
        if taken.rowcount != 1:
            return False
        existing.status, existing.error_reason = after, None
        return True

    async def _run_again(
        self, key: str, existing: AgentPayment, request: SettleRequest, verified: Verified
    ) -> SettleOutcome:
        """Send a claimed payment this caller took over (a held one, or one refused before the chain)."""
        work = self._execute(existing, request, verified, time.perf_counter())
        return await self.run_settlement(key, existing.id, request.accepted.network, request.wait_seconds, work)

    async def run_settlement(
        self, key: str, payment_id: str, network: str, wait_seconds: float, work: Coroutine[Any, Any, SettleOutcome]
    ) -> SettleOutcome:
        """Run ``work`` (the settlement of the authorization ``key``) as this process's settlement of
        it, and wait up to ``wait_seconds`` for its outcome (pending after that)."""
        task: asyncio.Task[SettleOutcome | None] = asyncio.get_running_loop().create_task(work)
        self._inflight[key] = task
        task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        return await self._wait(task, payment_id, network, wait_seconds)

    async def join_running(self, key: str, payment_id: str, network: str, wait_seconds: float) -> SettleOutcome | None:
        """The outcome of this process's settlement of the authorization ``key``, if it is running one."""
        running = self._inflight.get(key)
        return None if running is None else await self._wait(running, payment_id, network, wait_seconds)

    async def _wait(
        self, task: asyncio.Task[SettleOutcome | None], payment_id: str, network: str, wait_seconds: float
    ) -> SettleOutcome:
        try:
            async with asyncio.timeout(max(0.1, wait_seconds)):
                outcome = await asyncio.shield(task)
        except TimeoutError:
            outcome = None
        except Exception:  # logged where it happened; what is recorded answers
            logger.warning("settlement %s: its task failed", payment_id, exc_info=True)
            outcome = None
        return outcome or await self._outcome_of(payment_id, network)

    async def _outcome_of(self, payment_id: str, network: str) -> SettleOutcome:
        answered = await self.releases.recorded_outcome(payment_id)
        if answered is not None:
            return answered
        row = await self.load(payment_id)
        if row is None:
            return failed(network, reasons.UNEXPECTED_SETTLE_ERROR, "settlement record missing")
        return outcome_for(row)

    async def _execute(
        self,
        row: Payment,
        request: SettleRequest,
        verified: Verified,
        started: float,
        simulation: asyncio.Future[Any] | None = None,
    ) -> SettleOutcome:
        transfer = exact_transfer(
            request.accepted.asset,
            verified.auth,
            verified.token_signature or verified.signature,
            smart=verified.smart,
            deployment=verified.deployment,
        )
        return await self.sender.execute(
            row,
            verified.chain,
            transfer,
            started,
            network=request.accepted.network,
            challenge=request.challenge,
            simulation=simulation,
            simulate=self.simulate,
        )

    async def aclose(self) -> None:
        """Record what was answered and release the writers' connections (before the engine closes)."""
        await self.releases.drain()
        await self.identifiers.aclose()
        await self.writes.aclose()

    async def load(self, payment_id: str) -> AgentPayment | None:
        return await self.writes.load(payment_id)

    def finishing(self, row: Payment) -> bool:
        """Whether this process is settling ``row``'s payment, or has answered for it and is recording it."""
        return _key_of(row) in self._inflight or self.releases.answered(row.id) is not None
