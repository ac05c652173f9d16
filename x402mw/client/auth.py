"""`X402Auth`: an ``httpx.Auth`` that pays x402 ``402 Payment Required`` answers.

One class serves ``httpx.Client`` and ``httpx.AsyncClient``. The payment logic is written once, as a
generator (`X402Auth._flow`) that yields requests to send and, rarely, a pause; three short loops
drive it: ``sync_auth_flow`` (used by ``Client``), ``async_auth_flow`` (used by ``AsyncClient``) and
``auth_flow`` (the plain httpx protocol, for stepping the flow by hand).

Body reading: only the body of a 402 answer without a ``PAYMENT-REQUIRED`` header is read (it may be
an x402 v1 offer, ``{"x402Version": 1, "accepts": [...]}``); every other response, the paid one
included, reaches the caller unread, so ``client.stream(...)`` still streams.

What the flow reads of the seller's answers is in `x402mw.client.replies`, what it signs in
`x402mw.client.signing`, what it may spend in `x402mw.client.spending`, and what it records of the
payments made in `x402mw.client.records`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator, Iterable
from dataclasses import dataclass
from decimal import Decimal

import anyio
import httpx

from x402mw.client.channel_flow import REFUND_EXTENSION, channel_offer, pay_by_channel
from x402mw.client.channels import ChannelBook, ChannelPolicy, ChannelRefund, RefundOrder
from x402mw.client.commands import Pause
from x402mw.client.records import INVALID_RECEIPT, receipt_matches
from x402mw.client.records import PaymentRecord as PaymentRecord  # re-exported: its home before
from x402mw.client.replies import (
    offer_in_body,
    payment_required,
    permit_wanted,
    renewed_offer,
    retry_pause,
    settlement_of,
)
from x402mw.client.signing import sign_in_header, sign_payment
from x402mw.client.spending import (
    BATCH_SETTLEMENT,
    EXACT,
    NO_ACCEPTABLE_OPTION,
    OVER_CAP,
    Choice,
    describe_offer,
    judge,
    parse_cap,
    parse_networks,
    parse_strings,
    token_key,
)
from x402mw.client.wallet import Wallet
from x402mw.errors import ConfigurationError, PaymentRefusedError
from x402mw.evm.keys import is_address
from x402mw.protocol import payment_identifier
from x402mw.protocol.models import PaymentRequired, PaymentRequirements, SettlementResponse
from x402mw.protocol.sign_in import SIGN_IN_HEADER


@dataclass(eq=False, slots=True)
class _Unsettled:
    """A payment signed for a request whose outcome is not known yet."""

    header: tuple[str, str]
    choice: Choice
    valid_before: int
    busy: bool = True  # a request is sending it now


_Flow = Generator[httpx.Request | Pause, httpx.Response | None, None]


class _Steps:
    """A flow's commands, for a ``for`` loop: each step sends the flow the ``reply`` set since the
    last (None after a pause). On leaving the ``with`` block the flow is closed: a flow given up
    (the connection failed) keeps what it signed, free again."""

    __slots__ = ("_flow", "_started", "reply")

    def __init__(self, flow: _Flow) -> None:
        self._flow = flow
        self._started = False
        self.reply: httpx.Response | None = None

    def __enter__(self) -> _Steps:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._flow.close()

    def __iter__(self) -> _Steps:
        return self

    def __next__(self) -> httpx.Request | Pause:
        if not self._started:
            self._started = True
            return next(self._flow)
        reply, self.reply = self.reply, None
        return self._flow.send(reply)


class X402Auth(httpx.Auth):
    """Pay x402 v2 (and v1) sellers from a `Wallet`, within caps.

    >>> auth = X402Auth(Wallet.from_env(), max_amount="0.10", max_total="5", networks=["eip155:8453"])
    >>> with httpx.Client(auth=auth) as client:           # or httpx.AsyncClient(auth=auth)
    ...     response = client.get("https://api.example.com/weather")
    >>> auth.payments[-1].transaction

    On a 402 the first acceptable offer is paid: scheme ``exact`` or ``upto`` (a metered route, paid
    with a Permit2 signature for its ceiling, and with an EIP-2612 permit for Permit2 after a 412
    ``permit2_allowance_required``; see docs/metered.md), network in ``networks`` and asset
    (symbol such as ``"USDC"`` or address) in ``assets`` when given, amount within ``max_amount``
    and, with what this auth already signed in that asset, within ``max_total``. Caps are token units
    (``"0.10"`` USDC), converted with the token's decimals (6 when the token is unknown); floats are
    refused. Otherwise `PaymentRefusedError` is raised, reason ``over_cap`` or ``no_acceptable_option``.

    ``spent`` (per asset symbol, or per lower-case address for unknown tokens) counts every
    authorization signed, settled or not: whoever holds a signed authorization can submit it until it
    expires. ``payments`` lists the payments sellers accepted.

    A paid request refused with a new challenge because the terms it paid are stale (``error``
    ``challenge_expired``, or ``invalid_payment_requirements`` when the seller prices each request and
    this one now costs more) is paid once more, on the new challenge and within the caps; a second
    refusal is returned to the caller. The first authorization counts in ``spent``: it was signed.

    A paid retry answered ``402`` with ``errorReason: settlement_pending`` (the transfer is on-chain
    but not final, or its outcome did not reach the seller), or ``503``/``502``/``504`` (the seller
    could not take the payment for now), is sent again with the same signature, never a new one, up
    to ``pending_retries`` times and within ``retry_seconds``; it is never charged twice. A seller
    built on x402mw holds each retry until the settlement is final or its own deadline passes, so
    retries are long; between them the auth waits the ``Retry-After`` the seller asks for (else 1 s
    for pending, a doubling backoff for 5xx), up to 10 seconds (not when ``auth_flow`` is stepped by
    hand). If the outcome is still unknown after that, the answer is returned to the caller, and the
    signature is kept: the next request for the same method and URL sends it again before anything
    is signed anew (so does one after a request that failed in transport, once the payment was
    signed), until it settles, is refused, or expires.

    When the seller's 402 declares the x402 ``payment-identifier`` extension, each logical request
    gets one id (``pay_`` and 32 hex digits), sent in the payload's ``extensions`` and kept across
    these retries (the held signature carries it; a new challenge paid again reuses it): a seller
    that keeps ids answers a retry with the first answer, never a second charge.

    With ``receipt_signer`` (the platform's receipt address), a paid answer whose ``PAYMENT-RESPONSE``
    receipt does not verify raises `PaymentRefusedError` (reason ``invalid_receipt``). The payment
    has already happened by then: the error carries the ``transaction`` and the payment is in
    ``payments`` with ``verified=False``.

    When a 402 offers sign-in-with-x for the URL's own origin (the ``sign-in-with-x`` extension),
    the request is first sent again signed in (an EIP-4361 message signed with the wallet, in
    ``SIGN-IN-WITH-X``): a seller that has this wallet's earlier payment for the route serves it
    without a new one. Otherwise the new 402 is paid as usual. ``sign_in=False`` skips this.

    With ``channels`` (a `ChannelPolicy`, its ``max_deposit`` cap), ``batch-settlement`` offers
    are paid by payment channel: a deposit the first time (at most ``max_deposit``, not counted in
    ``spent``), then one cumulative voucher a request, sent with the request itself once the route
    was paid by channel; what the seller charges counts in ``spent``. ``channels`` is then the
    `ChannelBook` of this wallet's channels; `refund_channel` asks a seller for the rest back. See
    `x402mw.client.channels` and docs/channels.md. Channel payments carry no platform receipt:
    ``receipt_signer`` does not check them.

    Request bodies are buffered (they are sent twice when a payment is needed).
    """

    requires_request_body = True

    def __init__(
        self,
        wallet: Wallet,
        *,
        max_amount: Decimal | str | int | None = None,
        max_total: Decimal | str | int | None = None,
        networks: Iterable[str] | None = None,
        assets: Iterable[str] | None = None,
        receipt_signer: str | None = None,
        pending_retries: int = 10,
        retry_seconds: float = 120.0,
        on_payment: Callable[[PaymentRecord], None] | None = None,
        sign_in: bool = True,
        channels: ChannelPolicy | None = None,
    ) -> None:
        problems: list[str] = []
        if channels is not None and not isinstance(channels, ChannelPolicy):
            problems.append("channels must be a ChannelPolicy")
        self.wallet = wallet
        self.max_amount = parse_cap(max_amount, "max_amount", problems)
        self.max_total = parse_cap(max_total, "max_total", problems)
        self.networks = parse_networks(networks, problems)
        self.assets = (
            None if assets is None else frozenset(a.lower() for a in parse_strings(assets, "assets", problems))
        )
        if receipt_signer is not None and not is_address(receipt_signer):
            problems.append("receipt_signer must be an address ('0x' followed by 40 hex digits)")
        if isinstance(pending_retries, bool) or not isinstance(pending_retries, int) or pending_retries < 0:
            problems.append("pending_retries must be an int >= 0")
        if isinstance(retry_seconds, bool) or not isinstance(retry_seconds, int | float) or retry_seconds < 0:
            problems.append("retry_seconds must be a number of seconds >= 0")
        if problems:
            raise ConfigurationError(problems)
        self.receipt_signer = receipt_signer
        self.pending_retries = pending_retries
        self.retry_seconds = float(retry_seconds)
        self.on_payment = on_payment
        self.sign_in = bool(sign_in)
        self.signed_in = 0  # requests served by signing in, without a new payment
        # Payments signed whose outcome is not known yet, by (method, URL): sent again, never signed
        # anew, when that request is made again (see _flow).
        self._unsettled: dict[tuple[str, str], list[_Unsettled]] = {}
        self.payments: list[PaymentRecord] = []
        self.spent: dict[str, Decimal] = {}
        self._permit_nonces: dict[tuple[str, str], int] = {}  # upto: the next EIP-2612 nonce, by token
        self._lock = threading.Lock()
        self.channels: ChannelBook | None = None if channels is None else ChannelBook(wallet, channels)
        # Routes paid by channel, by (method, URL): their next request carries a voucher at once.
        self._channel_routes: dict[tuple[str, str], PaymentRequired] = {}

    def __repr__(self) -> str:
        return (
            f"X402Auth(wallet={self.wallet!r}, max_amount={self.max_amount!r}, "
            f"max_total={self.max_total!r}, spent={self.spent!r})"
        )

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        with _Steps(self._flow(request)) as steps:
            for command in steps:
                if not isinstance(command, Pause):
                    steps.reply = yield command

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.read()
        with _Steps(self._flow(request)) as steps:
            for command in steps:
                if isinstance(command, Pause):
                    time.sleep(command.seconds)
                else:
                    steps.reply = reply = yield command
                    if offer_in_body(reply):
                        reply.read()

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        await request.aread()
        with _Steps(self._flow(request)) as steps:
            for command in steps:
                if isinstance(command, Pause):
                    await anyio.sleep(command.seconds)
                else:
                    steps.reply = reply = yield command
                    if offer_in_body(reply):
                        await reply.aread()

    def _flow(self, request: httpx.Request) -> _Flow:
        url = str(request.url)
        key = (request.method, url)
        order = request.extensions.get(REFUND_EXTENSION)
        order = order if isinstance(order, RefundOrder) else None
        with self._lock:
            route = self._channel_routes.get(key) if order is None else None
        response = None
        if route is not None:  # a route paid by channel: the voucher goes with the first request
            response = yield from pay_by_channel(self, request, route, key, None, first=True)
            if response.status_code != 402:
                return
            with self._lock:
                self._channel_routes.pop(key, None)
        if response is None:
            response = yield request
        assert response is not None
        required = payment_required(response)
        if required is None:
            return
        if order is not None or channel_offer(self, required) is not None:
            yield from pay_by_channel(self, request, required, key, order)
            return
        held: _Unsettled | None = None
        try:
            held = self._take_unsettled(key)
            if held is not None:
                # A payment signed for this request before, whose outcome never arrived (the connection
                # failed, or it was still pending): it may settle yet, so it is sent again rather than
                # signing a second one.
                request.headers[held.header[0]] = held.header[1]
                response = yield from self._until_known(request)
                renewed = renewed_offer(response)
                if renewed is None:
                    self._finish(key, held, url, response)
                    return
                self._forget(key, held)  # refused for good: pay the new challenge
                required = renewed
            elif self.sign_in:
                signed_in = sign_in_header(self.wallet, required, url, time.time())
                if signed_in is not None:
                    request.headers[SIGN_IN_HEADER] = signed_in
                    answer = yield request
                    assert answer is not None
                    response = answer
                    del request.headers[SIGN_IN_HEADER]
                    if response.status_code != 402:
                        with self._lock:
                            self.signed_in += 1
                        return
                    again = payment_required(response)
                    if again is None:
                        return
                    required = again  # not let in: pay this 402's fresh challenge
            # One payment identifier per logical request, for sellers that declare the extension: kept
            # across this flow's retries, so that a retry gets the first answer, never a second charge.
            identifier = payment_identifier.new_identifier()
            permit_nonce: int | None = None
            for attempt in range(2):
                choice = self._choose(required, url)
                if permit_nonce is None and choice.requirements.scheme == "upto":
                    permit_nonce = self._permit_nonce(choice.requirements)
                header, valid_before = sign_payment(self.wallet, choice, required, permit_nonce, identifier)
                request.headers[header[0]] = header[1]
                if response.cookies:
                    httpx.Cookies(response.cookies).set_cookie_header(request)
                held = _Unsettled(header, choice, valid_before)
                with self._lock:
                    self._unsettled.setdefault(key, []).append(held)
                response = yield from self._until_known(request)
                renewed = renewed_offer(response) if attempt == 0 and required.x402_version == 2 else None
                if renewed is None and attempt == 0 and choice.requirements.scheme == "upto":
                    # 412: no Permit2 allowance; pay again with an EIP-2612 permit for it.
                    permit_nonce, renewed = permit_wanted(response)
                if renewed is None:
                    if permit_nonce is not None:
                        self._permit_used(choice.requirements, permit_nonce, settlement_of(response))
                    break
                self._forget(key, held)
                required = renewed  # the terms paid are stale: pay the new challenge, once
            assert held is not None
            self._finish(key, held, url, response)
        finally:
            if held is not None:
                held.busy = False

    def _permit_nonce(self, accepted: PaymentRequirements) -> int | None:
        """The wallet's next EIP-2612 nonce in this token, if a permit was sent in it already."""
        with self._lock:
            return self._permit_nonces.get(token_key(accepted))

    def _permit_used(self, accepted: PaymentRequirements, nonce: int, settlement: SettlementResponse | None) -> None:
        """Remember the wallet's next EIP-2612 nonce in this token: a permit for Permit2 spends
        down to nothing (it is for one ceiling), so the next upto payment sends one at once rather
        than after a 412. A settlement with a transaction used the permit; one of 0 did not. Shared
        with `x402mw.client.mcp`."""
        if settlement is None or not settlement.success:
            return
        with self._lock:
            self._permit_nonces[token_key(accepted)] = nonce + 1 if settlement.transaction else nonce

    def _until_known(
        self, request: httpx.Request
    ) -> Generator[httpx.Request | Pause, httpx.Response | None, httpx.Response]:
        """Send the paid ``request``, and again with the same signature while the seller answers that
        the payment is pending or that it could not take it (503, 502, 504), within
        ``pending_retries`` and ``retry_seconds``; the last answer."""
        response = yield request
        deadline = time.monotonic() + self.retry_seconds
        for attempt in range(self.pending_retries):
            assert response is not None
            pause = retry_pause(response, attempt)
            if pause is None or time.monotonic() + pause > deadline:
                break
            if pause > 0:
                yield Pause(pause)
            response = yield request
        assert response is not None
        return response

    def _take_unsettled(self, key: tuple[str, str]) -> _Unsettled | None:
        """A payment signed earlier for ``key`` whose outcome is unknown and that no request is sending
        now, taken for this one; None when there is none."""
        now = time.time()
        with self._lock:
            kept = [entry for entry in self._unsettled.get(key, []) if entry.busy or entry.valid_before > now]
            self._unsettled[key] = kept  # those past their validBefore can no longer settle
            for entry in kept:
                if not entry.busy:
                    entry.busy = True
                    return entry
        return None

    def _forget(self, key: tuple[str, str], entry: _Unsettled) -> None:
        with self._lock:
            entries = self._unsettled.get(key, [])
            if entry in entries:
                entries.remove(entry)
            if not entries:
                self._unsettled.pop(key, None)

    def _finish(self, key: tuple[str, str], entry: _Unsettled, url: str, response: httpx.Response) -> None:
        if retry_pause(response, 0) is None:  # a final answer: the payment settled, or never will
            self._forget(key, entry)
        self._settled(url, response, entry.choice)

    def _choose(self, required: PaymentRequired, url: str) -> Choice:
        with self._lock:
            choice, skipped, over_cap = self._judge(required)
            if choice is not None:
                self.spent[choice.spend_key] = EXACT.add(self.spent.get(choice.spend_key, Decimal(0)), choice.units)
                return choice
        detail = "; ".join(skipped) if skipped else "the seller offered no way to pay"
        raise PaymentRefusedError(
            f"refused to pay for {url}: {detail}",
            reason=OVER_CAP if over_cap else NO_ACCEPTABLE_OPTION,
            payer=self.wallet.address,
        )

    def _first_payable(self, required: PaymentRequired) -> Choice | None:
        """The offer `_choose` would pay now, nothing counted."""
        with self._lock:
            return self._judge(required)[0]

    def _judge(self, required: PaymentRequired) -> tuple[Choice | None, list[str], bool]:
        """The first offer of ``required`` within the caps (channel offers first when the policy
        prefers them), else why each was skipped and whether a cap was the reason. Under the lock."""
        skipped: list[str] = []
        over_cap = False
        policy = self.channels.policy if self.channels is not None else None
        entries = list(enumerate(required.accepts, start=1))
        if policy is not None and policy.prefer:
            entries.sort(key=lambda pair: pair[1].scheme != BATCH_SETTLEMENT)
        for index, entry in entries:
            choice, problem = judge(
                entry,
                networks=self.networks,
                assets=self.assets,
                max_amount=self.max_amount,
                max_total=self.max_total,
                spent=self.spent,
                max_deposit=policy.max_deposit if policy is not None else None,  # type: ignore[arg-type]
            )
            if choice is not None:
                return choice, skipped, over_cap
            over_cap = over_cap or problem.startswith("over")
            skipped.append(f"offer {index} ({describe_offer(entry)}): {problem}")
        return None, skipped, over_cap

    def _settled(self, url: str, response: httpx.Response, choice: Choice) -> None:
        if response.status_code >= 400:
            return  # refused, failed or still pending: the caller gets the seller's answer as it is
        self._record(url, settlement_of(response), choice)

    def _record(self, url: str, settlement: SettlementResponse | None, choice: Choice) -> None:
        """Record a payment the seller accepted (its ``settlement``, when it gave one) in ``payments``;
        with ``receipt_signer``, `PaymentRefusedError` when its receipt does not verify. Shared with
        `x402mw.client.mcp`."""
        if settlement is not None and not settlement.success:
            return
        accepted = choice.requirements
        transaction = settlement.transaction if settlement else ""
        payer = (settlement.payer if settlement else None) or self.wallet.address
        raw = settlement.receipt if settlement else None
        receipt = None if raw is None else {str(k): str(v) for k, v in raw.items()}
        upto = accepted.scheme == "upto"
        amount = accepted.amount
        if upto:  # what the seller charged, at most the ceiling signed
            charged = settlement.amount if settlement and settlement.amount is not None else accepted.amount
            amount = min(charged, accepted.amount)
            with self._lock:  # the ceiling was counted when signed; what counts now is the charge
                left = EXACT.subtract(choice.units, Decimal(amount).scaleb(-choice.decimals, context=EXACT))
                self.spent[choice.spend_key] = EXACT.subtract(self.spent.get(choice.spend_key, Decimal(0)), left)
        verified = (
            self.receipt_signer is not None
            and receipt is not None
            and receipt_matches(receipt, self.receipt_signer, accepted, payer, transaction, amount)
        )
        record = PaymentRecord(
            url=url,
            amount=amount,
            asset=accepted.asset,
            network=accepted.network,
            pay_to=accepted.pay_to,
            transaction=transaction,
            payer=payer,
            receipt=receipt,
            verified=verified,
            symbol=choice.symbol,
            decimals=choice.decimals,
            scheme=accepted.scheme,
            ceiling=accepted.amount if upto else None,
        )
        with self._lock:
            self.payments.append(record)
        if self.on_payment is not None:
            self.on_payment(record)
        if self.receipt_signer is not None and not verified:
            what = (
                "the answer carries no receipt"
                if receipt is None
                else f"its receipt is not one signed by {self.receipt_signer} for this payment"
            )
            raise PaymentRefusedError(
                f"the payment for {url} was made (transaction {transaction or 'unknown'}), but {what}",
                reason=INVALID_RECEIPT,
                payer=payer,
                transaction=transaction or None,
            )

    def refund_channel(self, client: httpx.Client, url: str, *, amount: int | None = None) -> ChannelRefund:
        """Ask the seller of ``url`` (a route paid by channel) for the channel's cooperative refund:
        all that was not charged, or ``amount`` atomic units of it. The seller sends the refund
        transaction; `PaymentRefusedError` when it did not."""
        order = RefundOrder(amount)
        response = client.get(url, auth=self, extensions={REFUND_EXTENSION: order})
        return self._refunded(order, url, response)

    async def arefund_channel(self, client: httpx.AsyncClient, url: str, *, amount: int | None = None) -> ChannelRefund:
        """`refund_channel` for an ``httpx.AsyncClient``."""
        order = RefundOrder(amount)
        response = await client.get(url, auth=self, extensions={REFUND_EXTENSION: order})
        return self._refunded(order, url, response)

    def _refunded(self, order: RefundOrder, url: str, response: httpx.Response) -> ChannelRefund:
        if order.result is None:
            raise PaymentRefusedError(
                f"the seller of {url} did not refund the channel (it answered {response.status_code})",
                reason="refund_refused",
                payer=self.wallet.address,
            )
        return order.result
