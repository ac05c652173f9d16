"""The sans-IO payment gate: a request view in, a decision out.

`PaymentGate.process` is a generator. It yields small commands (`PlatformCall`, `ComputeAmount`)
that a driver runs, sync or async (see `x402mw.seller.drivers`), and returns a `Decision`:
`Answer` (a 402 challenge, a pending settlement, an outage) or `Serve` (run the handler with the
settlement). No framework, no I/O here, so every adapter shares this one implementation.

A paid MCP tool (`PaymentGate.hold`) is settled after it ran, as the x402 MCP transport orders it:
the payment is verified and claimed first (`Held`), then settled (`PaymentGate.capture`) once the tool
succeeded or given up (`PaymentGate.release`) when it failed (see `x402mw.seller.holds`).

The unpaid path makes no network call once an endpoint's terms are known (`x402mw.seller.terms`):
the challenge is issued locally and sealed with a hash keyed from the API key
(`x402mw.seller.issuer`), so that any worker process can check the retried request's ``accepted``
terms; issued challenges reach the platform in background batches (`x402mw.seller.registration`).

The gate decides; what it answers is written elsewhere: the 402 (its JSON template, the paywall
page) in `x402mw.seller.challenges`, the other JSON answers in `x402mw.seller.answers`, the payment
sent to the platform and its answer read in `x402mw.seller.settlements`, the ``/.well-known/x402`` list in
`x402mw.seller.manifest`, and the sign-in-with-x exchange with the platform in `x402mw.seller.sign_in`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Generator
from typing import Any

from x402mw import tracing
from x402mw.errors import InvalidPaymentError, PlatformError
from x402mw.protocol import reasons
from x402mw.protocol.channels import ChannelPaymentPayload
from x402mw.protocol.codec import decode_any_payment_payload, decode_channel_payment_payload
from x402mw.protocol.models import AnyPaymentPayload, PaymentRequirements, SettlementResponse, UptoPaymentPayload
from x402mw.seller import holds, manifest
from x402mw.seller.answers import pending_answer, platform_failure
from x402mw.seller.config import EndpointTerms, PaidRoute, check_gate_options, priced_per_request
from x402mw.seller.decisions import (
    Answer,
    ComputeAmount,
    Decision,
    Held,
    PlatformCall,
    PlatformReply,
    Serve,
)
from x402mw.seller.decisions import (
    RequestView as RequestView,  # re-exported: adapters and users import it from here
)
from x402mw.seller.holds import FinishStep
from x402mw.seller.issuer import ChallengeIssuer
from x402mw.seller.metering import MeteredPayment, ServeMetered
from x402mw.seller.origins import published_url
from x402mw.seller.paywall import Paywall
from x402mw.seller.settlements import (
    Refusal,
    authorized_outcome,
    channel_outcome,
    settled_outcome,
    settlement_body,
)
from x402mw.seller.sign_in import admit
from x402mw.seller.terms import TERMS_REFRESH_SECONDS as TERMS_REFRESH_SECONDS
from x402mw.seller.terms import TermsCache
from x402mw.seller.traces import traced_settlement

logger = logging.getLogger("x402mw.seller")

DEFAULT_PLATFORM_URL = "http://127.0.0.1:4402/v1"
Step = Generator[PlatformCall | ComputeAmount, Any, Decision | ServeMetered]
AnswerStep = Generator[PlatformCall | ComputeAmount, Any, Answer]
Outcome = Answer | Serve | ServeMetered | Refusal


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
        origin = check_gate_options(api_key, platform_url, settle_timeout, paywall, origin)
        self.api_key = api_key
        self.platform_url = platform_url.rstrip("/")
        self.settle_timeout = settle_timeout
        self._clock = clock
        self.origin = origin
        self._terms = TermsCache(refresh_seconds=refresh_seconds, clock=clock)
        paywall = paywall if paywall is not None else Paywall()
        self._issuer = ChallengeIssuer(api_key=api_key, clock=clock, paywall=paywall)
        self._queue = self._issuer.queue

    @property
    def paywall(self) -> Paywall:
        """What a browser's 402 page shows of the seller."""
        return self._issuer.paywall

    @paywall.setter
    def paywall(self, paywall: Paywall) -> None:
        self._issuer.paywall = paywall

    @property
    def refresh_seconds(self) -> float:
        """How old an endpoint's terms may get before the background work revalidates them."""
        return self._terms.refresh_seconds

    @refresh_seconds.setter
    def refresh_seconds(self, seconds: float) -> None:
        self._terms.refresh_seconds = seconds

    def __repr__(self) -> str:
        return f"PaymentGate(platform_url={self.platform_url!r}, api_key=<hidden>)"

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
        terms = self._terms.get(route.endpoint)
        if terms is None or terms.amount is None or priced_per_request(route, terms):
            return None
        return self._issuer.render(route, terms, self._published(request), terms.amount, None, None)

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
        reply = yield from holds.capture(held, self.settle_timeout)
        if isinstance(reply, Answer):
            return reply
        outcome = settled_outcome(reply, terms, held.pay_to, held.asset)
        return (yield from self._decided(route, terms, request, native, outcome))

    def release(self, held: Held) -> Generator[PlatformCall, Any, bool]:
        """Give up a held payment (its tool failed): nothing is taken, and the agent may use the same
        authorization again. False (and logged) if the platform could not be told: the payment then
        stays held, unsent, until its authorization expires."""
        return holds.release(held)

    def finish(self, payment: MeteredPayment, *, served: bool = True) -> FinishStep:
        """Settle a metered request for what its handler reported (at most the ceiling), as its
        response starts: the headers to add to the response (``PAYMENT-RESPONSE``: settled, or
        pending when its outcome is not known yet), or an `Answer` to send instead when the platform
        refused the settlement (the payer's balance fell below the usage, say). ``served=False``:
        the handler failed without a response; nothing is charged, and the authorization is closed."""
        return holds.finish(payment, served=served, settle_timeout=self.settle_timeout)

    def _paid(
        self, route: PaidRoute, request: RequestView, native: Any, *, hold: bool
    ) -> Generator[PlatformCall | ComputeAmount, Any, Decision | Held | ServeMetered]:
        terms = self._terms.get(route.endpoint)
        if terms is None:
            try:
                terms = yield from self.fetch_terms(route.endpoint)
            except PlatformError as exc:
                return platform_failure(exc, f"terms of endpoint {route.endpoint}")
        if request.payment is None:
            if request.sign_in is not None and route.sign_in is not None:
                return (yield from self._sign_in(route, terms, request, native))
            return (yield from self._issuer.challenge(route, terms, request, native, None, None))
        try:
            payload: AnyPaymentPayload | ChannelPaymentPayload = decode_channel_payment_payload(
                request.payment
            ) or decode_any_payment_payload(request.payment)
            if hold and payload.resource is not None and payload.resource.url != request.url:
                raise InvalidPaymentError(
                    f"this payment is for {payload.resource.url}, not {request.url}",
                    reason=reasons.INVALID_REQUIREMENTS,
                )
            accepted, challenge_id, expires = self._issuer.check_accepted(payload, route, terms)
        except InvalidPaymentError as exc:
            return (yield from self._issuer.challenge(route, terms, request, native, exc.reason, exc.message))
        if priced_per_request(route, terms):
            # The seal shows the terms are a challenge of this route, not that they were quoted for
            # this request: its price is computed again, so that the challenge of a cheap request
            # cannot pay for a dear one.
            price = yield from self._issuer.price(route, terms, native)
            if isinstance(price, Answer):
                return price
            if accepted.amount < price:
                message = f"this request costs {price} atomic units, more than the {accepted.amount} accepted"
                return (
                    yield from self._issuer.challenge(
                        route, terms, request, native, reasons.INVALID_REQUIREMENTS, message, amount=price
                    )
                )
        wait = max(1.0, self.settle_timeout - 2.0)
        body = settlement_body(route, terms, request, payload, accepted, challenge_id, expires, wait, hold=hold)
        if isinstance(payload, ChannelPaymentPayload):
            # Held (the channel, for this request) before the handler runs; charged by `finish`.
            # (Its challenge stays queued: registered in the background, as the platform does not
            # record a channel payment's challenge.)
            try:
                reply = yield PlatformCall("POST", "/agent/settlements", body, timeout=self.settle_timeout)
            except PlatformError as exc:
                return platform_failure(exc, "channel payment")
            held = channel_outcome(reply, terms, accepted, challenge_id, payload.payload.type)
            return (yield from self._decided(route, terms, request, native, held))
        if isinstance(payload, UptoPaymentPayload):
            # Authorized (verified and held) before the handler runs; settled by `finish`.
            try:
                reply = yield from self._post_settlement(challenge_id, body, request, accepted)
            except PlatformError as exc:
                return platform_failure(exc, "authorization")
            authorized = authorized_outcome(reply, terms, accepted, challenge_id)
            return (yield from self._decided(route, terms, request, native, authorized))
        try:
            reply = yield from self._post_settlement(challenge_id, body, request, accepted)
        except PlatformError as exc:
            # The platform may have received the payment before the connection failed.
            logger.error("settlement call failed: %s; answering pending", exc.message)
            return pending_answer(
                SettlementResponse(success=False, error_reason=reasons.SETTLEMENT_PENDING, network=accepted.network)
            )
        data = reply.data
        if hold and reply.status == 200 and isinstance(data, dict) and data.get("status") == "held":
            return holds.held(data, accepted, (route, terms, request, native))
        outcome = settled_outcome(reply, terms, accepted.pay_to, accepted.asset)
        return (yield from self._decided(route, terms, request, native, outcome))

    def _post_settlement(
        self, challenge_id: str, body: dict[str, Any], request: RequestView, accepted: PaymentRequirements
    ) -> Generator[PlatformCall, PlatformReply, PlatformReply]:
        """Send a payment to the platform. The call carries its challenge, which the platform records
        with the payment's outcome: it is registered once, by that call, unless the call is not answered."""
        if tracing.enabled:
            return (yield from traced_settlement(self._send_settlement(challenge_id, body), request, accepted, body))
        return (yield from self._send_settlement(challenge_id, body))

    def _send_settlement(
        self, challenge_id: str, body: dict[str, Any]
    ) -> Generator[PlatformCall, PlatformReply, PlatformReply]:
        queued = self._queue.withdraw(challenge_id)
        try:
            reply = yield PlatformCall("POST", "/agent/settlements", body, timeout=self.settle_timeout)
        except PlatformError:
            self._queue.requeue(queued)
            raise
        if reply.status != 200:
            self._queue.requeue(queued)
        return reply

    def _decided(
        self, route: PaidRoute, terms: EndpointTerms, request: RequestView, native: Any, outcome: Outcome
    ) -> Step:
        """The decision on the platform's answer: a refused payment gets a new challenge."""
        if isinstance(outcome, Refusal):
            return (yield from self._issuer.refused(route, terms, request, native, outcome))
        return outcome

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
        return (yield from self._issuer.challenge(route, terms, request, native, reason, text))

    def well_known(self, routes: list[tuple[str, str, PaidRoute]], request_url: str) -> AnswerStep:
        """The ``/.well-known/x402`` answer listing ``routes`` (``(method or "*", path template,
        route)``): each route's terms (advisory; the live 402 is authoritative) and its discovery
        declaration. Endpoints whose terms cannot be fetched are left out.

        The items' URLs are under the configured origin, and the answer may be cached by anyone
        (``public, max-age=60``). Without one they are under the origin of ``request_url`` (the
        request's own: its ``Host``), and the answer says so to caches: ``Vary: Host``, and no shared
        cache keeps it (``private``), so that a request with another ``Host`` cannot have its URLs
        served to others."""
        return (yield from manifest.well_known(self._terms, routes, request_url, origin=self.origin, clock=self._clock))

    def fetch_terms(self, endpoint_id: str) -> Generator[PlatformCall, Any, EndpointTerms]:
        """Fetch (and cache) an endpoint's terms from the platform; terms already cached are
        revalidated with their ETag (``If-None-Match``), which the platform answers ``304`` while
        they are unchanged."""
        return (yield from self._terms.fetch(endpoint_id))

    def background(self) -> Generator[PlatformCall, Any, None]:
        """One round of background work: register issued challenges (all of them, a batch a call, up
        to a bound), refresh stale terms."""
        yield from self._queue.register()
        yield from self._terms.refresh()

    @property
    def has_background_work(self) -> bool:
        return bool(self._queue) or self._terms.due
