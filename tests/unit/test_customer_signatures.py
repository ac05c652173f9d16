"""The merchant's signature of a customer id on a subscribe link (`signed_subscribe_url`): what the
platform checks it against, and what the link keeps of the plan's URL."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest

from x402mw.client.merchant import signed_subscribe_url
from x402mw.protocol.customer_signatures import customer_signature, signing_key

KEY = "sk_test_" + "a" * 40


def test_the_link_carries_the_customer_its_expiry_and_a_signature_under_the_keys_digest() -> None:
    url = signed_subscribe_url(
        "https://pay.example/checkout/su_pro?customer=old&x=1",
        "user 42/é",
        KEY,
        expires_in=timedelta(minutes=5),
        now=1000,
    )
    parts = urlsplit(url)
    assert parts.path == "/checkout/su_pro"
    query = parse_qs(parts.query)
    assert query["customer"] == ["user 42/é"] and query["expires"] == ["1300"] and query["x"] == ["1"]
    assert signing_key(KEY) == hashlib.sha256(KEY.encode()).hexdigest()  # what the platform stores of a key
    assert query["signature"] == [customer_signature(signing_key(KEY), "user 42/é", 1300)]
    others = (
        customer_signature(signing_key(KEY), "user 42/é", 1301),
        customer_signature(signing_key(KEY), "user 42", 1300),
        customer_signature(signing_key(KEY + "b"), "user 42/é", 1300),
    )
    assert query["signature"][0] not in others


def test_an_empty_customer_is_refused() -> None:
    with pytest.raises(ValueError, match="customer"):
        signed_subscribe_url("https://pay.example/checkout/su_pro", "", KEY)
