"""The part of `X402Auth`'s flow that pays by payment channel (``batch-settlement``): sign from the
channel's state (`x402mw.client.channels`), send, adopt a proven correction and sign again, record
what was charged. Written as generators of the auth's commands, so the sync and async loops of
`X402Auth` (and `x402mw.client.mcp`'s caller) share it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Mapping
from decimal import Decimal
from typing import Any, Protocol

import httpx

from x402mw.client.channels import ChannelBook, ChannelCharge, Pending, RefundOrder, offered_terms, settlement_data
from x402mw.client.commands import Pause
from x402mw.client.records import PaymentRecord
from x402mw.client.replies import payment_required
from x402mw.client.spending import BATCH_SETTLEMENT, EXACT, NO_ACCEPTABLE_OPTION, Choice
from x402mw.client.wallet import Wallet
from x402mw.errors import PaymentRefusedError
from x402mw.protocol.codec import PAYMENT_RESPONSE, PAYMENT_SIGNATURE, encode_header
from x402mw.protocol.models import PaymentRequired, PaymentRequirements

REFUND_EXTENSION = "x402mw.channel_refund"
"""The request extension asking for a channel's cooperative refund (see `X402Auth.refund_channel`)."""
CORRECTIONS = 2
"""How many corrective 402s one request follows before its answer goes to the caller."""
_BUSY_PAUSE = 0.005
_BUSY_PAUSES = 2000


class X402Auth(Protocol):
    """What of `x402mw.client.auth.X402Auth` the channel flow uses (its caps, counts and records)."""

    wallet: Wallet
    channels: ChannelBook | None
    spent: dict[str, Decimal]
    payments: list[PaymentRecord]
    on_payment: Callable[[PaymentRecord], None] | None
    _lock: threading.Lock
    _channel_routes: dict[tuple[str, str], PaymentRequired]

    def _choose(self, required: PaymentRequired, url: str) -> Choice: ...

    def _first_payable(self, required: PaymentRequired) -> Choice | None: ...

    def _until_known(
        self, request: httpx.Request
    ) -> Generator[httpx.Request | Pause, httpx.Response | None, httpx.Response]: ...


def channel_offer(auth: X402Auth, required: PaymentRequired) -> PaymentRequirements | None:
    """The offer of ``required`` that ``auth`` pays by channel, if the offer it would pay now is a
    channel's (channels enabled, within the caps, first in the order the policy prefers)."""
    if auth.channels is None:
        return None
    choice = auth._first_payable(required)
    return choice.requirements if choice is not None and choice.requirements.scheme == BATCH_SETTLEMENT else None


def choose(auth: X402Auth, required: PaymentRequired, url: str, refund: bool) -> Choice:
    """The channel offer to pay (within the caps, counted in ``spent``), or to refund from."""
    if refund:
        required = required.model_copy(
            update={"accepts": [e for e in required.accepts if e.scheme == BATCH_SETTLEMENT]}
        )
    choice = auth._choose(required, url)
    if choice.requirements.scheme != BATCH_SETTLEMENT:
        raise PaymentRefusedError(
            f"{url} offers no payment channel", reason=NO_ACCEPTABLE_OPTION, payer=auth.wallet.address
        )
    return choice


def pay_by_channel(
    auth: X402Auth,
    request: httpx.Request,
    required: PaymentRequired,
    key: tuple[str, str],
    order: RefundOrder | None,
    first: bool = False,
) -> Generator[httpx.Request | Pause, httpx.Response | None, httpx.Response]:
    """Pay ``request`` by channel (or ask its refund, with ``order``): sign a voucher (a deposit
    when the channel cannot cover the request), send it, and on a corrective 402 adopt the
    seller's count (its voucher proof checked) and sign again; the last answer. With ``first`` (a
    voucher sent on the first request of a route paid before) any 402 is returned at once."""
    book = auth.channels
    if book is None:
        raise PaymentRefusedError(
            "no channel to refund: this auth pays no channels", reason="no_channel", payer=auth.wallet.address
        )
    url = key[1]
    choice = choose(auth, required, url, order is not None)
    uncount = False
    entry = offered_terms(choice.requirements)
    state = book.state_for(entry)
    try:
        for _ in range(_BUSY_PAUSES):  # one request at a time signs on a channel
            if book.claim(state):
                break
            yield Pause(_BUSY_PAUSE)
        else:
            raise PaymentRefusedError(
                f"the channel {state.id} stayed busy", reason="channel_busy", payer=auth.wallet.address
            )
        try:
            book.correct(state, required)  # a corrective 402 (after a restart): its count, if proven
            for attempt in range(CORRECTIONS + 1):
                pending = book.sign(entry, required.resource, choice.decimals, state, order)
                request.headers[PAYMENT_SIGNATURE] = encode_header(pending.payload)
                response = yield from auth._until_known(request)
                settlement = settlement_data(response.headers.get(PAYMENT_RESPONSE))
                if response.status_code < 400 and settlement is not None and book.settled(pending, settlement):
                    if order is None:
                        record_charge(auth, key, required, choice, pending, settlement)
                    return response
                again = payment_required(response) if response.status_code == 402 else None
                if first and again is not None:
                    # The route's terms changed: the caller pays this 402 and counts it then. The
                    # voucher refused is superseded by the next (vouchers are cumulative).
                    uncount = True
                if again is None or first or attempt == CORRECTIONS or not book.correct(state, again, pending.kind):
                    return response
            raise AssertionError("unreachable")
        finally:
            book.release(state)
    finally:
        if order is not None or uncount:  # a refund is no charge
            with auth._lock:
                already = auth.spent.get(choice.spend_key, Decimal(0))
                auth.spent[choice.spend_key] = EXACT.subtract(already, choice.units)


def record_charge(
    auth: X402Auth,
    key: tuple[str, str],
    required: PaymentRequired,
    choice: Choice,
    pending: Pending,
    settlement: Mapping[str, Any],
    remember: bool = True,
) -> None:
    """Record a request paid by channel in ``auth.payments``, count what it was charged (not the
    price signed for) in ``auth.spent``, and (``remember``) remember the route: its next request
    carries its voucher at once."""
    outcome = pending.outcome
    assert outcome is not None
    with auth._lock:
        if remember:
            auth._channel_routes[key] = required
        left = EXACT.subtract(choice.units, Decimal(outcome.charged).scaleb(-choice.decimals, context=EXACT))
        auth.spent[choice.spend_key] = EXACT.subtract(auth.spent.get(choice.spend_key, Decimal(0)), left)
    record = channel_record(
        key[1], pending.requirements, choice, outcome, str(settlement.get("payer") or auth.wallet.address)
    )
    with auth._lock:
        auth.payments.append(record)
    if auth.on_payment is not None:
        auth.on_payment(record)


def channel_record(
    url: str, accepted: PaymentRequirements, choice: Choice, outcome: ChannelCharge, payer: str
) -> PaymentRecord:
    return PaymentRecord(
        url=url,
        amount=outcome.charged,
        asset=accepted.asset,
        network=accepted.network,
        pay_to=accepted.pay_to,
        transaction=outcome.transaction,
        payer=payer,
        receipt=None,
        verified=False,
        symbol=choice.symbol,
        decimals=choice.decimals,
        scheme=BATCH_SETTLEMENT,
        ceiling=accepted.amount,
        channel=outcome,
    )
