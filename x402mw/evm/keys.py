"""Ethereum addresses (EIP-55 checksums) and secp256k1 private keys.

Addresses are ``0x`` followed by 40 hex digits. Compare them case-insensitively
(``a.lower() == b.lower()``); use :func:`to_checksum_address` only to display or store them.
"""

from __future__ import annotations

import functools
import secrets

from coincurve import PrivateKey

from x402mw.evm.keccak import keccak256

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


# EIP-55 upper-cases a hex letter when the matching nibble of keccak256(lower-case hex) is >= 8. Done
# with whole-string integer arithmetic (subtracting 0x20 turns "a".."f" into "A".."F") because a
# per-character loop costs more than the hash itself on the signature-recovery hot path.
_HIGH_NIBBLE_FLAG = bytes(0x20 if byte & 0x80 else 0 for byte in range(256))
_LOW_NIBBLE_FLAG = bytes(0x20 if byte & 0x08 else 0 for byte in range(256))
_EVERY_BYTE_0X20 = int.from_bytes(b"\x20" * 40, "big")


def _checksum_hex(lower_hex: str) -> str:
    text = lower_hex.encode("ascii")
    hashed = keccak256(text)[:20]
    flags = bytearray(40)
    flags[0::2] = hashed.translate(_HIGH_NIBBLE_FLAG)
    flags[1::2] = hashed.translate(_LOW_NIBBLE_FLAG)
    value = int.from_bytes(text, "big")
    letters = (value >> 1) & _EVERY_BYTE_0X20  # "a".."f" carry bit 0x40, digits do not
    return "0x" + (value - (int.from_bytes(flags, "big") & letters)).to_bytes(40, "big").decode("ascii")


def _hex_body(value: object) -> str | None:
    if not isinstance(value, str) or len(value) != 42 or value[:2] not in ("0x", "0X"):
        return None
    body = value[2:]
    return body if _HEX_DIGITS.issuperset(body) else None


def to_checksum_address(address: str) -> str:
    """Return ``address`` in its EIP-55 checksum form.

    Accepts ``0x`` + 40 hex digits in any case (this normalises; use :func:`is_address` to also
    reject a mixed-case address whose checksum is wrong). Raises ``ValueError`` otherwise.

    >>> to_checksum_address("0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed")
    '0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed'
    """
    body = _hex_body(address)
    if body is None:
        raise ValueError("an address must be '0x' followed by 40 hex digits")
    return _checksum_hex(body.lower())


def is_address(value: object) -> bool:
    """Whether ``value`` is a ``0x``-prefixed 20-byte address string.

    All-lower-case and all-upper-case hex are accepted; mixed case must be a valid EIP-55 checksum.
    """
    body = _hex_body(value)
    if body is None:
        return False
    lower = body.lower()
    if body == lower or body == body.upper():
        return True
    return _checksum_hex(lower)[2:] == body


def address_of(private_key: bytes) -> str:
    """Return the checksum address controlled by a 32-byte secp256k1 private key.

    Raises ``ValueError`` for a key of the wrong length or outside the curve order.
    """
    public = _private_key(private_key).public_key.format(compressed=False)
    return _checksum_hex(keccak256(public[1:])[-20:].hex())


def new_private_key() -> bytes:
    """Return a fresh random 32-byte private key (from :mod:`secrets`)."""
    while True:
        candidate = secrets.token_bytes(32)
        if 0 < int.from_bytes(candidate, "big") < _SECP256K1_N:
            return candidate


def _private_key(private_key: bytes) -> PrivateKey:
    # The message never includes the key itself.
    if not isinstance(private_key, bytes | bytearray) or len(private_key) != 32:
        raise ValueError("a private key must be 32 bytes")
    if not 0 < int.from_bytes(private_key, "big") < _SECP256K1_N:
        raise ValueError("a private key must be between 1 and the secp256k1 order")
    return _loaded_key(bytes(private_key))


@functools.lru_cache(maxsize=32)
def _loaded_key(private_key: bytes) -> PrivateKey:
    # coincurve derives both public keys when it loads a private key (two curve multiplications,
    # more than a signature costs): a service signs with the same few keys again and again.
    return PrivateKey(private_key)
