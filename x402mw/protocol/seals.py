"""Challenge seals: any worker process holding the merchant's API key can check, without shared
state, that the terms echoed in a paid retry are the terms a challenge offered. The seller seals
the challenges it issues; the platform's facilitator API checks a seal it has no record of yet."""

from __future__ import annotations

import base64
import hashlib
import hmac
from hashlib import blake2b

from x402mw.protocol.constant_time import same_secret


class Sealer:
    """Seals a challenge's terms with a key derived from the merchant's API key: a keyed BLAKE2b
    MAC of 16 bytes, in hex. (BLAKE2 is a MAC with a key, in one pass and in Python's own build:
    several times faster here than HMAC-SHA256 through OpenSSL, on the path of every 402.)

    `check` also takes the HMAC-SHA256 seals (43 characters of URL-safe base64) that earlier
    releases issued, so that a platform checks the challenges of sellers not upgraded yet."""

    def __init__(self, api_key: str) -> None:
        self._key = hashlib.sha256(b"x402mw-challenge-seal\x00" + api_key.encode()).digest()

    def __repr__(self) -> str:
        return "Sealer(<key hidden>)"

    def seal(self, *terms: object) -> str:
        return self._mac(_message(terms))

    def seal_challenge(self, challenge_id: str, fixed: str, expires: int) -> str:
        """`seal` of `sealed_terms`, with the terms a route's challenges share given once as
        `fixed_terms` (the 402 path's form: one message built, no per-term conversions)."""
        message = f"{challenge_id.lower()}\x1f{fixed}\x1f{expires}".encode()  # fixed_terms is lower case
        return self._mac(message)

    def check(self, seal: object, *terms: object) -> bool:
        if not isinstance(seal, str):
            return False
        message = _message(terms)
        if len(seal) == _LEGACY_LENGTH:
            legacy = base64.urlsafe_b64encode(hmac.digest(self._key, message, "sha256")).rstrip(b"=").decode("ascii")
            return same_secret(seal, legacy)
        return same_secret(seal, self._mac(message))

    def _mac(self, message: bytes) -> str:
        return blake2b(message, key=self._key, digest_size=16).hexdigest()


_LEGACY_LENGTH = 43  # an HMAC-SHA256 seal: 32 bytes in unpadded base64


def _message(terms: tuple[object, ...]) -> bytes:
    return "\x1f".join([str(t) for t in terms]).lower().encode()


def fixed_terms(endpoint_id: str, network: str, asset: str, pay_to: str, amount: int, timeout: int) -> str:
    """The middle of `sealed_terms`' message: what every challenge of one offer shares."""
    return "\x1f".join([endpoint_id, "exact", network, asset, pay_to, str(amount), str(timeout)]).lower()


def sealed_terms(
    challenge_id: str,
    endpoint_id: str,
    network: str,
    asset: str,
    pay_to: str,
    amount: int,
    timeout: int,
    expires: int,
) -> tuple[object, ...]:
    """What a challenge's seal covers, in order: its id, its endpoint and the terms it offered."""
    return (challenge_id, endpoint_id, "exact", network, asset, pay_to, amount, timeout, expires)
