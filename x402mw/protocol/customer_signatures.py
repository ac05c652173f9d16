"""Signed customer ids for the hosted subscribe page: a merchant vouches, with an expiry, that the
visitor it sends to a plan's ``checkoutUrl`` is its customer ``customer``.

The link carries ``?customer=<id>&expires=<unix seconds>&signature=<MAC>``, where the MAC is an
HMAC-SHA256, in unpadded base64url, of ``x402mw-customer\\x1f<customer>\\x1f<expires>`` keyed by the
SHA-256 (hex) of one of the merchant's API keys of the plan's mode. The platform stores only that
digest of a key, so it can check the signature and the merchant computes it from the key it holds
(`x402mw.client.merchant.signed_subscribe_url`); revoking the key ends every link it signed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac


def signing_key(api_key: str) -> str:
    """The key a merchant's API key signs customer links with: its SHA-256, in hex."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def customer_signature(key: str, customer: str, expires: int) -> str:
    """The signature of ``customer`` until ``expires`` (unix seconds) under ``key`` (`signing_key`)."""
    message = "\x1f".join(("x402mw-customer", customer, str(expires))).encode()
    digest = hmac.digest(key.encode(), message, "sha256")
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
