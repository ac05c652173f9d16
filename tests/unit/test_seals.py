"""Challenge seals: the 402 path's form and the general one agree, a seal checks only with its key
and its terms, and the HMAC-SHA256 seals of earlier releases still check."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from x402mw.protocol.seals import Sealer, fixed_terms, sealed_terms

ASSET, PAY_TO = "0x" + "Aa" * 20, "0x" + "bB" * 20
TERMS = sealed_terms("ch_00ff", "ep_1", "eip155:8453", ASSET, PAY_TO, 10_000, 300, 1_900_000_000)


def test_the_402_paths_seal_is_the_seal_of_the_sealed_terms() -> None:
    sealer = Sealer("sk_test_one")
    fixed = fixed_terms("ep_1", "eip155:8453", ASSET, PAY_TO, 10_000, 300)
    seal = sealer.seal_challenge("ch_00ff", fixed, 1_900_000_000)
    assert seal == sealer.seal(*TERMS)
    assert len(seal) == 32 and int(seal, 16) >= 0
    assert sealer.check(seal, *TERMS)


@pytest.mark.parametrize("index", range(len(TERMS)))
def test_a_seal_checks_only_with_its_terms(index: int) -> None:
    sealer = Sealer("sk_test_one")
    seal = sealer.seal(*TERMS)
    changed = list(TERMS)
    changed[index] = f"{changed[index]}1"
    assert not sealer.check(seal, *changed)


def test_a_seal_checks_only_with_its_key() -> None:
    seal = Sealer("sk_test_one").seal(*TERMS)
    assert not Sealer("sk_test_two").check(seal, *TERMS)
    assert not Sealer("sk_test_one").check(None, *TERMS)
    assert not Sealer("sk_test_one").check(seal.upper() + "0", *TERMS)


def test_the_hmac_seals_of_earlier_releases_still_check() -> None:
    key = hashlib.sha256(b"x402mw-challenge-seal\x00sk_test_one").digest()
    message = "\x1f".join(str(t) for t in TERMS).lower().encode()
    legacy = base64.urlsafe_b64encode(hmac.digest(key, message, "sha256")).rstrip(b"=").decode()
    assert len(legacy) == 43
    assert Sealer("sk_test_one").check(legacy, *TERMS)
    assert not Sealer("sk_test_two").check(legacy, *TERMS)
    assert not Sealer("sk_test_one").check(legacy, *TERMS[:-1], 1_900_000_001)
