"""Keccak-256, the hash Ethereum calls SHA-3.

safe-pysha3 is preferred because it is the fastest keccak available to CPython (eth-hash picks
pycryptodome otherwise, about three times slower); eth-hash is the fallback so that an environment
without safe-pysha3 still works.
"""

from __future__ import annotations

try:
    from sha3 import keccak_256 as _keccak_256
except ImportError:  # pragma: no cover - depends on the environment
    from eth_hash.auto import keccak as _eth_hash_keccak

    def keccak256(data: bytes) -> bytes:
        """Return the 32-byte Keccak-256 digest of ``data``."""
        return bytes(_eth_hash_keccak(data))

else:

    def keccak256(data: bytes) -> bytes:
        """Return the 32-byte Keccak-256 digest of ``data``."""
        return _keccak_256(data).digest()  # type: ignore[no-any-return]
