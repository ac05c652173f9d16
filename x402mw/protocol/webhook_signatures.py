"""Standard Webhooks signatures, shared by the platform (which signs its deliveries) and the
merchant's side (`x402mw.client.webhooks`, which verifies them).

A signature is ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{raw body}">`` under a secret
``whsec_<base64>``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

SECRET_PREFIX = "whsec_"


def secret_key(secret: str | bytes) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret (bytes are the key itself); `ValueError` when it
    is not one or is empty."""
    if isinstance(secret, bytes):
        key = secret
    else:
        body = secret.removeprefix(SECRET_PREFIX)
        try:
            key = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("the webhook secret is not whsec_<base64>") from None
    if not key:
        raise ValueError("the webhook secret is empty")
    return key


def digest(key: bytes, msg_id: str, timestamp: int, body: bytes) -> bytes:
    """The HMAC-SHA256 of ``{msg_id}.{timestamp}.{body}`` under ``key``."""
    return hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()


def sign_payload(secret: str | bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value for one secret: ``v1,<base64>``."""
    return "v1," + base64.b64encode(digest(secret_key(secret), msg_id, timestamp, body)).decode("ascii")
