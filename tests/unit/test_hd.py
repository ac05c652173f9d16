"""BIP-32 derivation: the specification's test vectors, and agreement with eth-account's HD wallet."""

from __future__ import annotations

import pytest
from eth_account.hdaccount.deterministic import HDPath
from hypothesis import given, settings
from hypothesis import strategies as st

from x402mw.evm.hd import HARDENED, derive_private_key, parse_path

SEED_1 = bytes.fromhex("000102030405060708090a0b0c0d0e0f")


@pytest.mark.parametrize(
    ("path", "key"),
    [  # BIP-32 test vector 1
        ("m/0'", "edb2e14f9ee77d26dd93b4ecede8d16ed408ce149b6cd80b0715a2d911a0afea"),
        ("m/0'/1", "3c6cb8d0f6a264c91ea8b5030fadaa8e538b020f0a387421a12de9319dc93368"),
        ("m/0'/1/2'", "cbce0d719ecf7431d88e6a89fa1483e02e35092af60c042b1df2ff59fa424dca"),
    ],
)
def test_bip32_vector_1(path: str, key: str) -> None:
    assert derive_private_key(SEED_1, path).hex() == key


@settings(max_examples=25, deadline=None)
@given(seed=st.binary(min_size=16, max_size=64), index=st.integers(0, HARDENED - 1))
def test_agrees_with_eth_account(seed: bytes, index: int) -> None:
    path = f"m/44'/60'/0'/0/{index}"
    assert derive_private_key(seed, path) == HDPath(path).derive(seed)


def test_paths_and_seeds_are_checked() -> None:
    assert parse_path("m/44'/60h/0") == [44 + HARDENED, 60 + HARDENED, 0]
    for bad in ("44'/60'", "m/-1", "m/x", f"m/{HARDENED}", "m//1"):
        with pytest.raises(ValueError):
            parse_path(bad)
    with pytest.raises(ValueError, match="16 to 64 bytes"):
        derive_private_key(b"short", "m/0")
