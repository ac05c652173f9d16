"""Challenge seals: any worker process holding the merchant's API key can check, without shared
state, that the terms echoed in a paid retry are the terms a challenge offered. The seller seals
the challenges it issues; the platform's facilitator API checks a seal it has no record of yet."""

from __future__ import annotations

import base64
import hashlib
import hmac


class Sealer:
    def __init__(self, api_key: str) -> None:
        self._key = hashlib.sha256(b"x402mw-challenge-seal\x00" + api_key.encode()).digest()

    def __repr__(self) -> str:
        return "Sealer(<key hidden>)"

    def seal(self, *terms: object) -> str:
        message = "\x1f".join([str(t) for t in terms]).lower().encode()
        digest = hmac.digest(self._key, message, "sha256")
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def seal_challenge(self, challenge_id: str, fixed: str, expires: int) -> str:
        """`seal` of `sealed_terms`, with the terms a route's challenges share given once as
        `fixed_terms` (the 402 path's form: one message built, no per-term conversions)."""
        message = f"{challenge_id.lower()}\x1f{fixed}\x1f{expires}".encode()  # fixed_terms is lower case
        digest = hmac.digest(self._key, message, "sha256")
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def check(self, seal: object, *terms: object) -> bool:
        return isinstance(seal, str) and hmac.compare_digest(seal, self.seal(*terms))


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
