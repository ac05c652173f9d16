"""`X402Auth`: an ``httpx.Auth`` that pays x402 ``402 Payment Required`` answers.

One class serves ``httpx.Client`` and ``httpx.AsyncClient``. The payment logic is written once, as a
generator (`X402Auth._flow`) that yields requests to send and, rarely, a pause; three short loops
drive it: ``sync_auth_flow`` (used by ``Client``), ``async_auth_flow`` (used by ``AsyncClient``) and
``auth_flow`` (the plain httpx protocol, for stepping the flow by hand).

Body reading: only the body of a 402 answer without a ``PAYMENT-REQUIRED`` header is read (it may be
an x402 v1 offer, ``{"x402Version": 1, "accepts": [...]}``); every other response, the paid one
included, reaches the caller unread, so ``client.stream(...)`` still streams.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any

import anyio
import httpx

from x402mw.client.wallet import EIP2612_EXTENSION, Wallet, token_domain
from x402mw.errors import ConfigurationError, InvalidPaymentError, PaymentRefusedError, PriceError
from x402mw.evm.keys import is_address
from x402mw.evm.receipts import verify_receipt
from x402mw.protocol import bounded_json, payment_identifier, reasons
from x402mw.protocol.codec import (
    PAYMENT_REQUIRED,
    PAYMENT_RESPONSE,
    PAYMENT_SIGNATURE,
    V1_PAYMENT,
    V1_PAYMENT_RESPONSE,
    decode_payment_required,
    decode_settlement_response,
    encode_header,
)
from x402mw.protocol.models import PaymentPayload, PaymentRequired, PaymentRequirements, SettlementResponse
from x402mw.protocol.networks import get_network, parse_caip2
from x402mw.protocol.prices import format_amount, parse_decimal
from x402mw.protocol.sign_in import SIGN_IN_HEADER, SIGN_IN_WITH_X, SignInMessage, encode_sign_in

OVER_CAP = "over_cap"
NO_ACCEPTABLE_OPTION = "no_acceptable_option"
INVALID_RECEIPT = "invalid_receipt"
INVALID_PAYMENT_REQUIRED = "invalid_payment_required"

DEFAULT_DECIMALS = 6
_EXACT = Context(prec=100)  # room for any uint256 amount: Decimal arithmetic below never rounds
_MAX_PAUSE_SECONDS = 10.0
_UNAVAILABLE = frozenset({502, 503, 504})
_MAX_V1_BODY_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class PaymentRecord:
    """One payment a seller accepted. ``amount`` is in atomic units of ``asset``; ``units`` in tokens.
    For an ``upto`` payment (a metered route), ``amount`` is what the seller charged and ``ceiling``
    the most the agent signed for.

    ``verified`` is True only when the auth has a ``receipt_signer`` and the receipt was signed by it
    and names this payment (network, asset, amount, payer, payTo, transaction as far as it states them).
    """

    url: str
    amount: int
    asset: str
    network: str
    pay_to: str
    transaction: str
    payer: str
    receipt: Mapping[str, str] | None
    verified: bool
    symbol: str | None = None
    decimals: int = DEFAULT_DECIMALS
    scheme: str = "exact"
    ceiling: int | None = None  # upto: the most that was signed for; ``amount`` is what was charged

    @property
    def units(self) -> Decimal:
        return Decimal(self.amount).scaleb(-self.decimals, context=_EXACT)


@dataclass(frozen=True, slots=True)
class _Pause:
    seconds: float


@dataclass(frozen=True, slots=True)
class _Choice:
    requirements: PaymentRequirements
    symbol: str | None
    decimals: int
    units: Decimal
    spend_key: str


@dataclass(eq=False, slots=True)
class _Unsettled:
    """A payment signed for a request whose outcome is not known yet."""

    header: tuple[str, str]
    choice: _Choice
    valid_before: int
    busy: bool = True  # a request is sending it now


_Flow = Generator[httpx.Request | _Pause, httpx.Response | None, None]


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
    ) -> None:
        problems: list[str] = []
        self.wallet = wallet
        self.max_amount = _cap(max_amount, "max_amount", problems)
        self.max_total = _cap(max_total, "max_total", problems)
        self.networks = _networks(networks, problems)
        self.assets = None if assets is None else frozenset(a.lower() for a in _strings(assets, "assets", problems))
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

    def __repr__(self) -> str:
        return (
            f"X402Auth(wallet={self.wallet!r}, max_amount={self.max_amount!r}, "
            f"max_total={self.max_total!r}, spent={self.spent!r})"
        )

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        flow = self._flow(request)
        try:
            command = next(flow)
            while True:
                reply = None if isinstance(command, _Pause) else (yield command)
                try:
                    command = flow.send(reply)
                except StopIteration:
                    return
        finally:
            flow.close()  # a flow given up (the connection failed): what it signed is kept, free again

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.read()
        flow = self._flow(request)
        try:
            command = next(flow)
            while True:
                reply: httpx.Response | None = None
                if isinstance(command, _Pause):
                    time.sleep(command.seconds)
                else:
                    reply = yield command
                    if _offer_in_body(reply):
                        reply.read()
                try:
                    command = flow.send(reply)
                except StopIteration:
                    return
        finally:
            flow.close()

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        await request.aread()
        flow = self._flow(request)
        try:
            command = next(flow)
            while True:
                reply: httpx.Response | None = None
                if isinstance(command, _Pause):
                    await anyio.sleep(command.seconds)
                else:
                    reply = yield command
                    if _offer_in_body(reply):
                        await reply.aread()
                try:
                    command = flow.send(reply)
                except StopIteration:
                    return
        finally:
            flow.close()

    def _flow(self, request: httpx.Request) -> _Flow:
        response = yield request
        assert response is not None
        required = _payment_required(response)
        if required is None:
            return
        url = str(request.url)
        key = (request.method, url)
        held: _Unsettled | None = None
        try:
            held = self._take_unsettled(key)
            if held is not None:
                # A payment signed for this request before, whose outcome never arrived (the connection
                # failed, or it was still pending): it may settle yet, so it is sent again rather than
                # signing a second one.
                request.headers[held.header[0]] = held.header[1]
                response = yield from self._until_known(request)
                renewed = _renewed_offer(response)
                if renewed is None:
                    self._finish(key, held, url, response)
                    return
                self._forget(key, held)  # refused for good: pay the new challenge
                required = renewed
            elif self.sign_in:
                signed_in = _sign_in_header(self.wallet, required, url, time.time())
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
                    again = _payment_required(response)
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
                header, valid_before = self._sign(choice, required, permit_nonce, identifier)
                request.headers[header[0]] = header[1]
                if response.cookies:
                    httpx.Cookies(response.cookies).set_cookie_header(request)
                held = _Unsettled(header, choice, valid_before)
                with self._lock:
                    self._unsettled.setdefault(key, []).append(held)
                response = yield from self._until_known(request)
                renewed = _renewed_offer(response) if attempt == 0 and required.x402_version == 2 else None
                if renewed is None and attempt == 0 and choice.requirements.scheme == "upto":
                    # 412: no Permit2 allowance; pay again with an EIP-2612 permit for it.
                    permit_nonce, renewed = _permit_wanted(response)
                if renewed is None:
                    if permit_nonce is not None:
                        self._permit_used(choice.requirements, permit_nonce, _settlement(response))
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
            return self._permit_nonces.get(_token_key(accepted))

    def _permit_used(self, accepted: PaymentRequirements, nonce: int, settlement: SettlementResponse | None) -> None:
        """Remember the wallet's next EIP-2612 nonce in this token: a permit for Permit2 spends
        down to nothing (it is for one ceiling), so the next upto payment sends one at once rather
        than after a 412. A settlement with a transaction used the permit; one of 0 did not. Shared
        with `x402mw.client.mcp`."""
        if settlement is None or not settlement.success:
            return
        with self._lock:
            self._permit_nonces[_token_key(accepted)] = nonce + 1 if settlement.transaction else nonce

    def _sign(
        self, choice: _Choice, required: PaymentRequired, permit_nonce: int | None, identifier: str
    ) -> tuple[tuple[str, str], int]:
        """The payment header for ``choice``, and until when it can settle. An ``exact`` payment to a
        seller that declares the payment-identifier extension carries ``identifier``."""
        if choice.requirements.scheme == "upto":
            upto = self.wallet.sign_upto(choice.requirements, resource=required.resource, permit_nonce=permit_nonce)
            return (PAYMENT_SIGNATURE, encode_header(upto)), upto.payload.permit2_authorization.deadline
        payload = self.wallet.sign_payment(choice.requirements, resource=required.resource)
        if required.x402_version == 2 and payment_identifier.declared(required):
            extensions = payment_identifier.payload_extensions(required.extensions, identifier)
            payload = payload.model_copy(update={"extensions": extensions})
        if required.x402_version == 1:
            header = (V1_PAYMENT, encode_header(_v1_payload(payload, choice.requirements)))
        else:
            header = (PAYMENT_SIGNATURE, encode_header(payload))
        return header, payload.payload.authorization.valid_before

    def _until_known(
        self, request: httpx.Request
    ) -> Generator[httpx.Request | _Pause, httpx.Response | None, httpx.Response]:
        """Send the paid ``request``, and again with the same signature while the seller answers that
        the payment is pending or that it could not take it (503, 502, 504), within
        ``pending_retries`` and ``retry_seconds``; the last answer."""
        response = yield request
        deadline = time.monotonic() + self.retry_seconds
        for attempt in range(self.pending_retries):
            assert response is not None
            pause = _retry_pause(response, attempt)
            if pause is None or time.monotonic() + pause > deadline:
                break
            if pause > 0:
                yield _Pause(pause)
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
        if _retry_pause(response, 0) is None:  # a final answer: the payment settled, or never will
            self._forget(key, entry)
        self._settled(url, response, entry.choice)

    def _choose(self, required: PaymentRequired, url: str) -> _Choice:
        skipped: list[str] = []
        over_cap = False
        with self._lock:
            for index, entry in enumerate(required.accepts, start=1):
                choice, problem = self._judge(entry)
                if choice is not None:
                    self.spent[choice.spend_key] = _EXACT.add(
                        self.spent.get(choice.spend_key, Decimal(0)), choice.units
                    )
                    return choice
                over_cap = over_cap or problem.startswith("over")
                skipped.append(f"offer {index} ({_describe(entry)}): {problem}")
        detail = "; ".join(skipped) if skipped else "the seller offered no way to pay"
        raise PaymentRefusedError(
            f"refused to pay for {url}: {detail}",
            reason=OVER_CAP if over_cap else NO_ACCEPTABLE_OPTION,
            payer=self.wallet.address,
        )

    def _judge(self, entry: PaymentRequirements) -> tuple[_Choice, str] | tuple[None, str]:
        if entry.scheme not in ("exact", "upto"):
            return None, f"scheme {entry.scheme!r} is not supported"
        if entry.scheme == "upto" and not is_address(str(entry.extra.get("facilitatorAddress", ""))):
            return None, "an upto offer without extra.facilitatorAddress cannot be signed"
        try:
            chain_id = parse_caip2(entry.network)
        except ValueError:
            return None, f"network {entry.network!r} is not an EVM network"
        if self.networks is not None and entry.network not in self.networks:
            return None, "network not allowed"
        if not is_address(entry.pay_to):
            return None, f"payTo {entry.pay_to!r} is not an address"
        network = get_network(chain_id)
        known = network.asset_by_address(entry.asset) if network else None
        if known is not None and not known.eip3009 and entry.scheme == "exact":
            return None, f"{known.symbol} cannot be paid by signed authorization"
        if (
            self.assets is not None
            and entry.asset.lower() not in self.assets
            and (known is None or known.symbol.lower() not in self.assets)
        ):
            return None, "asset not allowed"
        try:
            token_domain(entry)
        except PaymentRefusedError as exc:
            return None, exc.message
        decimals = known.decimals if known else DEFAULT_DECIMALS
        symbol = known.symbol if known else None
        # the symbol an unknown chain's offer gives names the coin in messages and records only: caps
        # and allow-lists go by what this process knows (a seller could name any token "USDC")
        shown = symbol or _offered_symbol(entry)
        units = Decimal(entry.amount).scaleb(-decimals, context=_EXACT)
        if self.max_amount is not None and units > self.max_amount:
            return None, f"over the per-payment cap of {self.max_amount} {shown or 'tokens'}"
        key = symbol or entry.asset.lower()
        spent = self.spent.get(key, Decimal(0))
        if self.max_total is not None and _EXACT.add(spent, units) > self.max_total:
            return None, (
                f"over the total cap of {self.max_total} {shown or 'tokens'} ({spent.normalize():f} already signed)"
            )
        return _Choice(entry, shown, decimals, units, key), ""

    def _settled(self, url: str, response: httpx.Response, choice: _Choice) -> None:
        if response.status_code >= 400:
            return  # refused, failed or still pending: the caller gets the seller's answer as it is
        self._record(url, _settlement(response), choice)

    def _record(self, url: str, settlement: SettlementResponse | None, choice: _Choice) -> None:
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
                left = _EXACT.subtract(choice.units, Decimal(amount).scaleb(-choice.decimals, context=_EXACT))
                self.spent[choice.spend_key] = _EXACT.subtract(self.spent.get(choice.spend_key, Decimal(0)), left)
        verified = (
            self.receipt_signer is not None
            and receipt is not None
            and _receipt_matches(receipt, self.receipt_signer, accepted, payer, transaction, amount)
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


def _cap(value: object, name: str, problems: list[str]) -> Decimal | None:
    if value is None:
        return None
    try:
        cap = parse_decimal(value, field=name)
    except PriceError as exc:
        problems.append(exc.message)
        return None
    if cap < 0:
        problems.append(f"{name} must not be negative")
    return cap


def _strings(values: Iterable[str], name: str, problems: list[str]) -> list[str]:
    if isinstance(values, str):
        problems.append(f"{name} must be a list of strings, not one string")
        return []
    found = list(values)
    if not all(isinstance(v, str) for v in found):
        problems.append(f"{name} must hold strings only")
        return []
    return found


def _networks(values: Iterable[str] | None, problems: list[str]) -> frozenset[str] | None:
    if values is None:
        return None
    result = set()
    for value in _strings(values, "networks", problems):
        known = get_network(value)
        if known is not None:
            result.add(known.caip2)
            continue
        try:
            result.add(f"eip155:{parse_caip2(value)}")
        except ValueError:
            problems.append(f"unknown network {value!r}: use a CAIP-2 id such as 'eip155:8453'")
    return frozenset(result)


def _sign_in_header(wallet: Wallet, required: PaymentRequired, url: str, now: float) -> str | None:
    """A ``SIGN-IN-WITH-X`` header answering the 402's sign-in-with-x offer, or None when there is
    none this wallet can use: only an offer bound to the request's own origin is signed (another
    site's domain in a message would let that site sign in as this wallet)."""
    offered = (required.extensions or {}).get(SIGN_IN_WITH_X)
    if not isinstance(offered, dict) or not isinstance(offered.get("info"), dict):
        return None
    info: dict[str, Any] = offered["info"]
    chains = [c for c in offered.get("supportedChains") or [] if isinstance(c, dict)]
    chain = next((c.get("chainId") for c in chains if str(c.get("chainId", "")).startswith("eip155:")), None)
    target = httpx.URL(url)
    origin = f"{target.scheme}://{target.netloc.decode('ascii')}"
    uri = str(info.get("uri", ""))
    if not isinstance(chain, str) or info.get("domain") != target.netloc.decode("ascii"):
        return None
    if not (uri == origin or uri.startswith(origin + "/")):
        return None
    issued = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
    try:
        resources = info.get("resources")
        message = SignInMessage(
            domain=str(info["domain"]),
            address=wallet.address,
            uri=uri,
            version=str(info.get("version", "1")),
            chain_id=chain,
            nonce=str(info.get("nonce") or secrets.token_hex(16)),
            issued_at=str(info.get("issuedAt") or issued),
            signature="",
            statement=info.get("statement") if isinstance(info.get("statement"), str) else None,
            expiration_time=info.get("expirationTime") if isinstance(info.get("expirationTime"), str) else None,
            not_before=info.get("notBefore") if isinstance(info.get("notBefore"), str) else None,
            request_id=info.get("requestId") if isinstance(info.get("requestId"), str) else None,
            resources=tuple(str(r) for r in resources) if isinstance(resources, list) else None,
        )
    except (KeyError, TypeError, ValueError):
        return None
    signed = dataclasses.replace(message, signature=wallet.sign_message(message.text()))
    return encode_sign_in(signed)


def _offer_in_body(response: httpx.Response) -> bool:
    if response.status_code != 402 or PAYMENT_REQUIRED in response.headers:
        return False
    length = response.headers.get("content-length", "")
    return not (length.isdigit() and int(length) > _MAX_V1_BODY_BYTES)


def _payment_required(response: httpx.Response) -> PaymentRequired | None:
    """The offer of a 402 answer: the v2 header, else a v1 (or v2) JSON body; None if it has neither."""
    if response.status_code != 402:
        return None
    header = response.headers.get(PAYMENT_REQUIRED)
    try:
        if header is not None:
            return decode_payment_required(header)
        try:
            data: Any = bounded_json.loads(response.content, max_bytes=_MAX_V1_BODY_BYTES)
        except (httpx.ResponseNotRead, ValueError):  # not read (too large), not JSON, or over a limit
            return None
        if not isinstance(data, dict) or data.get("x402Version") not in (1, 2) or "accepts" not in data:
            return None
        return decode_payment_required(data)
    except InvalidPaymentError as exc:
        raise PaymentRefusedError(
            f"the seller's 402 offer is malformed: {exc.message}", reason=INVALID_PAYMENT_REQUIRED
        ) from None


_RENEWED = frozenset({reasons.CHALLENGE_EXPIRED, reasons.INVALID_REQUIREMENTS})


def _renewed_offer(response: httpx.Response) -> PaymentRequired | None:
    """The new challenge of a paid request refused because the terms it paid are stale (the
    challenge expired, or the seller priced the request again higher); None for any other answer."""
    header = response.headers.get(PAYMENT_REQUIRED)
    if response.status_code != 402 or header is None:
        return None
    try:
        offer = decode_payment_required(header)
    except InvalidPaymentError:
        return None
    if offer.x402_version != 2 or offer.error is None or reasons.normalize_reason(offer.error) not in _RENEWED:
        return None
    return offer


def _token_key(accepted: PaymentRequirements) -> tuple[str, str]:
    return accepted.network, accepted.asset.lower()


def _permit_wanted(response: httpx.Response) -> tuple[int | None, PaymentRequired | None]:
    """For a 412 ``permit2_allowance_required`` answer whose new challenge carries the payer's
    EIP-2612 nonce (``extensions.eip2612GasSponsoring.info.nonce``): that nonce and the challenge."""
    header = response.headers.get(PAYMENT_REQUIRED)
    if response.status_code != 412 or header is None:
        return None, None
    try:
        offer = decode_payment_required(header)
    except InvalidPaymentError:
        return None, None
    nonce = permit_nonce_wanted(offer)
    return (None, None) if nonce is None else (nonce, offer)


def permit_nonce_wanted(offer: PaymentRequired) -> int | None:
    """The payer's EIP-2612 nonce a ``permit2_allowance_required`` refusal carries, for an upto
    payment to be signed again with a permit for Permit2; None for any other offer."""
    if offer.error is None or reasons.normalize_reason(offer.error) != reasons.PERMIT2_ALLOWANCE_REQUIRED:
        return None
    info = ((offer.extensions or {}).get(EIP2612_EXTENSION) or {}).get("info")
    nonce = info.get("nonce") if isinstance(info, dict) else None
    if not isinstance(nonce, str) or not nonce.isdigit():
        return None
    return int(nonce)


def _v1_payload(payload: PaymentPayload, accepted: PaymentRequirements) -> dict[str, Any]:
    network = get_network(accepted.network)
    return {
        "x402Version": 1,
        "scheme": accepted.scheme,
        "network": network.v1_name if network and network.v1_name else accepted.network,
        "payload": payload.payload.to_wire(),
    }


def _settlement(response: httpx.Response) -> SettlementResponse | None:
    header = response.headers.get(PAYMENT_RESPONSE) or response.headers.get(V1_PAYMENT_RESPONSE)
    if header is None:
        return None
    try:
        return decode_settlement_response(header)
    except InvalidPaymentError:
        return None


def _retry_pause(response: httpx.Response, attempt: int) -> float | None:
    """Seconds to wait before sending a paid request again with the same signature, or None when the
    answer is final: the settlement is pending (402 ``settlement_pending``), or the seller could not
    take the payment for now (503, 502, 504 without a settled ``PAYMENT-RESPONSE``)."""
    settlement = _settlement(response)
    if response.status_code == 402:
        if settlement is None or settlement.success or settlement.error_reason is None:
            return None
        if reasons.normalize_reason(settlement.error_reason) != reasons.SETTLEMENT_PENDING:
            return None
        default = 1.0
    elif response.status_code in _UNAVAILABLE and not (settlement is not None and settlement.success):
        default = min(2.0**attempt, _MAX_PAUSE_SECONDS)
    else:
        return None
    retry_after = response.headers.get("retry-after", "").strip()
    seconds = float(retry_after) if retry_after.isdigit() else default  # an HTTP date: wait a little
    return min(seconds, _MAX_PAUSE_SECONDS)


def _receipt_matches(
    receipt: Mapping[str, str],
    signer: str,
    accepted: PaymentRequirements,
    payer: str,
    transaction: str,
    amount: int,
) -> bool:
    if not verify_receipt(receipt, signer):
        return False
    expected = {
        "network": accepted.network,
        "asset": accepted.asset,
        "amount": str(amount),
        "payer": payer,
        "payTo": accepted.pay_to,
        "transaction": transaction,
    }
    if accepted.scheme == "upto":
        expected["maxAmount"] = str(accepted.amount)
    challenge = accepted.extra.get("challengeId")
    if isinstance(challenge, str):
        expected["challengeId"] = challenge
    return all(
        name not in receipt or not value or receipt[name].lower() == value.lower() for name, value in expected.items()
    )


def _offered_symbol(entry: PaymentRequirements) -> str | None:
    """The token's symbol as the offer names it (``extra.currency``, which x402mw sellers send) on a
    chain this process does not know the tokens of (the platform's dev chain): for messages and caps
    by symbol. A value that is not a short symbol is ignored."""
    offered = entry.extra.get("currency")
    if isinstance(offered, str) and 0 < len(offered) <= 11 and offered.isalnum() and offered.isascii():
        return offered.upper()
    return None


def _describe(entry: PaymentRequirements) -> str:
    network = get_network(entry.network)
    known = network.asset_by_address(entry.asset) if network else None
    amount = format_amount(entry.amount, known.decimals) if known else f"{entry.amount} atomic units"
    return f"{amount} {known.symbol if known else _offered_symbol(entry) or entry.asset} on {entry.network}"
