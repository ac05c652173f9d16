"""Sign-in-with-x: a wallet that paid for a route gets back in without paying again.

A route with ``sign_in=SignIn(origin="https://api.example.com", duration=86_400)`` offers the
``sign-in-with-x`` extension in its 402 (``info`` with a fresh nonce, and ``supportedChains``). A
request carrying a ``SIGN-IN-WITH-X`` header is checked here against the configured origin (never
the request's ``Host``), the message's times and the chain; the platform then checks the signature,
spends the nonce (once, across processes) and looks for a settled payment by that address for the
route's endpoint within ``duration`` seconds (None: any time). `admit` is the gate's side of that
exchange.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any
from urllib.parse import urlsplit

from x402mw.errors import ConfigurationError, InvalidPaymentError, PlatformError
from x402mw.protocol.codec import b64, whole_groups
from x402mw.protocol.models import SettlementResponse
from x402mw.protocol.sign_in import SignInMessage, decode_sign_in, parse_time
from x402mw.seller.answers import EXPOSE_HEADERS
from x402mw.seller.decisions import PlatformCall, PlatformReply, Serve, Settlement

logger = logging.getLogger("x402mw.seller")

MAX_AGE_SECONDS = 300
"""How old a message's ``issuedAt`` may be (the extension's five minutes)."""
_SKEW = timedelta(seconds=60)
NONCE_KEPT_AT_MOST = timedelta(seconds=MAX_AGE_SECONDS) + _SKEW
"""The longest a used nonce is kept after its message's ``issuedAt`` (see `nonce_kept_until`)."""
_SCHEMA = json.dumps(
    {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "domain": {"type": "string"},
            "address": {"type": "string"},
            "statement": {"type": "string"},
            "uri": {"type": "string", "format": "uri"},
            "version": {"type": "string"},
            "chainId": {"type": "string"},
            "type": {"type": "string"},
            "nonce": {"type": "string"},
            "issuedAt": {"type": "string", "format": "date-time"},
            "expirationTime": {"type": "string", "format": "date-time"},
            "notBefore": {"type": "string", "format": "date-time"},
            "requestId": {"type": "string"},
            "resources": {"type": "array", "items": {"type": "string", "format": "uri"}},
            "signature": {"type": "string"},
        },
        "required": ["domain", "address", "uri", "version", "chainId", "type", "nonce", "issuedAt", "signature"],
    },
    separators=(",", ":"),
)


@dataclass(frozen=True, slots=True)
class SignIn:
    """Let a wallet that paid for a route back in.

    ``origin`` is the seller's public origin (``https://api.example.com``): the messages it accepts
    name its host as ``domain`` and a URL under it as ``uri``. ``duration`` is how long, in seconds,
    a payment lets its payer back in (None: for good). ``statement`` is shown by wallets.
    """

    origin: str
    duration: int | None = None
    statement: str | None = None
    _domain: str = field(default="", init=False, repr=False, compare=False)
    _head: str = field(default="", init=False, repr=False, compare=False)
    _statement: str = field(default="", init=False, repr=False, compare=False)
    _tails: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    # by URL: the second it is for, and `info_start`
    _starts: dict[str, tuple[int, bytes, str]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problems = []
        parts = urlsplit(self.origin) if isinstance(self.origin, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
            problems.append("SignIn.origin must be the seller's origin, such as https://api.example.com")
        else:
            object.__setattr__(self, "origin", f"{parts.scheme}://{parts.netloc}")
            object.__setattr__(self, "_domain", parts.netloc)
        if self.duration is not None and (
            isinstance(self.duration, bool) or not isinstance(self.duration, int) or self.duration <= 0
        ):
            problems.append("SignIn.duration must be a positive number of seconds, or None for good")
        if self.statement is not None and (not isinstance(self.statement, str) or "\n" in self.statement):
            problems.append("SignIn.statement must be one line of text")
        if problems:
            raise ConfigurationError(problems)
        object.__setattr__(self, "_head", f'{{"domain":{encode_basestring(self._domain)},"uri":')
        if self.statement:
            object.__setattr__(self, "_statement", f',"statement":{encode_basestring(self.statement)}')

    @property
    def domain(self) -> str:
        return self._domain

    def uri_for(self, url: str) -> str:
        """The configured origin with the request's path and query (the request's host is ignored)."""
        rest = url.split("/", 3)[3] if url.count("/") >= 3 else ""
        return f"{self.origin}/{rest}"

    def info_json(self, url: str, now: float, nonce: str) -> str:
        """The extension's ``info`` for one 402, as JSON text."""
        return f'{self.info_start(url, now)[0].decode().lstrip()}{nonce}"}}'

    def info_start(self, url: str, now: float) -> tuple[bytes, str]:
        """The text of a 402's ``info`` up to its nonce, which comes last (``..."nonce":"``), and its
        base64: the same for every 402 of ``url`` within a second, so both are kept. The text
        starts with JSON whitespace that makes it whole base64 groups."""
        second = int(now)
        kept = self._starts.get(url)
        if kept is None or kept[0] != second:
            if len(self._starts) >= 1024:
                self._starts.clear()
            uri = encode_basestring(self.uri_for(url))
            issued = datetime.fromtimestamp(second, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            text = (
                f'{self._head}{uri}{self._statement},"version":"1","issuedAt":"{issued}","resources":[{uri}],"nonce":"'
            ).encode()
            text = whole_groups(text, before=True)
            kept = self._starts[url] = (second, text, b64(text))
        return kept[1], kept[2]

    def static_json(self, network: str) -> str:
        """The members of the extension every 402 on ``network`` shares (``supportedChains``, ``schema``)."""
        tail = self._tails.get(network)
        if tail is None:
            chains = f'[{{"chainId":{encode_basestring(network)},"type":"eip191"}}]'
            tail = self._tails[network] = f'"supportedChains":{chains},"schema":{_SCHEMA}'
        return tail

    def extension_json(self, url: str, network: str, now: float, nonce: str | None = None) -> str:
        """The ``sign-in-with-x`` extension of one 402, as JSON text: ``nonce`` (letters and digits;
        default a random one) and the time are this 402's, the rest is built once per network."""
        info = self.info_json(url, now, nonce or secrets.token_hex(16))
        return f'{{"info":{info},{self.static_json(network)}}}'

    def check(self, message: SignInMessage, url: str, network: str, now: float) -> datetime:
        """Check a message's domain, URI, chain and times for a request to ``url``; `InvalidPaymentError`
        with the extension's reason code when one is wrong. Returns until when its nonce must be kept
        (`nonce_kept_until`: the message's expiry, bounded by its ``issuedAt`` + `MAX_AGE_SECONDS`)."""
        if message.domain != self._domain:
            raise InvalidPaymentError(
                f"the sign-in message is for {message.domain!r}, not {self._domain!r}",
                reason="invalid_siwx_domain_mismatch",
            )
        wanted = urlsplit(self.uri_for(url))
        given = urlsplit(message.uri)
        if (given.scheme, given.netloc, given.path or "/") != (wanted.scheme, wanted.netloc, wanted.path or "/"):
            raise InvalidPaymentError(
                "the sign-in message's URI is not this resource's", reason="invalid_siwx_uri_mismatch"
            )
        if message.chain_id != network:
            raise InvalidPaymentError(
                f"sign in on {network}, the network this route is paid on", reason="invalid_siwx_chain_id"
            )
        if message.version != "1":
            raise InvalidPaymentError("the sign-in message's version must be 1", reason="invalid_siwx_payload")
        at = datetime.fromtimestamp(now, UTC)
        try:
            issued = parse_time(message.issued_at)
            expires = parse_time(message.expiration_time) if message.expiration_time else None
            not_before = parse_time(message.not_before) if message.not_before else None
        except ValueError:
            raise InvalidPaymentError(
                "the sign-in message's times are not RFC 3339", reason="invalid_siwx_issued_at"
            ) from None
        if issued > at + _SKEW:
            raise InvalidPaymentError(
                "the sign-in message is issued in the future", reason="invalid_siwx_issued_at_in_future"
            )
        if at - issued > timedelta(seconds=MAX_AGE_SECONDS):
            raise InvalidPaymentError(
                f"the sign-in message is more than {MAX_AGE_SECONDS} seconds old: sign a new one",
                reason="invalid_siwx_issued_at_too_old",
            )
        if expires is not None and expires <= at:
            raise InvalidPaymentError("the sign-in message has expired", reason="invalid_siwx_expired")
        if not_before is not None and not_before > at:
            raise InvalidPaymentError("the sign-in message is not valid yet", reason="invalid_siwx_not_yet_valid")
        return nonce_kept_until(issued, expires)


def nonce_kept_until(issued: datetime, expires: datetime | None) -> datetime:
    """Until when the nonce of a message issued at ``issued`` and expiring at ``expires`` is kept.

    A message is accepted only while its ``expirationTime`` has not passed *and* its ``issuedAt`` is
    under `MAX_AGE_SECONDS` old; its expiry is the earlier of the two, and its nonce is kept until
    then plus a minute for clocks that differ between processes. A message with a far
    ``expirationTime`` (or none) is not refused for it: it stops being accepted at ``issuedAt`` +
    `MAX_AGE_SECONDS`, so its nonce is kept to `NONCE_KEPT_AT_MOST` after ``issuedAt`` -- the
    longest any nonce is kept -- and no message can be replayed once its nonce is purged.
    """
    ends = issued + timedelta(seconds=MAX_AGE_SECONDS)
    if expires is not None and expires < ends:
        ends = expires
    return ends + _SKEW


def admit(
    sign_in: SignIn, header: str, url: str, *, endpoint_id: str, network: str, now: float
) -> Generator[PlatformCall, Any, Serve | tuple[str | None, str]]:
    """The gate's side of a ``SIGN-IN-WITH-X`` request to ``url``: `Serve` it when the platform
    finds the signing wallet's earlier settlement for endpoint ``endpoint_id``, else the reason code
    and message the 402 gives for refusing the sign-in; never serve for free."""
    try:
        message = decode_sign_in(header)
        keep_until = sign_in.check(message, url, network, now)
    except InvalidPaymentError as exc:
        return exc.reason, exc.message
    body = {
        "endpointId": endpoint_id,
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
            settlement = _signed_in_settlement(payment, endpoint_id)
        except (KeyError, TypeError, ValueError):
            logger.error("malformed sign-in reply; answering the challenge")
        else:
            return Serve(settlement, [EXPOSE_HEADERS])
    if reply.status == 200 and data.get("signedIn") is False:
        return str(data.get("reason") or "invalid_siwx_signature"), str(
            data.get("message") or "the sign-in was refused"
        )
    if reply.status != 200:
        logger.error("sign-in check answered %d; answering the challenge", reply.status)
    return "siwx_unavailable", "signing in cannot be checked right now: pay, or retry shortly"


def _signed_in_settlement(payment: dict[str, Any], endpoint_id: str) -> Settlement:
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
        endpoint_id=endpoint_id,
        receipt={str(k): str(v) for k, v in receipt.items()},
        response=response,
        signed_in=True,
    )
