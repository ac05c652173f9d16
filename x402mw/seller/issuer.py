"""Challenges issued and checked: each 402's amount, id, expiry and seal, and the check that a payment's
``accepted`` terms are those of a challenge this seller issued.

The seal is a hash keyed from the API key, so that any worker process of the seller can check the
retried request's terms without a network call; issued challenges wait in a `ChallengeQueue` for
their registration with the platform.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Generator
from typing import Any

from x402mw.errors import InvalidPaymentError, PriceError
from x402mw.protocol import reasons
from x402mw.protocol.channels import SCHEME as CHANNEL_SCHEME
from x402mw.protocol.channels import ChannelPaymentPayload
from x402mw.protocol.models import AnyPaymentPayload, PaymentPayload, PaymentRequirements, UptoPaymentPayload
from x402mw.protocol.prices import to_atomic
from x402mw.protocol.seals import Sealer, sealed_terms
from x402mw.seller.answers import misconfigured
from x402mw.seller.challenges import (
    ChallengeTemplate,
    build_template,
    offer_schemes,
    render_challenge,
    sealed_offer,
)
from x402mw.seller.config import EndpointTerms, PaidRoute, priced_per_request
from x402mw.seller.decisions import Answer, ComputeAmount, PlatformCall, RequestView
from x402mw.seller.paywall import Paywall
from x402mw.seller.registration import ChallengeQueue
from x402mw.seller.settlements import Refusal

AnswerStep = Generator[PlatformCall | ComputeAmount, Any, Answer]


class ChallengeIssuer:
    """Issues a gate's challenges (queued for registration in ``queue``) and checks payments' terms."""

    def __init__(self, *, api_key: str, clock: Callable[[], float], paywall: Paywall) -> None:
        self._sealer = Sealer(api_key)
        self._clock = clock
        self.paywall = paywall
        self.queue = ChallengeQueue()
        # Challenge ids: unique per process by a counter, across processes by a random prefix.
        self._id_prefix = secrets.token_hex(8)
        self._id_counter = itertools.count(secrets.randbits(32))
        self._templates: dict[tuple[Any, ...], tuple[PaidRoute, EndpointTerms, ChallengeTemplate]] = {}

    def price(
        self, route: PaidRoute, terms: EndpointTerms, native: Any
    ) -> Generator[PlatformCall | ComputeAmount, Any, int | Answer]:
        """This request's amount in atomic units: what the route's amount callback says (dynamic
        pricing), or the endpoint's fixed amount; a 500 answer when neither gives one."""
        if not priced_per_request(route, terms):
            if terms.amount is None:
                return misconfigured(f"endpoint {terms.id} has no fixed amount")
            return terms.amount
        if route.amount is None:
            return misconfigured(f"endpoint {terms.id} uses dynamic pricing but its route has no amount callback")
        try:
            price = yield ComputeAmount(route.amount, native)
            return to_atomic(price, decimals=terms.decimals, symbol=terms.currency)
        except PriceError as exc:
            return misconfigured(f"the amount callback of endpoint {terms.id} gave a bad price: {exc}")

    def challenge(
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
        channel_state: dict[str, Any] | None = None,
    ) -> AnswerStep:
        if amount is None and terms.amount is not None and not priced_per_request(route, terms):
            amount = terms.amount  # a fixed price: no generator to step through (the hot path)
        elif amount is None:
            price = yield from self.price(route, terms, native)
            if isinstance(price, Answer):
                return price
            amount = price
        return self.render(route, terms, request, amount, reason, message, eip2612, channel_state)

    def refused(
        self, route: PaidRoute, terms: EndpointTerms, request: RequestView, native: Any, refusal: Refusal
    ) -> AnswerStep:
        """A new challenge answering a payment the platform refused, with the refusal's reason."""
        answer = yield from self.challenge(
            route,
            terms,
            request,
            native,
            refusal.reason,
            refusal.message,
            eip2612=refusal.eip2612,
            channel_state=refusal.channel_state,
        )
        headers = [*answer.headers, *([refusal.header] if refusal.header else [])]
        return Answer(refusal.status or answer.status, headers, answer.body, refusal.reason)

    def render(
        self,
        route: PaidRoute,
        terms: EndpointTerms,
        request: RequestView,
        amount: int,
        reason: str | None,
        message: str | None,
        eip2612: dict[str, Any] | None = None,
        channel_state: dict[str, Any] | None = None,
    ) -> Answer:
        """A new challenge for ``amount``, registered with the platform (in the background), as the
        request's 402."""
        challenge_id = f"{self._id_prefix}{next(self._id_counter):016x}"
        now = self._clock()
        expires = int(now) + terms.max_timeout_seconds
        url = request.url
        self.queue.issue((challenge_id, terms.id, terms.network, terms.asset, terms.pay_to, amount, url, expires))
        template = self._template(route, terms, amount, request.method)
        return render_challenge(
            template,
            route,
            terms,
            url=url,
            accept=request.accept,
            paywall=self.paywall,
            challenge_id=challenge_id,
            expires=expires,
            seal=self._sealer.seal_challenge(challenge_id, template.fixed, expires),
            now=now,
            reason=reason,
            message=message,
            eip2612=eip2612,
            channel_seal=self._channel_seal(terms, amount, challenge_id, expires),
            channel_state=channel_state,
        )

    def _channel_seal(self, terms: EndpointTerms, amount: int, challenge_id: str, expires: int) -> str | None:
        """The seal of a challenge's payment-channel offer (its terms, and the scheme's name)."""
        if terms.channel is None:
            return None
        sealed = sealed_terms(
            challenge_id, terms.id, terms.network, terms.asset, terms.pay_to, amount, terms.max_timeout_seconds, expires
        )
        return self._sealer.seal(*sealed, CHANNEL_SCHEME)

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

    def check_accepted(
        self, payload: AnyPaymentPayload | ChannelPaymentPayload, route: PaidRoute, terms: EndpointTerms
    ) -> tuple[PaymentRequirements, str, int]:
        """The terms the payment accepted, its challenge's id and expiry; `InvalidPaymentError` when
        they are not those of a challenge of this route. An x402 v1 payment, which echoes no terms,
        gets a challenge issued for it."""
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
            self.queue.issue((fresh_id, terms.id, terms.network, terms.asset, terms.pay_to, terms.amount, "", deadline))
            return PaymentRequirements.model_validate(offer), fresh_id, deadline
        assert accepted is not None
        if accepted.scheme not in offer_schemes(terms):
            raise InvalidPaymentError(f"scheme {accepted.scheme!r} is not offered", reason=reasons.INVALID_SCHEME)
        channel = accepted.scheme == CHANNEL_SCHEME
        if isinstance(payload, UptoPaymentPayload) != (accepted.scheme == "upto") or (
            isinstance(payload, ChannelPaymentPayload) != channel
        ):
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
        sealed = sealed_terms(
            challenge_id,
            terms.id,
            accepted.network,
            accepted.asset,
            accepted.pay_to,
            accepted.amount,
            accepted.max_timeout_seconds,
            expires,
        )
        if not self._sealer.check(extra.get("seal"), *sealed, *((CHANNEL_SCHEME,) if channel else ())):
            raise InvalidPaymentError(
                "the accepted terms were altered or belong to another route",
                reason=reasons.INVALID_REQUIREMENTS,
            )
        # An expired challenge still goes to the platform: a payment made on it gets its outcome
        # (the platform settles no new one on it, and answers challenge_expired instead).
        return accepted, challenge_id, expires
