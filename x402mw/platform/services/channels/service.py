"""A request paid through a channel, in two steps around the seller's handler, as a metered
request's ``upto`` payment is (`ChannelService.authorize`, then `ChannelService.capture`):

1. The voucher is checked (`checks.verify_voucher`: one signature recovery; EIP-1271 through the
   chain only for a wallet payer without an authorizer), against the channel's state mirrored in
   the database, read from the chain only when that mirror is older than `MIRROR_SECONDS` or the
   channel is new. Its ceiling must be the channel's charged total plus the request's price (else
   the corrective ``cumulative_amount_mismatch`` with the channel and voucher state), above what
   was claimed and within the balance. Then the channel is held for the request (`store.hold`); a
   ``deposit`` payload's deposit is submitted through the relayer and waited for.
2. After the handler, its charge (at most the price) is committed: the voucher becomes the
   channel's latest and the charged total grows. A handler that failed is charged nothing, and
   the same voucher may be sent again.

A ``refund`` payload (a zero-charge voucher) skips the handler: the channel's latest voucher is
claimed and what is left (or the amount asked) returned to the payer in one transaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx

from x402mw.evm.batch_settlement import (
    ChannelDomain,
)
from x402mw.platform.chain.channels import (
    ChannelSnapshot,
    read_channel,
)
from x402mw.platform.chain.contracts import erc6492_is_valid
from x402mw.platform.chain.relayer import ChainUnavailable
from x402mw.platform.chain.rpc import RpcError
from x402mw.platform.db.models import PaymentChannel, new_id
from x402mw.platform.services.channels import store
from x402mw.platform.services.channels.checks import (
    MAX_CHANNEL_AMOUNT,
    ChannelRefusal,
    ChannelTerms,
    VerifiedVoucher,
    verify_voucher,
)
from x402mw.platform.services.channels.onchain import ChannelTransactions, DepositPending
from x402mw.platform.services.settlement.outcomes import SettleOutcome, failed
from x402mw.protocol import channels as wire
from x402mw.protocol import reasons
from x402mw.protocol.models import PaymentRequirements, SettlementResponse

logger = logging.getLogger("x402mw.platform.channels")

MIRROR_SECONDS = 60.0
"""How old the mirrored chain state of a channel may be for a voucher to be checked against it
without a read (a withdrawal takes at least 15 minutes to finalize, and the worker claims as soon
as it sees one begin)."""
HOLD_SECONDS = 120.0
"""How long a request holds its channel at most (its handler's time)."""
DEPOSIT_GAS = 400_000
REFUND_GAS = 400_000


@dataclass(frozen=True, slots=True)
class ChannelRequest:
    """A channel payment as the seller sent it, for the endpoint ``endpoint``."""

    merchant_id: str
    livemode: bool
    endpoint: Any  # the agent_endpoints row
    accepted: PaymentRequirements
    payload: wire.ChannelPayload
    wait_seconds: float = 20.0


def state_of(row: Any, *, charged: bool = True) -> dict[str, Any]:
    """``channelState`` of a ``payment_channels`` row."""
    return wire.channel_state(
        row.id,
        balance=row.balance,
        total_claimed=row.total_claimed,
        withdraw_requested_at=row.withdraw_requested_at,
        refund_nonce=row.refund_nonce,
        charged=row.charged if charged else None,
    )


def corrective_state(row: Any) -> dict[str, Any]:
    """What a corrective 402 carries in its offer's ``extra``: the channel state and the latest voucher."""
    state: dict[str, Any] = {"channelState": state_of(row)}
    if row.signature:
        state["voucherState"] = {"signedMaxClaimable": str(row.signed_max), "signature": row.signature}
    return state


def refused(network: str, refusal: ChannelRefusal) -> SettleOutcome:
    outcome = failed(network, refusal.reason, refusal.message)
    if refusal.state is None:
        return outcome
    response = outcome.response.model_copy(update={"extensions": {"channel": refusal.state}})
    return SettleOutcome("failed", response, outcome.message)


class ChannelService(ChannelTransactions):
    """Channel payments of every merchant, on ``engine`` and ``chains``."""

    async def terms(self, merchant_id: str, livemode: bool, endpoint: Any) -> ChannelTerms:
        """The channel terms of an endpoint; `ChannelRefusal` if it takes no channels."""
        chain = self.chains.get(endpoint.chain_id)
        asset = chain.asset(endpoint.currency) if chain else None
        if endpoint.channel_withdraw_delay is None or chain is None or asset is None:
            raise ChannelRefusal(wire.INVALID_SCHEME, "this endpoint takes no payment channels")
        return ChannelTerms(
            chain=chain,
            token=asset.address,
            currency=asset.symbol,
            payout_history=frozenset(a.lower() for a in endpoint.payout_history or []),
            receiver_authorizer=await self.authorizers.address(merchant_id, livemode),
            withdraw_delay=endpoint.channel_withdraw_delay,
            min_deposit=endpoint.channel_min_deposit or 0,
            domain=ChannelDomain(chain.chain_id),
        )

    async def find(self, merchant_id: str, livemode: bool, channel_id: str) -> Any:
        """The merchant's channel of this mode, or None (another's is indistinguishable from none)."""
        row = await store.load(self.engine, channel_id)
        if row is None or row.merchant_id != merchant_id or bool(row.livemode) != livemode:
            return None
        return row

    async def of_endpoint(self, merchant_id: str, livemode: bool, endpoint_id: str, limit: int = 50) -> list[Any]:
        """The endpoint's most recent channels (by their last request), at most ``limit``."""
        return await store.of_endpoint(self.engine, merchant_id, livemode, endpoint_id, limit)

    async def authorize(self, request: ChannelRequest) -> SettleOutcome:
        """Step 1: ``authorized`` (the channel held for this request, by the outcome's
        ``payment_id``), ``settled`` for a refund, or ``failed`` with the scheme's code."""
        network = request.accepted.network
        try:
            terms = await self.terms(request.merchant_id, request.livemode, request.endpoint)
            verified = verify_voucher(terms, request.accepted, request.payload)
            if verified.needs_wallet_check:
                await self.check_wallet(terms, verified)
            if request.payload.type == "refund":
                return await self._refund(request, terms, verified)
            return await self._hold(request, terms, verified)
        except ChannelRefusal as refusal:
            return refused(network, refusal)
        except DepositPending as pending:
            # Sent, not yet in a block: pending, never failed; the channel is not held meanwhile, and
            # the payer's next request finds the deposit (its voucher makes the chain be asked).
            response = SettlementResponse(
                success=False,
                error_reason=reasons.SETTLEMENT_PENDING,
                transaction=pending.transaction,
                network=network,
            )
            return SettleOutcome("pending", response, "the deposit is sent and not in a block yet")
        except (ChainUnavailable, httpx.TransportError, OSError) as exc:
            logger.warning("channel payment: the chain cannot be reached: %s", exc)
            response = SettlementResponse(success=False, error_reason=wire.RPC_READ_FAILED, network=network)
            return SettleOutcome("unavailable", response, "the chain cannot be reached; nothing was taken")

    async def capture(self, merchant_id: str, hold_id: str, amount: int) -> SettleOutcome | None:
        """Step 2: charge the request held by ``hold_id`` ``amount`` (0: its handler failed, nothing
        charged). Its outcome; None when the merchant has no such hold. A capture sent again answers
        the channel as it stands."""
        now = self.clock.now()
        row = await store.by_hold(self.engine, hold_id)
        if row is None or row.merchant_id != merchant_id:
            return None
        network = f"eip155:{row.chain_id}"
        if row.hold_id == hold_id:
            if row.hold_price is not None and amount > row.hold_price:
                return failed(
                    network,
                    wire.CHARGE_EXCEEDS_SIGNED,
                    f"the charge {amount} exceeds the request's price {row.hold_price}; nothing was charged",
                )
            deposit = row.hold_deposit
            if amount == 0:
                await store.release(self.engine, hold_id, now)
                found = await store.load(self.engine, row.id)
            else:
                found = await store.commit(self.engine, hold_id, amount, now)
            if found is None:  # lapsed meanwhile
                return failed(network, wire.CHANNEL_BUSY, "the request's hold on the channel lapsed; nothing charged")
            return self._charged(found, amount, deposit)
        return self._charged(row, row.last_charge, None)

    def _charged(self, row: Any, amount: int, deposit: str | None) -> SettleOutcome:
        extra = {"chargedAmount": str(amount), "channelState": state_of(row)}
        response = SettlementResponse.model_validate(
            {
                "success": True,
                "payer": row.payer,
                "transaction": deposit or "",
                "network": f"eip155:{row.chain_id}",
                "extra": extra,
            }
        )
        return SettleOutcome("settled", response, payment_id=row.last_hold_id)

    # -- step 1 ------------------------------------------------------------------------------------

    async def check_wallet(self, terms: ChannelTerms, verified: VerifiedVoucher) -> None:
        """A voucher of a payer without an authorizer whose signature is not its key's: the payer's
        wallet must accept it (EIP-1271, or ERC-6492 for one not deployed yet), asked of the chain."""
        payer = verified.config.payer
        try:
            valid = await erc6492_is_valid(terms.chain.rpc, payer, verified.digest, verified.signature)
        except RpcError:
            valid = False
        if not valid:
            raise ChannelRefusal(wire.VOUCHER_SIGNATURE, "the voucher is not signed by the payer (nor its wallet)")

    async def _row(self, request: ChannelRequest, terms: ChannelTerms, verified: VerifiedVoucher) -> Any:
        """The channel's row, its mirror of the chain fresh (read now if older than `MIRROR_SECONDS`)."""
        now = self.clock.now()
        row = await store.load(self.engine, verified.id)
        if row is not None and (now - row.synced_at).total_seconds() < MIRROR_SECONDS:
            return row
        snapshot = await self._read(terms, verified.channel)
        if row is None:
            config = verified.config
            # A channel new to us starts from what the chain says was claimed of it (the
            # specification's rule for a server that lost its state).
            channel = PaymentChannel(
                id=verified.id,
                merchant_id=request.merchant_id,
                livemode=request.livemode,
                endpoint_id=request.endpoint.id,
                chain_id=terms.chain.chain_id,
                token=config.token,
                currency=terms.currency,
                payer=config.payer,
                payer_authorizer=config.payer_authorizer,
                receiver=config.receiver,
                receiver_authorizer=config.receiver_authorizer,
                withdraw_delay=config.withdraw_delay,
                salt="0x" + config.salt.hex(),
                charged=snapshot.total_claimed,
                claimed=snapshot.total_claimed,
                settled=snapshot.total_claimed,
                balance=snapshot.balance,
                total_claimed=snapshot.total_claimed,
                withdraw_amount=snapshot.withdraw_amount,
                withdraw_requested_at=snapshot.withdraw_requested_at,
                refund_nonce=snapshot.refund_nonce,
                synced_at=now,
                last_request_at=now,
                created_at=now,
                updated_at=now,
            )
            await store.insert(self.engine, channel.model_dump())
        else:
            await store.mirror(self.engine, verified.id, snapshot, now)
        found = await store.load(self.engine, verified.id)
        assert found is not None
        return found

    async def _read(self, terms: ChannelTerms, channel: bytes) -> ChannelSnapshot:
        try:
            return await read_channel(terms.chain.rpc, channel)
        except RpcError as exc:
            raise ChannelRefusal(wire.CHANNEL_STATE_READ_FAILED, f"the channel's state cannot be read: {exc}") from None

    async def _hold(self, request: ChannelRequest, terms: ChannelTerms, verified: VerifiedVoucher) -> SettleOutcome:
        row = await self._row(request, terms, verified)
        if row.merchant_id != request.merchant_id:
            raise ChannelRefusal(wire.RECEIVER_MISMATCH, "this channel pays another merchant")
        price = request.accepted.amount
        self._check_ceiling(row, verified.ceiling, price)
        deposit = request.payload.deposit
        if deposit is None and verified.ceiling > row.balance:
            # Perhaps a deposit landed since the mirror was read (one whose request timed out): the
            # chain is asked before the voucher is refused (the only read on a request it pays).
            await store.mirror(self.engine, row.id, await self._read(terms, verified.channel), self.clock.now())
            row = await store.load(self.engine, row.id)
        if deposit is None:
            if row.balance == 0:
                raise ChannelRefusal(wire.CHANNEL_NOT_FOUND, "the channel holds nothing: deposit first")
            if verified.ceiling > row.balance:
                raise ChannelRefusal(
                    wire.CUMULATIVE_EXCEEDS_BALANCE,
                    f"the voucher's {verified.ceiling} exceeds the channel's balance {row.balance}: top it up",
                )
        else:
            if row.balance == 0 and deposit.amount < terms.min_deposit:
                raise ChannelRefusal(
                    wire.DEPOSIT_BELOW_MINIMUM, f"a first deposit is at least {terms.min_deposit} atomic units"
                )
            if deposit.amount == 0 or row.balance + deposit.amount > MAX_CHANNEL_AMOUNT:
                raise ChannelRefusal(wire.DEPOSIT_PAYLOAD, "the deposit's amount is out of range")
            if verified.ceiling > row.balance + deposit.amount:
                raise ChannelRefusal(
                    wire.CUMULATIVE_EXCEEDS_BALANCE, "the voucher exceeds the channel's balance with the deposit"
                )
        hold_id = new_id()
        now = self.clock.now()
        held = await store.hold(
            self.engine,
            row.id,
            charged=row.charged,
            hold_id=hold_id,
            until=now + timedelta(seconds=HOLD_SECONDS),
            ceiling=verified.ceiling,
            price=price,
            signature="0x" + verified.signature.hex(),
            now=now,
        )
        if not held:
            found = await store.load(self.engine, row.id)
            if found is not None and found.charged != row.charged:
                self._check_ceiling(found, verified.ceiling, price)
            raise ChannelRefusal(wire.CHANNEL_BUSY, "another request is being served on this channel; retry shortly")
        if deposit is not None:
            try:
                await self._deposit(request, terms, verified, deposit, hold_id)
            except BaseException:
                await store.release(self.engine, hold_id, self.clock.now())
                raise
        response = SettlementResponse(
            success=False, payer=verified.config.payer, transaction="", network=request.accepted.network
        )
        return SettleOutcome("authorized", response, "held, to be charged after the handler", payment_id=hold_id)

    @staticmethod
    def _check_ceiling(row: Any, ceiling: int, price: int) -> None:
        if ceiling != row.charged + price:
            raise ChannelRefusal(
                wire.CUMULATIVE_MISMATCH,
                f"the voucher's maxClaimableAmount must be {row.charged + price} (charged so far "
                f"{row.charged}, plus {price}), not {ceiling}",
                state=corrective_state(row),
            )
        if ceiling <= row.total_claimed:
            raise ChannelRefusal(wire.CUMULATIVE_BELOW_CLAIMED, "the voucher is not above what was claimed")

    async def _deposit(
        self,
        request: ChannelRequest,
        terms: ChannelTerms,
        verified: VerifiedVoucher,
        deposit: wire.DepositWire,
        hold_id: str,
    ) -> None:
        """The held request's deposit, submitted and waited for; the channel's mirror follows."""
        transaction, snapshot = await self.submit_deposit(terms.chain, verified, deposit, request.wait_seconds)
        await store.note_deposit(self.engine, hold_id, transaction, deposit.amount)
        await store.mirror(self.engine, verified.id, snapshot, self.clock.now())

    # -- refunds -----------------------------------------------------------------------------------

    async def _refund(self, request: ChannelRequest, terms: ChannelTerms, verified: VerifiedVoucher) -> SettleOutcome:
        """A cooperative refund the payer asked for: claim the latest voucher and return the rest
        (or ``amount``) in one transaction, answered once it is in."""
        row = await self._row(request, terms, verified)
        if verified.ceiling != row.charged:
            raise ChannelRefusal(
                wire.CUMULATIVE_MISMATCH,
                f"a refund's voucher names the charged total {row.charged}, not {verified.ceiling}",
                state=corrective_state(row),
            )
        if verified.ceiling < row.total_claimed:
            raise ChannelRefusal(wire.CUMULATIVE_BELOW_CLAIMED, "the voucher is below what was claimed")
        asked = request.payload.amount
        if asked is not None and asked == 0:
            raise ChannelRefusal(wire.REFUND_AMOUNT_INVALID, "a refund's amount is positive")
        hold_id = new_id()
        now = self.clock.now()
        if not await store.hold(
            self.engine,
            row.id,
            charged=row.charged,
            hold_id=hold_id,
            until=now + timedelta(seconds=HOLD_SECONDS),
            ceiling=row.signed_max,
            price=0,
            signature=row.signature,
            now=now,
        ):
            raise ChannelRefusal(wire.CHANNEL_BUSY, "another request is being served on this channel; retry shortly")
        try:
            transaction, amount = await self.refund_channel(row, asked, voucher=verified)
        finally:
            await store.release(self.engine, hold_id, self.clock.now())
        found = await store.load(self.engine, row.id)
        assert found is not None
        response = SettlementResponse.model_validate(
            {
                "success": True,
                "payer": row.payer,
                "transaction": transaction,
                "network": request.accepted.network,
                "amount": str(amount),
                "extra": {"channelState": state_of(found)},
            }
        )
        return SettleOutcome("settled", response, payment_id=hold_id)
