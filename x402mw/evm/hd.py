"""BIP-32 hierarchical deterministic private keys: one seed, as many addresses as are needed.

The platform derives each deposit address at ``m/44'/60'/0'/0/<index>`` (the BIP-44 path wallets
use for Ethereum accounts), so a seed backup restores every deposit key.

>>> key = derive_private_key(bytes(32), "m/44'/60'/0'/0/7")
>>> len(key)
32
"""

from __future__ import annotations

import hashlib
import hmac

from coincurve import PrivateKey

HARDENED = 0x8000_0000
DEPOSIT_ACCOUNT_PATH = "m/44'/60'/0'/0"
_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def parse_path(path: str) -> list[int]:
    """``"m/44'/60'/0'/0/7"`` as child indices, hardened ones offset by 2³¹. Raises ``ValueError``."""
    head, *parts = path.split("/")
    if head != "m":
        raise ValueError(f"a derivation path starts with 'm/', got {path!r}")
    indices = []
    for part in parts:
        hardened = part.endswith(("'", "h", "H"))
        digits = part[:-1] if hardened else part
        if not digits.isdigit() or int(digits) >= HARDENED:
            raise ValueError(f"{part!r} is not a child index (0 to 2^31-1, ' for hardened)")
        indices.append(int(digits) + (HARDENED if hardened else 0))
    return indices


def _child(key: int, chain_code: bytes, index: int) -> tuple[int, bytes]:
    if index >= HARDENED:
        data = b"\x00" + key.to_bytes(32, "big")
    else:
        data = PrivateKey(key.to_bytes(32, "big")).public_key.format(compressed=True)
    digest = hmac.digest(chain_code, data + index.to_bytes(4, "big"), hashlib.sha512)
    tweak = int.from_bytes(digest[:32], "big")
    child = (tweak + key) % _N
    if tweak >= _N or child == 0:  # probability below 2^-127; BIP-32 says: use the next index
        raise ValueError(f"child {index} is invalid for this key; use another index")
    return child, digest[32:]


def derive_private_key(seed: bytes, path: str) -> bytes:
    """The 32-byte private key at ``path`` under the BIP-32 master key of ``seed`` (16 to 64 bytes)."""
    if not 16 <= len(seed) <= 64:
        raise ValueError("a BIP-32 seed is 16 to 64 bytes")
    digest = hmac.digest(b"Bitcoin seed", seed, hashlib.sha512)
    key, chain_code = int.from_bytes(digest[:32], "big"), digest[32:]
    if not 0 < key < _N:
        raise ValueError("this seed gives no valid master key")
    for index in parse_path(path):
        key, chain_code = _child(key, chain_code, index)
    return key.to_bytes(32, "big")
