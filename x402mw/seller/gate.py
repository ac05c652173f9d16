"""The sans-IO payment gate: a request view in, a decision out.

`PaymentGate.process` is a generator. It yields small commands (`PlatformCall`, `ComputeAmount`)
that a driver runs, sync or async (see `x402mw.seller.drivers`), and returns a `Decision`:
`Answer` (a 402 challenge, a pending settlement, an outage) or `Serve` (run the handler with the
settlement). No framework, no I/O here, so every adapter shares this one implementation.

A paid MCP tool (`PaymentGate.hold`) is settled after it ran, as the x402 MCP transport orders it:
the payment is verified and claimed first (`Held`), then settled (`PaymentGate.capture`) once the tool
succeeded or given up (`PaymentGate.release`) when it failed.

The unpaid path makes no network call once an endpoint's terms are known: the challenge is issued
locally and sealed with an HMAC keyed from the API key, so that any worker process can check the
retried request's ``accepted`` terms; issued challenges reach the platform in background batches.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from x402mw.errors import ConfigurationError, InvalidPaymentError, PlatformError, PriceError, X402Error
from x402mw.protocol import reasons
from x402mw.protocol.codec import PAYMENT_REQUIRED, PAYMENT_RESPONSE, decode_payment_payload, encode_header
from x402mw.protocol.models import PaymentPayload, PaymentRequirements, SettlementResponse
from x402mw.protocol.prices import to_atomic
from x402mw.protocol.seals import Sealer, sealed_terms
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

__all__ = [
    "DEFAULT_PLATFORM_URL",
    "EXPOSE_HEADERS",
    "TERMS_REFRESH_SECONDS",
    "PaymentGate",
    "RequestView",
    "internal_error_answer",
]

logger = logging.getLogger("x402mw.seller")
_ISSUED_KEPT = 100_000  # challenges kept for registration while the platform cannot be reached
_REGISTER_BATCH = 500  # challenges registered per call
TERMS_REFRESH_SECONDS = 1.0
"""How old an endpoint's terms may get before the background work revalidates them (a conditional
request, ``304`` while unchanged): with the work's 0.25 s rounds, a change made on the platform is
in the challenges issued from about 1.25 s later, within the 2 s the documentation states."""

EXPOSE_HEADERS = ("Access-Control-Expose-Headers", "PAYMENT-REQUIRED, PAYMENT-RESPONSE")
DEFAULT_PLATFORM_URL = "http://127.0.0.1:4402/v1"
Step = Generator[PlatformCall | ComputeAmount, Any, Decision]
AnswerStep = Generator[PlatformCall | ComputeAmount, Any, Answer]


@dataclass(frozen=True, slots=True)
class RequestView:
    """The little a gate needs to know of a request. ``url`` is the absolute URL of the resource;
    ``payment`` is the ``PAYMENT-SIGNATURE`` header, or the v1 ``X-PAYMENT`` header, or the payload
    as JSON (an MCP tool call's ``_meta["x402/payment"]``), or None."""

    method: str
    url: str
    payment: str | dict[str, Any] | None


_ANSWER_HEADERS = (("Content-Type", "application/json"), ("Cache-Control", "no-store"), EXPOSE_HEADERS)


def _json_answer(
    status: int, body: dict[str, Any], headers: list[tuple[str, str]] | None = None, reason: str | None = None
) -> Answer:
    raw = json.dumps(body, separators=(",", ":")).encode()
    base = [("Content-Type", "application/json"), ("Cache-Control", "no-store"), EXPOSE_HEADERS]
    return Answer(status, base + (headers or []), raw, reason)


def internal_error_answer() -> Answer:
    """The answer to a request whose payment check failed unexpectedly (log the error first)."""
    return _error_answer(500, "internal_error", "the payment check failed unexpectedly")


def _error_answer(status: int, code: str, message: str, retry_after: int | None = None) -> Answer:
    extra = [("Retry-After", str(retry_after))] if retry_after is not None else []
    return _json_answer(status, {"error": {"type": "api_error", "code": code, "message": message}}, extra, code)


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
    ) -> None:
        problems = []
        if not isinstance(api_key, str) or not api_key.startswith(("sk_test_", "sk_live_")):
            problems.append("api_key must be a merchant API key (sk_test_... or sk_live_...)")
        if not isinstance(platform_url, str) or not platform_url.startswith(("http://", "https://")):
            problems.append("platform_url must be an http(s) URL such as https://pay.example.com/v1")
        if isinstance(settle_timeout, bool) or not isinstance(settle_timeout, int | float) or settle_timeout <= 0:
            problems.append("settle_timeout must be positive")
        if problems:
            raise ConfigurationError(problems)
        self.api_key = api_key
        self.platform_url = platform_url.rstrip("/")
        self.settle_timeout = settle_timeout
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self._sealer = Sealer(api_key)
        # Each endpoint's terms, when they were last known current, and their ETag.
        self._terms: dict[str, tuple[EndpointTerms, float, str | None]] = {}
        self._stale: set[str] = set()  # endpoints whose last revalidation failed (warned once)
        # Challenges issued and not yet registered with the platform, by id, oldest first.
        self._issued: dict[str, tuple[Any, ...]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PaymentGate(platform_url={self.platform_url!r}, api_key=<hidden>)"

    # -- the request path -------------------------------------------------------------------

    def process(self, route: PaidRoute, request: RequestView, native: Any = None) -> Step:
        """Decide for one request. ``native`` is the framework's request, given to amount callbacks."""
        decision = yield from self._paid(route, request, native, hold=False)
        assert not isinstance(decision, Held)
        return decision

    def hold(
        self, route: PaidRoute, request: RequestView, native: Any = None
    ) -> Generator[PlatformCall | ComputeAmount, Any, Answer | Held]:
        """Decide for one call of a paid MCP tool: an `Answer` (a challenge, a refusal, an outage), or
        `Held`: the payment is verified and claimed, nothing taken; run the tool, then `capture` or
        `release` it."""
        decision = yield from self._paid(route, request, native, hold=True)
        assert not isinstance(decision, Serve)
        return decision

    def capture(self, held: Held) -> Step:
        """Settle a held payment (its tool succeeded): `Serve` with the settlement, or the `Answer`
        of a payment that could not be settled (then the tool's result must not be given)."""
        route, terms, request, native = held.context
        body = held.body | {"capture": held.payment_id}
        try:
            reply = yield PlatformCall("POST", "/agent/settlements", body, timeout=self.settle_timeout)
        except PlatformError as exc:
            logger.error("settlement call failed: %s; answering pending", exc.message)
            return _pending(
                SettlementResponse(success=False, error_reason=reasons.SETTLEMENT_PENDING, network=held.network)
            )
        return (yield from self._settled(route, terms, request, native, reply))

    def release(self, held: Held) -> Generator[PlatformCall, Any, bool]:
        """Give up a held payment (its tool failed): nothing is taken, and the agent may use the same
        authorization again. False (and logged) if the platform could not be told: the payment then
        stays held, unsent, until its authorization expires."""
        try:
            reply = yield PlatformCall("POST", f"/agent/settlements/{held.payment_id}/release")
        except PlatformError as exc:
            reply = PlatformReply(0, {"error": {"message": exc.message}})
        body = held.body
        # Its challenge is recorded with the payment's outcome; a released payment has none.
        self._issue(
            (
                body["challengeId"],
                body["endpointId"],
                held.network,
                body["accepted"].get("asset", ""),
                body["accepted"].get("payTo", ""),
                held.amount,
                body["resource"],
                body["expiresAt"],
            )
        )
        if reply.status != 200:
            logger.error("could not release held payment %s: %s", held.payment_id, _reply_error(reply).message)
            return False
        return True

    def _paid(
        self, route: PaidRoute, request: RequestView, native: Any, *, hold: bool
    ) -> Generator[PlatformCall | ComputeAmount, Any, Decision | Held]:
        known = self._terms.get(route.endpoint)
        if known is None:
            try:
                terms = yield from self.fetch_terms(route.endpoint)
            except PlatformError as exc:
                return self._platform_failure(exc, f"terms of endpoint {route.endpoint}")
        else:
            terms = known[0]
        if request.payment is None:
            return (yield from self._challenge(route, terms, request, native, None, None))
        try:
            payload = decode_payment_payload(request.payment)
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
        if hold:
            body["hold"] = True
        # The settlement call carries the challenge, which the platform records with the payment's
        # outcome: it is registered once, by that call, unless the call is not answered.
        queued = self._withdraw(challenge_id)
        try:
            reply = yield PlatformCall("POST", "/agent/settlements", body, timeout=self.settle_timeout)
        except PlatformError as exc:
            self._requeue(queued)
            # The platform may have received the payment before the connection failed.
            logger.error("settlement call failed: %s; answering pending", exc.message)
            return _pending(
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
                body=body,
                context=(route, terms, request, native),
            )
        return (yield from self._settled(route, terms, request, native, reply))

    def _check_accepted(
        self, payload: PaymentPayload, route: PaidRoute, terms: EndpointTerms
    ) -> tuple[PaymentRequirements, str, int]:
        accepted = payload.accepted
        if accepted is None:  # x402 v1: no echoed terms; only a fixed price can be matched
            if terms.amount is None or route.amount is not None:
                raise InvalidPaymentError(
                    "x402 v1 payments are accepted for fixed prices only", reason=reasons.INVALID_X402_VERSION
                )
            if payload.scheme != "exact" or payload.network != terms.network:
                raise InvalidPaymentError("v1 payment is for another scheme or network", reason=reasons.INVALID_NETWORK)
            deadline = int(self._clock()) + terms.max_timeout_seconds
            fresh_id = secrets.token_hex(16)
            offer = self._offer(terms, terms.amount, fresh_id, deadline, terms.pay_to)
            self._issue((fresh_id, terms.id, terms.network, terms.asset, terms.pay_to, terms.amount, "", deadline))
            return PaymentRequirements.model_validate(offer), fresh_id, deadline
        if accepted.scheme != "exact":
            raise InvalidPaymentError(f"scheme {accepted.scheme!r} is not offered", reason=reasons.INVALID_SCHEME)
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
        self, route: PaidRoute, terms: EndpointTerms, request: RequestView, native: Any, reply: PlatformReply
    ) -> Step:
        if reply.status in (401, 403, 404, 503):  # refused by the platform: nothing was taken
            return self._platform_failure(_reply_error(reply), "settlement")
        unknown = SettlementResponse(success=False, error_reason=reasons.SETTLEMENT_PENDING, network=terms.network)
        if reply.status != 200 or not isinstance(reply.data, dict):
            logger.error("settlement answered %d; answering pending", reply.status)
            return _pending(unknown)
        data = reply.data
        try:
            response = SettlementResponse.model_validate(data.get("settlement"))
        except ValueError:
            logger.error("malformed settlement reply; answering pending")
            return _pending(unknown)
        header = (PAYMENT_RESPONSE, encode_header(response))
        if data.get("status") == "settled" and response.success:
            receipt = response.receipt or {}
            accepted = data.get("accepted") or {}
            settlement = Settlement(
                transaction=response.transaction,
                network=response.network,
                payer=response.payer or "",
                pay_to=str(receipt.get("payTo", accepted.get("payTo", ""))),
                asset=str(receipt.get("asset", terms.asset)),
                amount=response.amount or 0,
                challenge_id=str(receipt.get("challengeId", "")),
                endpoint_id=terms.id,
                receipt={str(k): str(v) for k, v in receipt.items()},
                response=response,
            )
            return Serve(settlement, [header, EXPOSE_HEADERS])
        if data.get("status") == "pending":
            return _pending(response)
        reason = response.error_reason or reasons.UNEXPECTED_SETTLE_ERROR
        message = str(data.get("message") or f"the payment could not be settled: {reason}")
        answer = yield from self._challenge(route, terms, request, native, reason, message)
        return Answer(answer.status, [*answer.headers, header], answer.body, reason)

    # -- challenges -------------------------------------------------------------------------

    def _offer(self, terms: EndpointTerms, amount: int, challenge_id: str, expires: int, pay_to: str) -> dict[str, Any]:
        """The wire form of one sealed ``accepts`` entry (built directly: this is the hot path)."""
        seal = self._sealer.seal(
            *sealed_terms(
                challenge_id, terms.id, terms.network, terms.asset, pay_to, amount, terms.max_timeout_seconds, expires
            )
        )
        return {
            "scheme": "exact",
            "network": terms.network,
            "amount": str(amount),
            "asset": terms.asset,
            "payTo": pay_to,
            "maxTimeoutSeconds": terms.max_timeout_seconds,
            "extra": {
                "name": terms.eip712_name,
                "version": terms.eip712_version,
                "challengeId": challenge_id,
                "expiresAt": expires,
                "seal": seal,
            },
        }

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
    ) -> AnswerStep:
        if amount is None:
            price = yield from self._price(route, terms, native)
            if isinstance(price, Answer):
                return price
            amount = price
        challenge_id = secrets.token_hex(16)
        expires = int(self._clock()) + terms.max_timeout_seconds
        offer = self._offer(terms, amount, challenge_id, expires, terms.pay_to)
        self._issue((challenge_id, terms.id, terms.network, terms.asset, terms.pay_to, amount, request.url, expires))
        required: dict[str, Any] = {"x402Version": 2}
        if reason:
            required["error"] = reason
        resource: dict[str, Any] = {"url": request.url}
        if route.description or terms.name:
            resource["description"] = route.description or terms.name
        if route.mime_type:
            resource["mimeType"] = route.mime_type
        required["resource"] = resource
        required["accepts"] = [offer]
        raw = json.dumps(required, separators=(",", ":"), ensure_ascii=False).encode()
        header = (PAYMENT_REQUIRED, base64.b64encode(raw).decode("ascii"))
        if message:
            raw = json.dumps(required | {"message": message}, separators=(",", ":"), ensure_ascii=False).encode()
        return Answer(402, [*_ANSWER_HEADERS, header], raw, reason)

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
        """One round of background work: register issued challenges, refresh stale terms."""
        with self._lock:
            batch = [self._issued.pop(key) for key in list(itertools.islice(self._issued, _REGISTER_BATCH))]
        if batch:
            keys = ("challengeId", "endpointId", "network", "asset", "payTo", "amount", "resource", "expiresAt")
            challenges = [dict(zip(keys, (*item[:5], str(item[5]), *item[6:]), strict=True)) for item in batch]
            try:
                reply = yield PlatformCall("POST", "/agent/challenges/batch", {"challenges": challenges})
                if reply.status != 200:
                    raise _reply_error(reply)
            except PlatformError as exc:
                logger.warning("could not register %d challenges (will retry): %s", len(batch), exc)
                self._requeue(*batch)
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

    def _issue(self, challenge: tuple[Any, ...]) -> None:
        with self._lock:
            if len(self._issued) >= _ISSUED_KEPT:  # the platform has been unreachable for long: drop the oldest
                del self._issued[next(iter(self._issued))]
            self._issued[challenge[0]] = challenge

    def _withdraw(self, challenge_id: str) -> tuple[Any, ...] | None:
        """Take a challenge off the registration queue (a paid request's settlement registers it)."""
        with self._lock:
            return self._issued.pop(challenge_id, None)

    def _requeue(self, *challenges: tuple[Any, ...] | None) -> None:
        """Put challenges back at the front of the queue: their registration did not go through."""
        back = {c[0]: c for c in challenges if c is not None}
        if back:
            with self._lock:
                self._issued = back | self._issued

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
        return _error_answer(
            503,
            "payment_platform_unavailable",
            "payments cannot be taken right now; nothing was charged: retry shortly, with the same payment",
            retry_after=2,
        )

    def _misconfigured(self, message: str) -> Answer:
        logger.error("x402 payment configuration error: %s", message)
        return _error_answer(500, "payment_configuration_error", "this paid route is misconfigured")


def _pending(response: SettlementResponse) -> Answer:
    """402 ``settlement_pending``: the payment went to the platform and its outcome is not known
    yet (sent on-chain and not final, or the platform's answer was lost); the same signature,
    sent again, gets it. Never an answer that invites a second signature."""
    body = {
        "error": {
            "type": "payment_error",
            "code": reasons.SETTLEMENT_PENDING,
            "message": "the payment is not final yet; retry the same PAYMENT-SIGNATURE to receive the resource",
            "transaction": response.transaction,
        }
    }
    headers = [(PAYMENT_RESPONSE, encode_header(response)), ("Retry-After", "1")]
    return _json_answer(402, body, headers, reasons.SETTLEMENT_PENDING)


def _priced_per_request(route: PaidRoute, terms: EndpointTerms) -> bool:
    """Whether the route's amount callback prices each request (dynamic pricing), rather than the
    endpoint's fixed amount."""
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
