"""The sans-IO payment gate: a request view in, a decision out.

`PaymentGate.process` is a generator. It yields small commands (`PlatformCall`, `ComputeAmount`)
that a driver runs, sync or async (see `x402mw.seller.drivers`), and returns a `Decision`:
`Answer` (a 402 challenge, a pending settlement, an outage) or `Serve` (run the handler with the
settlement). No framework, no I/O here, so every adapter shares this one implementation.

A paid MCP tool (`PaymentGate.hold`) is settled after it ran, as the x402 MCP transport orders it:
the payment is verified and claimed first (`Held`), then settled (`PaymentGate.capture`) once the tool
succeeded or given up (`PaymentGate.release`) when it failed.

The unpaid path makes no network call once an endpoint's terms are known: the challenge is issued
locally and sealed with a hash keyed from the API key, so that any worker process can check the
retried request's ``accepted`` terms; issued challenges reach the platform in background batches.

The gate decides; what it answers is written elsewhere: the 402 (its JSON template, the paywall
page) in `x402mw.seller.challenges`, the other JSON answers in `x402mw.seller.answers`, and the
sign-in-with-x exchange with the platform in `x402mw.seller.sign_in`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator
from dataclasses import dataclass
from json.encoder import encode_basestring as _json_str  # type: ignore[attr-defined]
from typing import Any

from x402mw.errors import ConfigurationError, InvalidPaymentError, PlatformError, PriceError, X402Error
from x402mw.protocol import payment_identifier, reasons
from x402mw.protocol.codec import PAYMENT_RESPONSE, decode_any_payment_payload, encode_header
from x402mw.protocol.models import (
    AnyPaymentPayload,
    PaymentPayload,
    PaymentRequirements,
    SettlementResponse,
    UptoPaymentPayload,
)
from x402mw.protocol.prices import to_atomic
from x402mw.protocol.seals import Sealer, sealed_terms
from x402mw.seller.answers import (
    EXPOSE_HEADERS,
    conflict_answer,
    error_answer,
    json_answer,
    pending_answer,
)
from x402mw.seller.challenges import (
    EIP2612_EXTENSION,
    ChallengeTemplate,
    build_template,
    offer_scheme,
    render_challenge,
    sealed_offer,
)
from x402mw.seller.config import EndpointTerms, PaidRoute
from x402mw.seller.decisions import (
    Answer,
    ComputeAmount,
    Decision,
    Held,
    PlatformCall,
    PlatformReply,
    Serve,
    Settlement,
)
from x402mw.seller.discovery import well_known_manifest
from x402mw.seller.manifest import manifest_item
from x402mw.seller.metering import MeteredPayment, ServeMetered
from x402mw.seller.origins import origin_of, public_origin, published_url
from x402mw.seller.paywall import Paywall
from x402mw.seller.sign_in import admit

logger = logging.getLogger("x402mw.seller")
_ISSUED_KEPT = 100_000  # challenges kept for registration while the platform cannot be reached
_REGISTER_BATCH = 500  # challenges registered per call
_REGISTER_ROUND = 20_000  # challenges registered per background round at most (80,000/s at 4 rounds/s)
TERMS_REFRESH_SECONDS = 1.0
"""How old an endpoint's terms may get before the background work revalidates them (a conditional
request, ``304`` while unchanged): with the work's 0.25 s rounds, a change made on the platform is
in the challenges issued from about 1.25 s later, within the 2 s the documentation states."""

DEFAULT_PLATFORM_URL = "http://127.0.0.1:4402/v1"
Step = Generator[PlatformCall | ComputeAmount, Any, Decision | ServeMetered]
FinishStep = Generator[PlatformCall, Any, "list[tuple[str, str]] | Answer"]
AnswerStep = Generator[PlatformCall | ComputeAmount, Any, Answer]


@dataclass(frozen=True, slots=True)
class RequestView:
    """The little a gate needs to know of a request. ``url`` is the absolute URL of the resource;
    ``payment`` is the ``PAYMENT-SIGNATURE`` header, or the v1 ``X-PAYMENT`` header, or the payload
    as JSON (an MCP tool call's ``_meta["x402/payment"]``), or None; ``accept`` the ``Accept``
    header (a browser's gets the paywall page); ``sign_in`` the ``SIGN-IN-WITH-X`` header."""

    method: str
    url: str
    payment: str | dict[str, Any] | None
    accept: str | None = None
    sign_in: str | None = None


class PaymentGate:
    """Decides, for each request to a paid route, whether to challenge, settle-then-serve or answer.

    One gate serves every route of an app and is safe to share between threads and tasks.
    """

    def __init__(
        self,
        *,
        api_key: str,
        platform_url: str = DEFAULT_PLATFORM_URL,
        settle_timeout: float = 30.0,
        refresh_seconds: float = TERMS_REFRESH_SECONDS,
        clock: Callable[[], float] = time.time,
        paywall: Paywall | None = None,
        origin: str | None = None,
    ) -> None:
        problems = []
        if not isinstance(api_key, str) or not api_key.startswith(("sk_test_", "sk_live_")):
            problems.append("api_key must be a merchant API key (sk_test_... or sk_live_...)")
        if not isinstance(platform_url, str) or not platform_url.startswith(("http://", "https://")):
            problems.append("platform_url must be an http(s) URL such as https://pay.example.com/v1")
        if isinstance(settle_timeout, bool) or not isinstance(settle_timeout, int | float) or settle_timeout <= 0:
            problems.append("settle_timeout must be positive")
        if paywall is not None and not isinstance(paywall, Paywall):
            problems.append("paywall must be a Paywall")
        if origin is not None:
            origin = public_origin(origin)
            if origin is None:
                problems.append("origin must be the seller's public origin, such as https://api.example.com")
        if problems:
            raise ConfigurationError(problems)
        self.api_key = api_key
        self.platform_url = platform_url.rstrip("/")
        self.settle_timeout = settle_timeout
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self.paywall = paywall if paywall is not None else Paywall()
        self.origin = origin
        self._sealer = Sealer(api_key)
        # Challenge ids: unique per process by a counter, across processes by a random prefix.
        self._id_prefix = secrets.token_hex(8)
        self._id_counter = itertools.count(secrets.randbits(32))
        self._templates: dict[tuple[Any, ...], tuple[PaidRoute, EndpointTerms, ChallengeTemplate]] = {}
        # Each endpoint's terms, when they were last known current, and their ETag.
        self._terms: dict[str, tuple[EndpointTerms, float, str | None]] = {}
        self._stale: set[str] = set()  # endpoints whose last revalidation failed (warned once)
        # Challenges issued and not registered yet, oldest first: an OrderedDict, whose front can be
        # taken in O(1) (a dict's front, after many deletions, is found by scanning past them).
        self._issued: OrderedDict[str, tuple[Any, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PaymentGate(platform_url={self.platform_url!r}, api_key=<hidden>)"

    # -- the request path -------------------------------------------------------------------

    def _published(self, request: RequestView) -> RequestView:
        """``request`` with its URL under the configured origin (`published_url`): what its 402,
        its payment's resource and the platform's records name."""
        if self.origin is None:
            return request
        return dataclasses.replace(request, url=published_url(self.origin, request.url))

    def process(self, route: PaidRoute, request: RequestView, native: Any = None) -> Step:
        """Decide for one request. ``native`` is the framework's request, given to amount callbacks."""
        request = self._published(request)
        decision = yield from self._paid(route, request, native, hold=False)
        assert not isinstance(decision, Held)
        return decision

    def unpaid_challenge(self, route: PaidRoute, request: RequestView) -> Answer | None:
        """`process`'s answer to a request that carries no payment and no sign-in, for a route of a
        fixed price whose terms are known: its 402, built without stepping through a generator (the
        path of every first request). None when the request needs `process`."""
        if request.payment is not None or (request.sign_in is not None and route.sign_in is not None):
            return None
        known = self._terms.get(route.endpoint)
        if known is None:
            return None
        terms = known[0]
        if terms.amount is None or _priced_per_request(route, terms):
            return None
        return self._render(route, terms, self._published(request), terms.amount, None, None)

    def hold(
        self, route: PaidRoute, request: RequestView, native: Any = None
    ) -> Generator[PlatformCall | ComputeAmount, Any, Answer | Held | ServeMetered]:
        """Decide for one call of a paid MCP tool: an `Answer` (a challenge, a refusal, an outage), or
        `Held`: the payment is verified and claimed, nothing taken; run the tool, then `capture` or
        `release` it. `ServeMetered` for an ``upto`` payment of a metered endpoint (held the same way;
        settled by `finish`)."""
        request = self._published(request)
        decision = yield from self._paid(route, request, native, hold=True)
        assert not isinstance(decision, Serve)
        return decision

    def capture(self, held: Held) -> Step:
        """Settle a held payment (its tool succeeded): `Serve` with the settlement, or the `Answer`
        of a payment that could not be settled (then the tool's result must not be given)."""
        route, terms, request, native = held.context
        try:
            reply = yield self._capture_call(held.payment_id, None)
        except PlatformError as exc:
            logger.error("settlement call failed: %s; answering pending", exc.message)
            return pending_answer(
                SettlementResponse(success=False, error_reason=reasons.SETTLEMENT_PENDING, network=held.network)
            )
        return (yield from self._settled(route, terms, request, native, reply, held.pay_to, held.asset))

    def _capture_call(self, payment_id: str, amount: int | None) -> PlatformCall:
        """The call that settles a held payment (a tool's, or a metered request's for ``amount``)."""
        body: dict[str, Any] = {"waitSeconds": max(1.0, self.settle_timeout - 2.0)}
        if amount is not None:
            body["amountMinor"] = str(amount)
        return PlatformCall("POST", f"/agent/settlements/{payment_id}/capture", body, timeout=self.settle_timeout)

    def release(self, held: Held) -> Generator[PlatformCall, Any, bool]:
        """Give up a held payment (its tool failed): nothing is taken, and the agent may use the same
        authorization again. False (and logged) if the platform could not be told: the payment then
        stays held, unsent, until its authorization expires."""
        try:
            reply = yield PlatformCall("POST", f"/agent/settlements/{held.payment_id}/release")
        except PlatformError as exc:
            reply = PlatformReply(0, {"error": {"message": exc.message}})
        # (Its challenge was recorded with the hold.)
        if reply.status != 200:
            logger.error("could not release held payment %s: %s", held.payment_id, _reply_error(reply).message)
            return False
        return True

    def _paid(
        self, route: PaidRoute, request: RequestView, native: Any, *, hold: bool
    ) -> Generator[PlatformCall | ComputeAmount, Any, Decision | Held | ServeMetered]:
        known = self._terms.get(route.endpoint)
        if known is None:
            try:
                terms = yield from self.fetch_terms(route.endpoint)
            except PlatformError as exc:
                return self._platform_failure(exc, f"terms of endpoint {route.endpoint}")
        else:
            terms = known[0]
        if request.payment is None:
            if request.sign_in is not None and route.sign_in is not None:
                return (yield from self._sign_in(route, terms, request, native))
            return (yield from self._challenge(route, terms, request, native, None, None))
        try:
            payload = decode_any_payment_payload(request.payment)
            if hold and payload.resource is not None and payload.resource.url != request.url:
                raise InvalidPaymentError(
                    f"this payment is for {payload.resource.url}, not {request.url}",
                    reason=reasons.INVALID_REQUIREMENTS,
                )
            accepted, challenge_id, expires = self._check_accepted(payload, route, terms)
        except InvalidPaymentError as exc:
            return (yield from self._challenge(route, terms, request, native, exc.reason, exc.message))
        if _priced_per_request(route, terms):
            # The seal shows the terms are a challenge of this route, not that they were quoted for
            # this request: its price is computed again, so that the challenge of a cheap request
            # cannot pay for a dear one.
            price = yield from self._price(route, terms, native)
            if isinstance(price, Answer):
                return price
            if accepted.amount < price:
                message = f"this request costs {price} atomic units, more than the {accepted.amount} accepted"
                return (
                    yield from self._challenge(
                        route, terms, request, native, reasons.INVALID_REQUIREMENTS, message, amount=price
                    )
                )
        body = {
            "endpointId": terms.id,
            "challengeId": challenge_id,
            "resource": request.url,
            "expiresAt": expires,
            "accepted": accepted.to_wire(),
            "paymentPayload": payload.to_wire(),
            "waitSeconds": max(1.0, self.settle_timeout - 2.0),
        }
        if isinstance(payload, UptoPaymentPayload):
            return (yield from self._authorize(route, terms, request, native, accepted, challenge_id, body))
        if hold:
            body["hold"] = True
        if route.description or terms.name:  # what the catalogue lists, for a discoverable endpoint
            body["description"] = route.description or terms.name
        if route.mime_type:
            body["mimeType"] = route.mime_type
        if route.discovery is not None:
            body["extensions"] = {"bazaar": route.discovery.extension(request.method)}
        # The settlement call carries the challenge, which the platform records with the payment's
        # outcome: it is registered once, by that call, unless the call is not answered.
        queued = self._withdraw(challenge_id)
        try:
            reply = yield PlatformCall("POST", "/agent/settlements", body, timeout=self.settle_timeout)
        except PlatformError as exc:
            self._requeue(queued)
            # The platform may have received the payment before the connection failed.
            logger.error("settlement call failed: %s; answering pending", exc.message)
            return pending_answer(
                SettlementResponse(success=False, error_reason=reasons.SETTLEMENT_PENDING, network=accepted.network)
            )
        if reply.status != 200:
            self._requeue(queued)
        data = reply.data
        if hold and reply.status == 200 and isinstance(data, dict) and data.get("status") == "held":
            settlement = data.get("settlement") or {}
            return Held(
                payment_id=str(data.get("paymentId", "")),
                payer=str(settlement.get("payer", "")),
                amount=accepted.amount,
                network=accepted.network,
                pay_to=accepted.pay_to,
                asset=accepted.asset,
                context=(route, terms, request, native),
            )
        return (yield from self._settled(route, terms, request, native, reply, accepted.pay_to, accepted.asset))

    def _check_accepted(
        self, payload: AnyPaymentPayload, route: PaidRoute, terms: EndpointTerms
    ) -> tuple[PaymentRequirements, str, int]:
        accepted = payload.accepted
        if accepted is None and isinstance(payload, PaymentPayload):  # x402 v1: no echoed terms
            if terms.amount is None or route.amount is not None:
                raise InvalidPaymentError(
                    "x402 v1 payments are accepted for fixed prices only", reason=reasons.INVALID_X402_VERSION
                )
            if payload.scheme != "exact" or payload.network != terms.network:
                raise InvalidPaymentError("v1 payment is for another scheme or network", reason=reasons.INVALID_NETWORK)
            deadline = int(self._clock()) + terms.max_timeout_seconds
            fresh_id = secrets.token_hex(16)
            offer = sealed_offer(self._sealer, terms, terms.amount, fresh_id, deadline, terms.pay_to)
            self._issue((fresh_id, terms.id, terms.network, terms.asset, terms.pay_to, terms.amount, "", deadline))
            return PaymentRequirements.model_validate(offer), fresh_id, deadline
        assert accepted is not None
        if accepted.scheme != offer_scheme(terms):
            raise InvalidPaymentError(f"scheme {accepted.scheme!r} is not offered", reason=reasons.INVALID_SCHEME)
        if isinstance(payload, UptoPaymentPayload) != (accepted.scheme == "upto"):
            raise InvalidPaymentError(
                f"the payload is not one of scheme {accepted.scheme!r}", reason=reasons.INVALID_SCHEME
            )
        extra = accepted.extra
        challenge_id: Any = extra.get("challengeId")
        expires: Any = extra.get("expiresAt")
        if not isinstance(challenge_id, str) or not isinstance(expires, int) or isinstance(expires, bool):
            raise InvalidPaymentError(
                "the accepted terms are not those of a challenge of this route",
                reason=reasons.INVALID_REQUIREMENTS,
            )
        if not self._sealer.check(
            extra.get("seal"),
            *sealed_terms(
                challenge_id,
                terms.id,
                accepted.network,
                accepted.asset,
                accepted.pay_to,
                accepted.amount,
                accepted.max_timeout_seconds,
                expires,
            ),
        ):
            raise InvalidPaymentError(
                "the accepted terms were altered or belong to another route",
                reason=reasons.INVALID_REQUIREMENTS,
            )
        # An expired challenge still goes to the platform: a payment made on it gets its outcome
        # (the platform settles no new one on it, and answers challenge_expired instead).
        return accepted, challenge_id, expires

    def _settled(
        self,
        route: PaidRoute,
        terms: EndpointTerms,
        request: RequestView,
        native: Any,
        reply: PlatformReply,
        pay_to: str,
        asset: str,
    ) -> Step:
        """The platform's answer to a settlement of the terms accepted (``pay_to``, ``asset``: the
        seller's own, which the platform does not echo)."""
        if reply.status in (401, 403, 404, 503):  # refused by the platform: nothing was taken
            return self._platform_failure(_reply_error(reply), "settlement")
        if reply.status == 409 and _reply_error(reply).code == payment_identifier.CONFLICT:
            return conflict_answer(terms.network, _reply_error(reply).message)
        unknown = SettlementResponse(success=False, error_reason=reasons.SETTLEMENT_PENDING, network=terms.network)
        if reply.status != 200 or not isinstance(reply.data, dict):
            logger.error("settlement answered %d; answering pending", reply.status)
            return pending_answer(unknown)
        data = reply.data
        try:
            response = SettlementResponse.model_validate(data.get("settlement"))
        except ValueError:
            logger.error("malformed settlement reply; answering pending")
            return pending_answer(unknown)
        header = (PAYMENT_RESPONSE, encode_header(response))
        if data.get("status") == "settled" and response.success:
            receipt = response.receipt or {}
            settlement = Settlement(
                transaction=response.transaction,
                network=response.network,
                payer=response.payer or "",
                pay_to=pay_to,
                asset=asset,
                amount=response.amount or 0,
                challenge_id=str(receipt.get("challengeId", "")),
                endpoint_id=terms.id,
                receipt={str(k): str(v) for k, v in receipt.items()},
                response=response,
            )
            return Serve(settlement, [header, EXPOSE_HEADERS])
        if data.get("status") == "pending":
            return pending_answer(response)
        reason = response.error_reason or reasons.UNEXPECTED_SETTLE_ERROR
        message = str(data.get("message") or f"the payment could not be settled: {reason}")
        answer = yield from self._challenge(route, terms, request, native, reason, message)
        return Answer(answer.status, [*answer.headers, header], answer.body, reason)

    # -- metered routes (upto) ----------------------------------------------------------------

    def _authorize(
        self,
        route: PaidRoute,
        terms: EndpointTerms,
        request: RequestView,
        native: Any,
        accepted: PaymentRequirements,
        challenge_id: str,
        body: dict[str, Any],
    ) -> Step:
        """Have the platform verify and hold an upto payment before the handler runs."""
        queued = self._withdraw(challenge_id)
        try:
            reply = yield PlatformCall("POST", "/agent/settlements", body, timeout=self.settle_timeout)
        except PlatformError as exc:
            self._requeue(queued)
            return self._platform_failure(exc, "authorization")
        if reply.status != 200:
            self._requeue(queued)
        if reply.status in (401, 403, 404, 503) or reply.status != 200 or not isinstance(reply.data, dict):
            return self._platform_failure(_reply_error(reply), "authorization")
        data = reply.data
        try:
            response = SettlementResponse.model_validate(data.get("settlement"))
        except ValueError:
            return self._platform_failure(PlatformError("malformed authorization reply", status=502), "authorization")
        status = data.get("status")
        if status == "authorized":
            payment = MeteredPayment(
                ceiling=accepted.amount,
                payer=response.payer or "",
                network=accepted.network,
                asset=accepted.asset,
                pay_to=accepted.pay_to,
                decimals=terms.decimals,
                currency=terms.currency,
                challenge_id=challenge_id,
                endpoint_id=terms.id,
                payment_id=str(data.get("paymentId") or ""),
            )
            return ServeMetered(payment)
        header = (PAYMENT_RESPONSE, encode_header(response))
        if status == "pending":
            return pending_answer(response)
        if status == "settled":  # this authorization was used by an earlier request: its outcome stands
            message = (
                f"this payment was settled already ({response.amount} atomic units, transaction "
                f"{response.transaction or 'none'}); an upto authorization pays for one request: sign a new one"
            )
            answer = yield from self._challenge(route, terms, request, native, reasons.PERMIT2_NONCE_USED, message)
            return Answer(answer.status, [*answer.headers, header], answer.body, reasons.PERMIT2_NONCE_USED)
        reason = response.error_reason or reasons.UNEXPECTED_SETTLE_ERROR
        message = str(data.get("message") or f"the payment could not be authorized: {reason}")
        if reason != reasons.PERMIT2_ALLOWANCE_REQUIRED:
            answer = yield from self._challenge(route, terms, request, native, reason, message)
            return Answer(answer.status, [*answer.headers, header], answer.body, reason)
        # 412: the payer must approve Permit2 once, or send an EIP-2612 permit with the payment; the
        # new challenge carries the payer's permit nonce as the platform read it.
        hint = (response.extensions or {}).get(EIP2612_EXTENSION)
        answer = yield from self._challenge(
            route, terms, request, native, reason, message, eip2612=hint if isinstance(hint, dict) else None
        )
        return Answer(412, [*answer.headers, header], answer.body, reason)

    def finish(self, payment: MeteredPayment, *, served: bool = True) -> FinishStep:
        """Settle a metered request for what its handler reported (at most the ceiling), as its
        response starts: the headers to add to the response (``PAYMENT-RESPONSE``: settled, or
        pending when its outcome is not known yet), or an `Answer` to send instead when the platform
        refused the settlement (the payer's balance fell below the usage, say). ``served=False``:
        the handler failed without a response; nothing is charged, and the authorization is closed."""
        amount = payment.close() if served else 0
        network = payment.network
        unknown = SettlementResponse(success=False, error_reason=reasons.SETTLEMENT_PENDING, network=network)
        try:
            reply = yield self._capture_call(payment.payment_id, amount)
        except PlatformError as exc:
            logger.error("metered settlement call failed: %s; answering pending", exc.message)
            return [(PAYMENT_RESPONSE, encode_header(unknown)), EXPOSE_HEADERS]
        data = reply.data if isinstance(reply.data, dict) else {}
        try:
            response = SettlementResponse.model_validate(data.get("settlement"))
        except ValueError:
            logger.error("metered settlement answered %d without a settlement; answering pending", reply.status)
            return [(PAYMENT_RESPONSE, encode_header(unknown)), EXPOSE_HEADERS]
        header = (PAYMENT_RESPONSE, encode_header(response))
        status = data.get("status")
        if reply.status == 200 and status == "settled" and response.success:
            receipt = response.receipt or {}
            payment.settlement = Settlement(
                transaction=response.transaction,
                network=response.network,
                payer=response.payer or payment.payer,
                pay_to=payment.pay_to,
                asset=payment.asset,
                amount=response.amount or 0,
                challenge_id=payment.challenge_id,
                endpoint_id=payment.endpoint_id,
                receipt={str(k): str(v) for k, v in receipt.items()},
                response=response,
            )
            return [header, EXPOSE_HEADERS]
        if reply.status == 200 and status == "failed":
            reason = response.error_reason or reasons.UNEXPECTED_SETTLE_ERROR
            logger.warning("metered settlement of challenge %s failed: %s", payment.challenge_id, reason)
            body_out = {
                "error": {
                    "type": "payment_error",
                    "code": reason,
                    "message": str(data.get("message") or "the payment could not be settled"),
                }
            }
            return json_answer(402, body_out, [header], reason)
        return [header, EXPOSE_HEADERS]  # pending: the response is served, the receipt follows

    # -- challenges -------------------------------------------------------------------------

    def _price(
        self, route: PaidRoute, terms: EndpointTerms, native: Any
    ) -> Generator[PlatformCall | ComputeAmount, Any, int | Answer]:
        """This request's amount in atomic units: what the route's amount callback says (dynamic
        pricing), or the endpoint's fixed amount; a 500 answer when neither gives one."""
        if not _priced_per_request(route, terms):
            if terms.amount is None:
                return self._misconfigured(f"endpoint {terms.id} has no fixed amount")
            return terms.amount
        if route.amount is None:
            return self._misconfigured(f"endpoint {terms.id} uses dynamic pricing but its route has no amount callback")
        try:
            price = yield ComputeAmount(route.amount, native)
            return to_atomic(price, decimals=terms.decimals, symbol=terms.currency)
        except PriceError as exc:
            return self._misconfigured(f"the amount callback of endpoint {terms.id} gave a bad price: {exc}")

    def _challenge(
        self,
        route: PaidRoute,
        terms: EndpointTerms,
        request: RequestView,
        native: Any,
        reason: str | None,
        message: str | None,
        *,
        amount: int | None = None,
        eip2612: dict[str, Any] | None = None,
    ) -> AnswerStep:
        if amount is None and terms.amount is not None and not _priced_per_request(route, terms):
            amount = terms.amount  # a fixed price: no generator to step through (the hot path)
        elif amount is None:
            price = yield from self._price(route, terms, native)
            if isinstance(price, Answer):
                return price
            amount = price
        return self._render(route, terms, request, amount, reason, message, eip2612)

    def _render(
        self,
        route: PaidRoute,
        terms: EndpointTerms,
        request: RequestView,
        amount: int,
        reason: str | None,
        message: str | None,
        eip2612: dict[str, Any] | None = None,
    ) -> Answer:
        """A new challenge for ``amount``, registered with the platform (in the background), as the
        request's 402."""
        challenge_id = f"{self._id_prefix}{next(self._id_counter):016x}"
        now = self._clock()
        expires = int(now) + terms.max_timeout_seconds
        self._issue((challenge_id, terms.id, terms.network, terms.asset, terms.pay_to, amount, request.url, expires))
        template = self._template(route, terms, amount, request.method)
        return render_challenge(
            template,
            route,
            terms,
            url=request.url,
            accept=request.accept,
            paywall=self.paywall,
            challenge_id=challenge_id,
            expires=expires,
            seal=self._sealer.seal_challenge(challenge_id, template.fixed, expires),
            now=now,
            reason=reason,
            message=message,
            eip2612=eip2612,
        )

    def _template(self, route: PaidRoute, terms: EndpointTerms, amount: int, method: str) -> ChallengeTemplate:
        """What every 402 of this route, terms and amount shares, built once (see `ChallengeTemplate`)."""
        key = (id(route), id(terms), amount, method if route.discovery is not None else "")
        found = self._templates.get(key)
        if found is not None and found[0] is route and found[1] is terms:
            return found[2]
        built = build_template(route, terms, amount, method)
        if len(self._templates) >= 1024:  # terms refreshed, dynamic prices: start again
            self._templates.clear()
        self._templates[key] = (route, terms, built)
        return built

    # -- sign-in-with-x -----------------------------------------------------------------------

    def _sign_in(self, route: PaidRoute, terms: EndpointTerms, request: RequestView, native: Any) -> Step:
        """Serve a request signed in by a wallet that paid for this route (its earlier settlement),
        or answer the 402 with the reason the sign-in was refused; never serve for free."""
        assert route.sign_in is not None and request.sign_in is not None
        outcome = yield from admit(
            route.sign_in, request.sign_in, request.url, endpoint_id=terms.id, network=terms.network, now=self._clock()
        )
        if isinstance(outcome, Serve):
            return outcome
        reason, text = outcome
        return (yield from self._challenge(route, terms, request, native, reason, text))

    # -- the well-known manifest -------------------------------------------------------------------

    def well_known(self, routes: list[tuple[str, str, PaidRoute]], request_url: str) -> AnswerStep:
        """The ``/.well-known/x402`` answer listing ``routes`` (``(method or "*", path template,
        route)``): each route's terms (advisory; the live 402 is authoritative) and its discovery
        declaration. Endpoints whose terms cannot be fetched are left out.

        The items' URLs are under the configured origin, and the answer may be cached by anyone
        (``public, max-age=60``). Without one they are under the origin of ``request_url`` (the
        request's own: its ``Host``), and the answer says so to caches: ``Vary: Host``, and no shared
        cache keeps it (``private``), so that a request with another ``Host`` cannot have its URLs
        served to others."""
        items = []
        for method, path, route in routes:
            known = self._terms.get(route.endpoint)
            if known is None:
                try:
                    terms = yield from self.fetch_terms(route.endpoint)
                except PlatformError as exc:
                    logger.warning("well-known: endpoint %s left out: %s", route.endpoint, exc.message)
                    continue
            else:
                terms = known[0]
            items.append(manifest_item(method, path, route, terms, _priced_per_request(route, terms)))
        origin = self.origin or origin_of(request_url)
        manifest = well_known_manifest(origin, items, int(self._clock()))
        raw = json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode()
        if self.origin is not None:
            return Answer(200, [("Content-Type", "application/json"), ("Cache-Control", "public, max-age=60")], raw)
        headers = [("Content-Type", "application/json"), ("Cache-Control", "private, max-age=60"), ("Vary", "Host")]
        return Answer(200, headers, raw)

    # -- terms and background work ------------------------------------------------------------

    def fetch_terms(self, endpoint_id: str) -> Generator[PlatformCall, Any, EndpointTerms]:
        """Fetch (and cache) an endpoint's terms from the platform; terms already cached are
        revalidated with their ETag (``If-None-Match``), which the platform answers ``304`` while
        they are unchanged."""
        known = self._terms.get(endpoint_id)
        etag = known[2] if known is not None else None
        headers = (("If-None-Match", etag),) if etag else ()
        reply = yield PlatformCall("GET", f"/agent/endpoints/{endpoint_id}", headers=headers)
        now = self._clock()
        if reply.status == 304 and known is not None:
            self._terms[endpoint_id] = (known[0], now, etag)
            return known[0]
        if reply.status != 200 or not isinstance(reply.data, dict) or "endpoint" not in reply.data:
            raise _reply_error(reply)
        try:
            terms = EndpointTerms.from_api(reply.data["endpoint"])
        except PriceError as exc:
            raise PlatformError(str(exc), status=502) from None
        self._terms[endpoint_id] = (terms, now, reply.etag)
        return terms

    def background(self) -> Generator[PlatformCall, Any, None]:
        """One round of background work: register issued challenges (all of them, a batch a call, up
        to `_REGISTER_ROUND`), refresh stale terms."""
        for _ in range(_REGISTER_ROUND // _REGISTER_BATCH):
            if not (yield from self._register()):
                break
        now = self._clock()
        for endpoint_id, (terms, fetched_at, etag) in list(self._terms.items()):
            if now - fetched_at >= self.refresh_seconds:
                try:
                    yield from self.fetch_terms(endpoint_id)
                except PlatformError as exc:
                    # Keep the old terms, and try again a refresh interval later; warn once a spell.
                    self._terms[endpoint_id] = (terms, now, etag)
                    if endpoint_id not in self._stale:
                        self._stale.add(endpoint_id)
                        logger.warning("could not refresh endpoint %s (keeping the old terms): %s", endpoint_id, exc)
                else:
                    if endpoint_id in self._stale:
                        self._stale.discard(endpoint_id)
                        logger.info("endpoint %s refreshed again", endpoint_id)

    def _register(self) -> Generator[PlatformCall, Any, bool]:
        """Register the oldest batch of issued challenges; whether a full batch went through (so
        that more may be waiting)."""
        with self._lock:
            batch = [self._issued.popitem(last=False)[1] for _ in range(min(len(self._issued), _REGISTER_BATCH))]
        if not batch:
            return False
        body = f'{{"challenges":[{",".join(map(_challenge_json, batch))}]}}'.encode()
        try:
            reply = yield PlatformCall("POST", "/agent/challenges/batch", encoded=body)
            if reply.status != 200:
                raise _reply_error(reply)
        except PlatformError as exc:
            logger.warning("could not register %d challenges (will retry): %s", len(batch), exc)
            self._requeue(*batch)
            return False
        return len(batch) == _REGISTER_BATCH

    def _issue(self, challenge: tuple[Any, ...]) -> None:
        with self._lock:
            if len(self._issued) >= _ISSUED_KEPT:  # the platform has been unreachable for long: drop the oldest
                self._issued.popitem(last=False)
            self._issued[challenge[0]] = challenge

    def _withdraw(self, challenge_id: str) -> tuple[Any, ...] | None:
        """Take a challenge off the registration queue (a paid request's settlement registers it)."""
        with self._lock:
            return self._issued.pop(challenge_id, None)

    def _requeue(self, *challenges: tuple[Any, ...] | None) -> None:
        """Put challenges back at the front of the queue: their registration did not go through."""
        back = [c for c in challenges if c is not None]
        if back:
            with self._lock:
                for challenge in reversed(back):
                    self._issued[challenge[0]] = challenge
                    self._issued.move_to_end(challenge[0], last=False)

    @property
    def has_background_work(self) -> bool:
        now = self._clock()
        return bool(self._issued) or any(now - at >= self.refresh_seconds for _, at, _ in self._terms.values())

    # -- failures -------------------------------------------------------------------------------

    def _platform_failure(self, exc: X402Error, what: str) -> Answer:
        """The answer when the platform could not take a request that carried no payment to it,
        or refused one outright (nothing was taken: the same payment may be sent again)."""
        status = getattr(exc, "status", 0)
        if status in (401, 403, 404):
            return self._misconfigured(f"the platform refused the {what} request ({status}): {exc.message}")
        logger.error("payment platform unavailable during %s: %s (request id %s)", what, exc.message, exc.request_id)
        return error_answer(
            503,
            "payment_platform_unavailable",
            "payments cannot be taken right now; nothing was charged: retry shortly, with the same payment",
            retry_after=2,
        )

    def _misconfigured(self, message: str) -> Answer:
        logger.error("x402 payment configuration error: %s", message)
        return error_answer(500, "payment_configuration_error", "this paid route is misconfigured")


def _challenge_json(challenge: tuple[Any, ...]) -> str:
    """An issued challenge as the JSON its registration sends (written out: this is every 402's
    cost, a batch at a time; the members a route's challenges share are written once)."""
    challenge_id, endpoint_id, network, asset, pay_to, amount, resource, expires = challenge
    terms = (endpoint_id, network, asset, pay_to)
    shared = _SHARED_JSON.get(terms)
    if shared is None:
        if len(_SHARED_JSON) >= 1024:
            _SHARED_JSON.clear()
        shared = _SHARED_JSON[terms] = (
            f'"endpointId":{_json_str(endpoint_id)},"network":{_json_str(network)},'
            f'"asset":{_json_str(asset)},"payTo":{_json_str(pay_to)}'
        )
    return (
        f'{{"challengeId":{_json_str(challenge_id)},{shared},"amount":"{int(amount)}",'
        f'"resource":{_json_str(resource)},"expiresAt":{int(expires)}}}'
    )


_SHARED_JSON: dict[tuple[Any, ...], str] = {}


def _priced_per_request(route: PaidRoute, terms: EndpointTerms) -> bool:
    """Whether the route's amount callback prices each request (dynamic pricing), rather than the
    endpoint's fixed amount (or a metered endpoint's ceiling)."""
    if terms.pricing_mode == "metered":
        return False
    return terms.pricing_mode == "dynamic" or route.amount is not None


def _reply_error(reply: PlatformReply) -> PlatformError:
    error = reply.data.get("error") if isinstance(reply.data, dict) else None
    if isinstance(error, dict):
        return PlatformError(
            str(error.get("message", "platform error")),
            status=reply.status,
            code=str(error.get("code")),
            error_type=str(error.get("type")),
            request_id=reply.request_id,
        )
    return PlatformError(f"platform answered {reply.status}", status=reply.status, request_id=reply.request_id)
