"""The 402 challenge of a paid route: its JSON text (the body, and ``PAYMENT-REQUIRED`` in base64),
or the paywall page a browser gets instead.

The unpaid path builds no JSON: what a route, its terms and an amount fix is built once, as a
`ChallengeTemplate`; each 402 fills in its resource URL, challenge id, expiry and seal (and the
fresh ``info`` of sign-in-with-x), and the base64 of the extensions, the same in every 402, is
cached with them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any

from x402mw.protocol import payment_identifier
from x402mw.protocol.channels import SCHEME as CHANNEL_SCHEME
from x402mw.protocol.codec import PAYMENT_REQUIRED, b64, whole_groups
from x402mw.protocol.networks import get_network
from x402mw.protocol.seals import Sealer, fixed_terms, sealed_terms
from x402mw.seller.answers import ANSWER_HEADERS, EXPOSE_HEADERS
from x402mw.seller.config import EndpointTerms, PaidRoute
from x402mw.seller.decisions import Answer
from x402mw.seller.paywall import Paywall, wants_html

# Declared in every 402 of an exact route: a client may name each logical request with a payment
# identifier, so that its retry gets the first answer (the platform keeps them) and an id reused for
# another payment is a 409.
_EXTENSIONS = {payment_identifier.PAYMENT_IDENTIFIER: payment_identifier.DECLARATION}
EIP2612_EXTENSION = "eip2612GasSponsoring"
_EIP2612_OFFER = {
    "info": {
        "description": "the facilitator accepts an EIP-2612 permit for Permit2 (gasless first use)",
        "version": "1",
    }
}


@dataclass(frozen=True, slots=True)
class ChallengeTemplate:
    """The parts of a 402 its route, terms and amount fix, as bytes with their base64: ``head``, the
    JSON from after the resource URL up to the challenge id; ``opening``, the start of the
    extensions object (up to sign-in-with-x's ``info``, which each 402 fills in); ``tail``, the
    rest of the text; and ``fixed``, the seal's fixed terms.

    ``head`` starts with JSON whitespace that makes it whole base64 groups, and each 402 pads the
    parts it fills in the same way, so that the base64 of the fixed parts is made once."""

    head: bytes
    head_b64: str
    fixed: str
    opening: bytes
    tail: bytes
    tail_b64: str


def offer_scheme(terms: EndpointTerms) -> str:
    """The scheme an endpoint's challenges offer: ``upto`` (a ceiling) for metered ones."""
    return "upto" if terms.pricing_mode == "metered" else "exact"


def offer_schemes(terms: EndpointTerms) -> tuple[str, ...]:
    """Every scheme an endpoint's challenges offer: `offer_scheme`'s, and ``batch-settlement`` when it
    takes payment channels (alone, if it offers them alone)."""
    if terms.channel is None:
        return (offer_scheme(terms),)
    return (CHANNEL_SCHEME,) if terms.channel.only else (offer_scheme(terms), CHANNEL_SCHEME)


def channel_offer(
    terms: EndpointTerms,
    amount: int,
    *,
    challenge_id: str,
    expires: int,
    seal: str,
    state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``batch-settlement`` entry of an endpoint's 402: the per-request price (a metered
    endpoint's ceiling), the channel parameters the client builds its channel from, and, in a
    corrective 402, the channel's and its latest voucher's state (``state``)."""
    offer = terms.channel
    assert offer is not None
    extra: dict[str, Any] = {
        "receiverAuthorizer": offer.receiver_authorizer,
        "withdrawDelay": offer.withdraw_delay,
        "name": terms.eip712_name,
        "version": terms.eip712_version,
        "currency": terms.currency,
    }
    if offer.min_deposit is not None:
        extra["minDeposit"] = str(offer.min_deposit)
    extra |= state or {}
    extra |= {"challengeId": challenge_id, "expiresAt": expires, "seal": seal}
    return {
        "scheme": CHANNEL_SCHEME,
        "network": terms.network,
        "amount": str(amount),
        "asset": terms.asset,
        "payTo": terms.pay_to,
        "maxTimeoutSeconds": terms.max_timeout_seconds,
        "extra": extra,
    }


def _offer_extra(terms: EndpointTerms) -> dict[str, Any]:
    """An offer's ``extra`` before its challenge's id, expiry and seal."""
    # the token's symbol, for agents that do not know this chain's tokens (the dev chain)
    extra: dict[str, Any] = {"name": terms.eip712_name, "version": terms.eip712_version, "currency": terms.currency}
    if terms.pricing_mode == "metered":  # upto: the ceiling, settled through Permit2 by the facilitator
        extra["assetTransferMethod"] = "permit2"
        extra["facilitatorAddress"] = terms.facilitator_address
    return extra


def _offer(terms: EndpointTerms, amount: int, pay_to: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "scheme": offer_scheme(terms),
        "network": terms.network,
        "amount": str(amount),
        "asset": terms.asset,
        "payTo": pay_to,
        "maxTimeoutSeconds": terms.max_timeout_seconds,
        "extra": extra,
    }


def sealed_offer(
    sealer: Sealer, terms: EndpointTerms, amount: int, challenge_id: str, expires: int, pay_to: str
) -> dict[str, Any]:
    """The wire form of one sealed ``accepts`` entry."""
    seal = sealer.seal(
        *sealed_terms(
            challenge_id, terms.id, terms.network, terms.asset, pay_to, amount, terms.max_timeout_seconds, expires
        )
    )
    extra = _offer_extra(terms) | {"challengeId": challenge_id, "expiresAt": expires, "seal": seal}
    return _offer(terms, amount, pay_to, extra)


def build_template(route: PaidRoute, terms: EndpointTerms, amount: int, method: str) -> ChallengeTemplate:
    """What every 402 of this route, terms and amount (and method, for a discoverable route) shares."""
    resource = ""
    if route.description or terms.name:
        resource += f',"description":{encode_basestring(route.description or terms.name)}'
    if route.mime_type:
        resource += f',"mimeType":{encode_basestring(route.mime_type)}'
    offer = _compact(_offer(terms, amount, terms.pay_to, _offer_extra(terms) | {"challengeId": ""}))
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
    head_raw = whole_groups(head.encode(), before=True)  # (whitespace before a comma or brace)
    tail_raw = tail.encode()
    return ChallengeTemplate(head_raw, b64(head_raw), fixed, opening.encode(), tail_raw, b64(tail_raw))


def render_challenge(
    template: ChallengeTemplate,
    route: PaidRoute,
    terms: EndpointTerms,
    *,
    url: str,
    accept: str | None,
    paywall: Paywall,
    challenge_id: str,
    expires: int,
    seal: str,
    now: float,
    reason: str | None,
    message: str | None,
    eip2612: dict[str, Any] | None = None,
    channel_seal: str | None = None,
    channel_state: dict[str, Any] | None = None,
) -> Answer:
    """One 402 for a request to ``url``: JSON, or the paywall page when ``accept`` asks for HTML.
    ``eip2612``: the EIP-2612 declaration with the payer's permit nonce (a metered route's 412).
    ``channel_seal``: the seal of the payment-channel offer, for an endpoint that takes channels
    (``channel_state``: the channel's state, in a corrective 402)."""
    error = f'"error":{encode_basestring(reason)},' if reason else ""
    # The parts made for each 402 (the start, up to the resource URL; the challenge's own members;
    # sign-in-with-x's nonce) are padded with JSON whitespace to whole base64 groups, so that the
    # base64 of the parts between them (the template's head and tail, sign-in-with-x's info up to
    # its nonce) is made once.
    start = whole_groups(f'{{"x402Version":2,{error}"resource":{{"url":{encode_basestring(url)}'.encode())
    own = whole_groups(f'{challenge_id}","expiresAt":{expires},"seal":"{seal}"}}}}]'.encode() + template.opening)
    if route.sign_in is None:
        header = (PAYMENT_REQUIRED, f"{b64(start)}{template.head_b64}{b64(own)}{template.tail_b64}")
        raw = b"".join((start, template.head, own, template.tail))
    else:  # the challenge id is the nonce
        info, info_b64 = route.sign_in.info_start(url, now)
        nonce = whole_groups(f'{challenge_id}"}}'.encode())
        encoded = f"{b64(start)}{template.head_b64}{b64(own)}{info_b64}{b64(nonce)}{template.tail_b64}"
        header = (PAYMENT_REQUIRED, encoded)
        raw = b"".join((start, template.head, own, info, nonce, template.tail))
    if terms.channel is not None and channel_seal is not None:
        # (an endpoint taking payment channels: their offer beside the other, or alone)
        required = json.loads(raw)
        accepts = required["accepts"]
        offer = channel_offer(
            terms,
            int(accepts[0]["amount"]),
            challenge_id=challenge_id,
            expires=expires,
            seal=channel_seal,
            state=channel_state,
        )
        required["accepts"] = [offer] if terms.channel.only else [*accepts, offer]
        raw = _compact(required).encode()
        header = (PAYMENT_REQUIRED, b64(raw))
    if eip2612 is not None and isinstance(eip2612.get("info"), dict):
        # (the rare 412 of a metered route: the EIP-2612 declaration with the payer's permit nonce)
        required = json.loads(raw)
        offered = {"info": {**_EIP2612_OFFER["info"], **eip2612["info"]}}
        required.setdefault("extensions", {})[EIP2612_EXTENSION] = offered
        raw = _compact(required).encode()
        header = (PAYMENT_REQUIRED, b64(raw))
    if wants_html(accept) and paywall.enabled:
        return _paywall_page(paywall, json.loads(raw), terms, header, reason)
    if message:
        raw = raw[:-1] + b',"message":' + json.dumps(message, ensure_ascii=False).encode() + b"}"
    return Answer(402, [*ANSWER_HEADERS, header], raw, reason)


def _paywall_page(
    paywall: Paywall, required: dict[str, Any], terms: EndpointTerms, header: tuple[str, str], reason: str | None
) -> Answer:
    """The 402 as the paywall page, for a browser: the same status and ``PAYMENT-REQUIRED``."""
    body = paywall.render(
        required, decimals=terms.decimals, currency=terms.currency, livemode=not _is_test_network(terms.network)
    )
    headers = [*paywall.headers(), ("Cache-Control", "no-store"), ("Vary", "Accept"), EXPOSE_HEADERS, header]
    return Answer(402, headers, body, reason)


def _is_test_network(network: str) -> bool:
    known = get_network(network)
    return known is None or known.testnet


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
