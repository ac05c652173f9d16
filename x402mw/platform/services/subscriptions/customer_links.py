"""Signed links to a subscription's customer page, and the CSRF tokens of the hosted forms.

A customer page link is ``{checkout_url_base}/subscriptions/<token>``, where the token is the
subscription's id (16 bytes) followed by the first 16 bytes of an HMAC-SHA256 of it under the
platform's page key, in unpadded base64url (43 characters). Knowing a subscription's id does not
give its link; a token whose MAC is wrong names nothing. The link is handed out only to the customer
(in every reminder email, and as the return link of their invoices' checkout).

A form token (``<unix seconds>.<nonce>.<MAC>``) binds a form to its purpose (``cancel:<subscription
id>``, ``subscribe:<plan id>``) and to the time it was rendered; it is accepted for `FORM_LIFETIME`,
and `spend_form_token` makes it good for one post (the subscribe form's), in every process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import uuid
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from x402mw.platform.db import tables
from x402mw.protocol.constant_time import same_secret
from x402mw.protocol.customer_signatures import customer_signature

FORM_LIFETIME = timedelta(hours=2)
_MAC_BYTES = 16


class CustomerLinks:
    """Makes and checks customer page tokens and form tokens with one secret ``key``."""

    def __init__(self, key: bytes, checkout_url_base: str) -> None:
        if len(key) < 32:
            raise ValueError("the page key is at least 32 bytes")
        self._key = key
        self.checkout_url_base = checkout_url_base

    def __repr__(self) -> str:
        return "CustomerLinks(<key hidden>)"

    def _mac(self, purpose: bytes) -> bytes:
        return hmac.new(self._key, purpose, hashlib.sha256).digest()

    def token(self, subscription_id: str) -> str:
        raw = uuid.UUID(subscription_id).bytes
        return base64.urlsafe_b64encode(raw + self._mac(b"page:" + raw)[:_MAC_BYTES]).decode().rstrip("=")

    def page_url(self, subscription_id: str) -> str:
        """The customer page of the subscription."""
        return f"{self.checkout_url_base}/subscriptions/{self.token(subscription_id)}"

    def subscription_of(self, token: str) -> str | None:
        """The subscription id ``token`` was made for, or None for anything else."""
        if len(token) != 43 or not token.isascii():
            return None
        try:
            raw = base64.urlsafe_b64decode(token + "=")
        except (binascii.Error, ValueError):
            return None
        if len(raw) != 16 + _MAC_BYTES or base64.urlsafe_b64encode(raw).decode().rstrip("=") != token:
            return None  # one spelling per token: not another with the last character's spare bits set
        ident, mac = raw[:16], raw[16:]
        if not same_secret(mac, self._mac(b"page:" + ident)[:_MAC_BYTES]):
            return None
        return str(uuid.UUID(bytes=ident))

    def form_token(self, purpose: str, now: datetime) -> str:
        """A token for a form rendered at ``now`` for ``purpose`` (each one different)."""
        return self._form_token(purpose, str(int(now.timestamp())), secrets.token_urlsafe(12))

    def _form_token(self, purpose: str, stamp: str, nonce: str) -> str:
        mac = self._mac(f"form:{purpose}:{stamp}:{nonce}".encode())
        return f"{stamp}.{nonce}." + base64.urlsafe_b64encode(mac).decode().rstrip("=")

    def check_form_token(self, purpose: str, token: str, now: datetime) -> bool:
        """Whether ``token`` was made by `form_token` for ``purpose`` within `FORM_LIFETIME` of ``now``."""
        stamp, _, rest = token.partition(".")
        nonce, _, _mac = rest.partition(".")
        if not (stamp.isascii() and stamp.isdigit()) or len(stamp) > 12 or not 0 < len(nonce) <= 32:
            return False
        age = now.timestamp() - int(stamp)
        if not -300 <= age <= FORM_LIFETIME.total_seconds():
            return False
        return same_secret(token, self._form_token(purpose, stamp, nonce))


async def spend_form_token(engine: AsyncEngine, token: str, now: datetime) -> bool:
    """Record ``token`` (a checked form token) as used; False when it was used before, here or in another
    process. Records older than `FORM_LIFETIME` (and the tokens' 5 minutes of clock skew) are dropped."""
    uses = tables.form_token_uses
    digest = hashlib.sha256(token.encode()).hexdigest()
    insert_for = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
    async with engine.begin() as conn:
        await conn.execute(delete(uses).where(uses.c.used_at < now - FORM_LIFETIME - timedelta(minutes=10)))
        first = insert_for(uses).values(token_hash=digest, used_at=now).on_conflict_do_nothing()
        spent = await conn.scalar(first.returning(uses.c.token_hash))
    return spent is not None


async def merchant_signed(
    engine: AsyncEngine, merchant_id: str, livemode: bool, customer: str, expires: str, signature: str, now: datetime
) -> bool:
    """Whether ``signature`` is the merchant's signature of ``customer`` until ``expires`` (unix seconds,
    not past at ``now``) by one of its API keys of the mode that is not revoked
    (`x402mw.protocol.customer_signatures`)."""
    if not customer or not (expires.isascii() and expires.isdigit()) or len(expires) > 12 or len(signature) > 64:
        return False
    if int(expires) < now.timestamp():
        return False
    keys = tables.api_keys
    async with engine.connect() as conn:
        hashes = list(
            await conn.scalars(
                select(keys.c.key_hash).where(
                    keys.c.merchant_id == merchant_id, keys.c.livemode == livemode, keys.c.revoked_at.is_(None)
                )
            )
        )
    found = False
    for key in hashes:  # every key: the time taken does not say which one signed
        found |= same_secret(signature, customer_signature(key, customer, int(expires)))
    return found
