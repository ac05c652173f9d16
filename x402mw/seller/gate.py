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
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any

from x402mw.errors import ConfigurationError, InvalidPaymentError, PlatformError, PriceError, X402Error
from x402mw.protocol import payment_identifier, reasons
from x402mw.protocol.codec import PAYMENT_REQUIRED, PAYMENT_RESPONSE, decode_any_payment_payload, encode_header
from x402mw.protocol.models import (
    AnyPaymentPayload,
    PaymentPayload,
    PaymentRequirements,
    SettlementResponse,
    UptoPaymentPayload,
)
from x402mw.protocol.networks import get_network
from x402mw.protocol.prices import to_atomic
from x402mw.protocol.seals import Sealer, fixed_terms, sealed_terms
from x402mw.protocol.sign_in import decode_sign_in
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
from x402mw.seller.paywall import Paywall

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
# Declared in every 402 of an exact route: a client may name each logical request with a payment
# identifier, so that its retry gets the first answer (the platform keeps them) and an id reused for
# another payment is a 409.
_EXTENSIONS = {payment_identifier.PAYMENT_IDENTIFIER: payment_identifier.DECLARATION}
Step = Generator[PlatformCall | ComputeAmount, Any, Decision | ServeMetered]
FinishStep = Generator[PlatformCall, Any, "list[tuple[str, str]] | Answer"]
EIP2612_EXTENSION = "eip2612GasSponsoring"
_EIP2612_OFFER = {
    "info": {
        "description": "the facilitator accepts an EIP-2612 permit for Permit2 (gasless first use)",
        "version": "1",
    }
}
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
        paywall: Paywall | None = None,
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
        if problems:
            raise ConfigurationError(problems)
        self.api_key = api_key
        self.platform_url = platform_url.rstrip("/")
        self.settle_timeout = settle_timeout
        self.refresh_seconds = refresh_seconds
        self._clock = clock
        self.paywall = paywall if paywall is not None else Paywall()
        self._sealer = Sealer(api_key)
        # Challenge ids: unique per process by a counter, across processes by a random prefix.
        self._id_prefix = secrets.token_hex(8)
        self._id_counter = itertools.count(secrets.randbits(32))
        self._templates: dict[tuple[Any, ...], tuple[PaidRoute, EndpointTerms, _Template]] = {}
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
    ) -> Generator[PlatformCall | ComputeAmount, Any, Answer | Held | ServeMetered]:
        """Decide for one call of a paid MCP tool: an `Answer` (a challenge, a refusal, an outage), or
        `Held`: the payment is verified and claimed, nothing taken; run the tool, then `capture` or
        `release` it. `ServeMetered` for an ``upto`` payment of a metered endpoint (held the same way;
        settled by `finish`)."""
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
            offer = self._offer(terms, terms.amount, fresh_id, deadline, terms.pay_to)
            self._issue((fresh_id, terms.id, terms.network, terms.asset, terms.pay_to, terms.amount, "", deadline))
            return PaymentRequirements.model_validate(offer), fresh_id, deadline
        assert accepted is not None
        if accepted.scheme != _scheme(terms):
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
        self, route: PaidRoute, terms: EndpointTerms, request: RequestView, native: Any, reply: PlatformReply
    ) -> Step:
        if reply.status in (401, 403, 404, 503):  # refused by the platform: nothing was taken
            return self._platform_failure(_reply_error(reply), "settlement")
        if reply.status == 409 and _reply_error(reply).code == payment_identifier.CONFLICT:
            return _conflict(terms.network, _reply_error(reply).message)
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
                _body=body,
            )
            return ServeMetered(payment)
        header = (PAYMENT_RESPONSE, encode_header(response))
        if status == "pending":
            return _pending(response)
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
        body = payment._body | {"settleAmount": amount}
        network = payment.network
        unknown = SettlementResponse(success=False, error_reason=reasons.SETTLEMENT_PENDING, network=network)
        try:
            reply = yield PlatformCall("POST", "/agent/settlements", body, timeout=self.settle_timeout)
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
            return _json_answer(402, body_out, [header], reason)
        return [header, EXPOSE_HEADERS]  # pending: the response is served, the receipt follows

    # -- challenges -------------------------------------------------------------------------

    def _offer(self, terms: EndpointTerms, amount: int, challenge_id: str, expires: int, pay_to: str) -> dict[str, Any]:
        """The wire form of one sealed ``accepts`` entry (built directly: this is the hot path)."""
        seal = self._sealer.seal(
            *sealed_terms(
                challenge_id, terms.id, terms.network, terms.asset, pay_to, amount, terms.max_timeout_seconds, expires
            )
        )
        # the token's symbol, for agents that do not know this chain's tokens (the dev chain)
        extra: dict[str, Any] = {"name": terms.eip712_name, "version": terms.eip712_version, "currency": terms.currency}
        if terms.pricing_mode == "metered":  # upto: the ceiling, settled through Permit2 by the facilitator
            extra["assetTransferMethod"] = "permit2"
            extra["facilitatorAddress"] = terms.facilitator_address
        extra |= {"challengeId": challenge_id, "expiresAt": expires, "seal": seal}
        return {
            "scheme": _scheme(terms),
            "network": terms.network,
            "amount": str(amount),
            "asset": terms.asset,
            "payTo": pay_to,
            "maxTimeoutSeconds": terms.max_timeout_seconds,
            "extra": extra,
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
        eip2612: dict[str, Any] | None = None,
    ) -> AnswerStep:
        if amount is None and terms.amount is not None and not _priced_per_request(route, terms):
            amount = terms.amount  # a fixed price: no generator to step through (the hot path)
        elif amount is None:
            price = yield from self._price(route, terms, native)
            if isinstance(price, Answer):
                return price
            amount = price
        challenge_id = f"{self._id_prefix}{next(self._id_counter):016x}"
        now = self._clock()
        expires = int(now) + terms.max_timeout_seconds
        self._issue((challenge_id, terms.id, terms.network, terms.asset, terms.pay_to, amount, request.url, expires))
        template = self._template(route, terms, amount, request.method)
        error = f'"error":{_json_text(reason)},' if reason else ""
        seal = self._sealer.seal_challenge(challenge_id, template.fixed, expires)
        text = (
            f'{{"x402Version":2,{error}"resource":{{"url":{_json_text(request.url)}{template.head}'
            f'{challenge_id}","expiresAt":{expires},"seal":"{seal}"}}}}]'
        )
        if template.tail_b64 is None:  # no extensions: a short tail
            text += "}"
            raw = text.encode()
            header = (PAYMENT_REQUIRED, base64.b64encode(raw).decode("ascii"))
        else:
            # The declarations' JSON is the same in every 402: it ends the text, and the part before
            # it is padded with JSON whitespace to whole base64 groups, so that its base64 is cached.
            text += template.opening
            if route.sign_in is not None:  # fresh for each 402; the challenge id is its nonce
                text += route.sign_in.info_json(request.url, now, challenge_id)
            raw = text.encode()
            raw += b" " * (-len(raw) % 3)
            header = (PAYMENT_REQUIRED, base64.b64encode(raw).decode("ascii") + template.tail_b64)
            raw += template.tail
            text = raw.decode()
        if eip2612 is not None and isinstance(eip2612.get("info"), dict):
            # (the rare 412 of a metered route: the EIP-2612 declaration with the payer's permit nonce)
            required = json.loads(text)
            offered = {"info": {**_EIP2612_OFFER["info"], **eip2612["info"]}}
            required.setdefault("extensions", {})[EIP2612_EXTENSION] = offered
            raw = json.dumps(required, separators=(",", ":"), ensure_ascii=False).encode()
            header = (PAYMENT_REQUIRED, base64.b64encode(raw).decode("ascii"))
            text = raw.decode()
        accept = request.accept
        if accept is not None and "text/html" in accept and self.paywall.enabled:
            return self._paywall_page(json.loads(text), terms, header, reason)
        if message:
            raw = (text[:-1] + ',"message":' + json.dumps(message, ensure_ascii=False) + "}").encode()
        return Answer(402, [*_ANSWER_HEADERS, header], raw, reason)

    def _template(self, route: PaidRoute, terms: EndpointTerms, amount: int, method: str) -> _Template:
        """What every 402 of this route, terms and amount shares, built once (see `_Template`)."""
        key = (id(route), id(terms), amount, method if route.discovery is not None else "")
        found = self._templates.get(key)
        if found is not None and found[0] is route and found[1] is terms:
            return found[2]
        resource = ""
        if route.description or terms.name:
            resource += f',"description":{_json_text(route.description or terms.name)}'
        if route.mime_type:
            resource += f',"mimeType":{_json_text(route.mime_type)}'
        # the token's symbol, for agents that do not know this chain's tokens (the dev chain)
        extra: dict[str, Any] = {"name": terms.eip712_name, "version": terms.eip712_version, "currency": terms.currency}
        if terms.pricing_mode == "metered":  # upto: the ceiling, settled through Permit2 by the facilitator
            extra["assetTransferMethod"] = "permit2"
            extra["facilitatorAddress"] = terms.facilitator_address
        offer = json.dumps(
            {
                "scheme": _scheme(terms),
                "network": terms.network,
                "amount": str(amount),
                "asset": terms.asset,
                "payTo": terms.pay_to,
                "maxTimeoutSeconds": terms.max_timeout_seconds,
                "extra": extra | {"challengeId": ""},
            },
            separators=(",", ":"),
            ensure_ascii=False,
        )
        head = resource + '},"accepts":[' + offer.removesuffix('""}}') + '"'
        fixed = fixed_terms(terms.id, terms.network, terms.asset, terms.pay_to, amount, terms.max_timeout_seconds)
        # An exact route's 402 declares the payment-identifier extension, a metered one's the EIP-2612
        # gas sponsoring of its first use; a route's own declarations follow.
        extensions = {EIP2612_EXTENSION: _EIP2612_OFFER} if terms.pricing_mode == "metered" else _EXTENSIONS
        declared = ",".join(f"{encode_basestring(k)}:{_compact(v)}" for k, v in extensions.items())
        bazaar = "" if route.discovery is None else ',"bazaar":' + route.discovery.extension_json(method)
        if route.sign_in is not None:
            opening = ',"extensions":{"sign-in-with-x":{"info":'
            tail = "," + route.sign_in.static_json(terms.network) + "}," + declared + bazaar + "}}"
        else:
            opening, tail = ',"extensions":{', declared + bazaar + "}}"
        if tail:
            encoded = tail.encode()
            built = _Template(head, fixed, opening, encoded, base64.b64encode(encoded).decode("ascii"))
        else:
            built = _Template(head, fixed)
        if len(self._templates) >= 1024:  # terms refreshed, dynamic prices: start again
            self._templates.clear()
        self._templates[key] = (route, terms, built)
        return built

    def _paywall_page(
        self, required: dict[str, Any], terms: EndpointTerms, header: tuple[str, str], reason: str | None
    ) -> Answer:
        """The 402 as the paywall page, for a browser: the same status and ``PAYMENT-REQUIRED``."""
        body = self.paywall.render(
            required, decimals=terms.decimals, currency=terms.currency, livemode=not _is_test_network(terms.network)
        )
        headers = [*self.paywall.headers(), ("Cache-Control", "no-store"), ("Vary", "Accept"), EXPOSE_HEADERS, header]
        return Answer(402, headers, body, reason)

    # -- sign-in-with-x -----------------------------------------------------------------------

    def _sign_in(self, route: PaidRoute, terms: EndpointTerms, request: RequestView, native: Any) -> Step:
        """Serve a request signed in by a wallet that paid for this route (its earlier settlement),
        or answer the 402 with the reason the sign-in was refused; never serve for free."""
        sign_in = route.sign_in
        assert sign_in is not None and request.sign_in is not None
        try:
            message = decode_sign_in(request.sign_in)
            keep_until = sign_in.check(message, request.url, terms.network, self._clock())
        except InvalidPaymentError as exc:
            return (yield from self._challenge(route, terms, request, native, exc.reason, exc.message))
        body = {
            "endpointId": terms.id,
            "address": message.address,
            "message": message.text(),
            "signature": message.signature,
            "nonce": message.nonce,
            "keepUntil": int(keep_until.timestamp()),
            "windowSeconds": sign_in.duration,
        }
        try:
            reply = yield PlatformCall("POST", "/agent/sign-ins", body)
        except PlatformError as exc:
            logger.error("sign-in check failed: %s; answering the challenge", exc.message)
            reply = PlatformReply(503, None)
        data = reply.data if isinstance(reply.data, dict) else {}
        payment = data.get("payment")
        if reply.status == 200 and data.get("signedIn") is True and isinstance(payment, dict):
            try:
                settlement = _signed_in_settlement(payment, terms)
            except (KeyError, TypeError, ValueError):
                logger.error("malformed sign-in reply; answering the challenge")
            else:
                return Serve(settlement, [EXPOSE_HEADERS])
        if reply.status == 200 and data.get("signedIn") is False:
            reason = str(data.get("reason") or "invalid_siwx_signature")
            text = str(data.get("message") or "the sign-in was refused")
        else:
            if reply.status != 200:
                logger.error("sign-in check answered %d; answering the challenge", reply.status)
            reason, text = "siwx_unavailable", "signing in cannot be checked right now: pay, or retry shortly"
        return (yield from self._challenge(route, terms, request, native, reason, text))

    # -- the well-known manifest -------------------------------------------------------------------

    def well_known(self, routes: list[tuple[str, str, PaidRoute]], origin: str) -> AnswerStep:
        """The ``/.well-known/x402`` answer listing ``routes`` (``(method or "*", path template,
        route)``) under ``origin``: each route's terms (advisory; the live 402 is authoritative)
        and its discovery declaration. Endpoints whose terms cannot be fetched are left out."""
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
        manifest = well_known_manifest(origin, items, int(self._clock()))
        raw = json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode()
        return Answer(200, [("Content-Type", "application/json"), ("Cache-Control", "public, max-age=60")], raw)

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


@dataclass(frozen=True, slots=True)
class _Template:
    """The parts of a 402 its route, terms and amount fix: ``head``, the JSON from after the resource
    URL up to the challenge id; ``fixed``, the seal's fixed terms; with extensions, the ``opening``
    of the extensions object (up to sign-in-with-x's ``info``, which each 402 fills in) and the
    ``tail`` that closes the text, with its base64."""

    head: str
    fixed: str
    opening: str = ""
    tail: bytes = b""
    tail_b64: str | None = None


def _signed_in_settlement(payment: dict[str, Any], terms: EndpointTerms) -> Settlement:
    """The platform's record of the payment a signed-in wallet made, as the handler sees it."""
    response = SettlementResponse(
        success=True,
        payer=str(payment["payer"]),
        transaction=str(payment["transaction"]),
        network=str(payment["network"]),
        amount=int(payment["amountMinor"]),
    )
    receipt = payment.get("receipt") or {}
    return Settlement(
        transaction=response.transaction,
        network=response.network,
        payer=str(payment["payer"]),
        pay_to=str(payment["payTo"]),
        asset=str(payment["asset"]),
        amount=int(payment["amountMinor"]),
        challenge_id=str(payment.get("challengeId") or ""),
        endpoint_id=terms.id,
        receipt={str(k): str(v) for k, v in receipt.items()},
        response=response,
        signed_in=True,
    )


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json_text(value: str) -> str:
    """A JSON string literal (UTF-8 kept, as ``json.dumps(..., ensure_ascii=False)`` writes it)."""
    return encode_basestring(value)


def _is_test_network(network: str) -> bool:
    known = get_network(network)
    return known is None or known.testnet


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


def _conflict(network: str, message: str) -> Answer:
    """409 ``payment_identifier_conflict``: the payment's id came with another payment before.
    Nothing was taken; the answer says so in ``PAYMENT-RESPONSE`` too."""
    response = SettlementResponse(
        success=False, error_reason=payment_identifier.CONFLICT, transaction="", network=network
    )
    body = {"error": {"type": "payment_error", "code": payment_identifier.CONFLICT, "message": message}}
    return _json_answer(409, body, [(PAYMENT_RESPONSE, encode_header(response))], payment_identifier.CONFLICT)


def _priced_per_request(route: PaidRoute, terms: EndpointTerms) -> bool:
    """Whether the route's amount callback prices each request (dynamic pricing), rather than the
    endpoint's fixed amount (or a metered endpoint's ceiling)."""
    if terms.pricing_mode == "metered":
        return False
    return terms.pricing_mode == "dynamic" or route.amount is not None


def _scheme(terms: EndpointTerms) -> str:
    """The scheme an endpoint's challenges offer: ``upto`` (a ceiling) for metered ones."""
    return "upto" if terms.pricing_mode == "metered" else "exact"


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
