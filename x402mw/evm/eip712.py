"""EIP-712 typed data for EIP-3009 ``TransferWithAuthorization``: digest, signing and recovery.

The hot path of settlement is :func:`recover_transfer_signer`. It encodes the struct by hand (every
field is a static 32-byte word), reuses the domain separator that :class:`TokenDomain` computes once,
and recovers the public key with libsecp256k1 through coincurve.

>>> from x402mw.evm.keys import address_of, new_private_key
>>> domain = TokenDomain("USD Coin", "2", 8453, "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")
>>> key = new_private_key()
>>> auth = TransferAuthorization(address_of(key), "0x" + "11" * 20, 10_000, 0, 2**40, random_nonce())
>>> recover_transfer_signer(domain, auth, sign_transfer(key, domain, auth)) == address_of(key)
True
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field

from coincurve import PublicKey
from coincurve.context import GLOBAL_CONTEXT

try:  # coincurve's cffi binding: calling libsecp256k1 directly skips ~10 µs of wrapper per recovery
    from coincurve._libsecp256k1 import ffi as _ffi
    from coincurve._libsecp256k1 import lib as _lib
except ImportError:  # pragma: no cover - a coincurve build without the private binding
    _ffi = _lib = None

from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import _checksum_hex, _private_key

TYPED_DATA_TYPES: dict[str, list[dict[str, str]]] = {
    "EIP712Domain": [
        {"name": "name", "type": "string"},
        {"name": "version", "type": "string"},
        {"name": "chainId", "type": "uint256"},
        {"name": "verifyingContract", "type": "address"},
    ],
    "TransferWithAuthorization": [
        {"name": "from", "type": "address"},
        {"name": "to", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "validAfter", "type": "uint256"},
        {"name": "validBefore", "type": "uint256"},
        {"name": "nonce", "type": "bytes32"},
    ],
}
"""The ``types`` of an EIP-3009 authorization as EIP-712 typed data (what a wallet's
``eth_signTypedData_v4`` and eth-account take); the type hashes below are derived from it."""


def _typehash(name: str) -> bytes:
    fields = ",".join(f"{field['type']} {field['name']}" for field in TYPED_DATA_TYPES[name])
    return keccak256(f"{name}({fields})".encode())


DOMAIN_TYPEHASH = _typehash("EIP712Domain")
TRANSFER_WITH_AUTHORIZATION_TYPEHASH = _typehash("TransferWithAuthorization")

_UINT256_LIMIT = 2**256
_ADDRESS_PADDING = bytes(12)
_SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
_SECP256K1_N_WORD = _SECP256K1_N.to_bytes(32, "big")
_HALF_N_WORD = (_SECP256K1_N // 2).to_bytes(32, "big")
_ZERO_WORD = bytes(32)
_RECOVERY_IDS = {0: 0, 1: 1, 27: 0, 28: 1}
# The checksum address of each public key recovered lately: agents pay again and again, and an
# address costs two keccaks and the checksum's arithmetic (a twelfth of a verification).
_ADDRESSES: dict[bytes, str] = {}
_ADDRESSES_KEPT = 65_536


class InvalidSignatureError(ValueError):
    """A signature is malformed: wrong length, bad ``v``, ``r``/``s`` out of range, high ``s``
    (EIP-2), or no public key recovers from it."""


def address_word(name: str, value: object) -> bytes:
    """The ABI word of an address (12 zero bytes, then its 20); ``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, str) and len(value) == 42 and value[:2] in ("0x", "0X"):
        try:
            raw = bytes.fromhex(value[2:])
        except ValueError:
            raw = b""
        # fromhex skips white space, so 40 characters give 20 bytes only when all are hex digits.
        if len(raw) == 20:
            return _ADDRESS_PADDING + raw
    raise ValueError(f"{name} must be '0x' followed by 40 hex digits")


def uint256_word(name: str, value: object) -> bytes:
    """The ABI word of a uint256; ``ValueError`` naming ``name`` for anything else (a bool too)."""
    if type(value) is not int or not 0 <= value < _UINT256_LIMIT:
        raise ValueError(f"{name} must be an int in [0, 2**256)")
    return value.to_bytes(32, "big")


@dataclass(frozen=True, slots=True)
class TokenDomain:
    """The EIP-712 domain of an EIP-3009 token.

    ``separator`` is computed once at construction from
    ``EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)``.
    Raises ``ValueError`` for a chain id outside uint256 or a malformed contract address.
    """

    name: str
    version: str
    chain_id: int
    verifying_contract: str
    separator: bytes = field(init=False, repr=False, compare=False)
    digest_prefix: bytes = field(init=False, repr=False, compare=False)  # b"\x19\x01" + separator

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not isinstance(self.version, str):
            raise ValueError("name and version must be strings")
        separator = keccak256(
            DOMAIN_TYPEHASH
            + keccak256(self.name.encode("utf-8"))
            + keccak256(self.version.encode("utf-8"))
            + uint256_word("chain_id", self.chain_id)
            + address_word("verifying_contract", self.verifying_contract)
        )
        object.__setattr__(self, "separator", separator)
        object.__setattr__(self, "digest_prefix", b"\x19\x01" + separator)


@dataclass(frozen=True, slots=True)
class TransferAuthorization:
    """An EIP-3009 ``TransferWithAuthorization`` message.

    ``value``, ``valid_after`` and ``valid_before`` are uint256 ints (atomic units and Unix seconds);
    ``nonce`` is 32 bytes. Raises ``ValueError`` on a field that cannot be encoded.

    ``words`` is the six fields ABI-encoded (each a static 32-byte word), made once at construction
    while the fields are checked: the struct hash and the token call's arguments both start from it.
    """

    from_address: str
    to: str
    value: int
    valid_after: int
    valid_before: int
    nonce: bytes
    words: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.nonce, bytes) or len(self.nonce) != 32:
            raise ValueError("nonce must be 32 bytes")
        words = b"".join(
            (
                address_word("from_address", self.from_address),
                address_word("to", self.to),
                uint256_word("value", self.value),
                uint256_word("valid_after", self.valid_after),
                uint256_word("valid_before", self.valid_before),
                self.nonce,
            )
        )
        object.__setattr__(self, "words", words)

    def struct_hash(self) -> bytes:
        """The EIP-712 ``hashStruct`` of this message."""
        return keccak256(TRANSFER_WITH_AUTHORIZATION_TYPEHASH + self.words)


def transfer_digest(domain: TokenDomain, auth: TransferAuthorization) -> bytes:
    """The 32-byte EIP-712 digest ``keccak256(0x1901 || domainSeparator || hashStruct(auth))``."""
    return keccak256(domain.digest_prefix + auth.struct_hash())


def sign_digest(private_key: bytes, digest: bytes) -> bytes:
    """Sign a 32-byte digest: 65 bytes ``r || s || v`` with low ``s`` and ``v`` in {27, 28}."""
    if len(digest) != 32:
        raise ValueError("a digest must be 32 bytes")
    signature = _private_key(private_key).sign_recoverable(digest, hasher=None)
    # libsecp256k1 always produces low-s signatures; only v needs Ethereum's offset.
    return signature[:64] + bytes((signature[64] + 27,))


def sign_transfer(private_key: bytes, domain: TokenDomain, auth: TransferAuthorization) -> bytes:
    """Sign ``auth`` for ``domain`` as an EIP-3009 payer would (see :func:`sign_digest`)."""
    return sign_digest(private_key, transfer_digest(domain, auth))


def recover_digest_signer(digest: bytes, signature: bytes) -> str:
    """Return the checksum address that signed the 32-byte ``digest``.

    ``signature`` is 65 bytes ``r || s || v`` with ``v`` in {0, 1, 27, 28}. Raises
    :class:`InvalidSignatureError` if it is malformed or high-s (EIP-2 malleability), and
    ``ValueError`` if the digest is not 32 bytes.
    """
    if len(digest) != 32:
        raise ValueError("a digest must be 32 bytes")
    if not isinstance(signature, bytes | bytearray) or len(signature) != 65:
        raise InvalidSignatureError("a signature must be 65 bytes")
    recovery_id = _RECOVERY_IDS.get(signature[64])
    if recovery_id is None:
        raise InvalidSignatureError("signature v must be 0, 1, 27 or 28")
    # Equal-length big-endian byte strings compare like the integers they encode.
    r, s = bytes(signature[:32]), bytes(signature[32:64])
    if not _ZERO_WORD < r < _SECP256K1_N_WORD:
        raise InvalidSignatureError("signature r is out of range")
    if not _ZERO_WORD < s <= _HALF_N_WORD:
        raise InvalidSignatureError("signature s is zero or in the upper half of the curve order (EIP-2)")
    return _recover_address(r + s, recovery_id, digest)


def _address_of_public(public: bytes) -> str:
    return _checksum_hex(keccak256(public[1:])[-20:].hex())


class _Scratch(threading.local):
    """libsecp256k1's in and out structures, allocated once per thread (two allocations would cost
    a tenth of what the code around the recovery does): cffi lets go of the GIL during a call, so
    threads must not share them."""

    def __init__(self) -> None:
        self.parsed = _ffi.new("secp256k1_ecdsa_recoverable_signature *")
        self.point = _ffi.new("secp256k1_pubkey *")
        self.point_bytes = _ffi.buffer(self.point)


_scratch = _Scratch() if _lib is not None else None


def _recover_address(compact: bytes, recovery_id: int, digest: bytes) -> str:
    """The checksum address of the key that made the signature, or InvalidSignatureError."""
    if _scratch is None:  # pragma: no cover - see the import
        try:
            public: bytes = PublicKey.from_signature_and_message(
                compact + bytes((recovery_id,)), digest, hasher=None
            ).format(compressed=False)
        except Exception as exc:  # coincurve raises ValueError, or Exception on older versions
            raise InvalidSignatureError("no public key recovers from this signature") from exc
        return _address_of_public(public)
    context = GLOBAL_CONTEXT.ctx
    scratch = _scratch
    if not _lib.secp256k1_ecdsa_recoverable_signature_parse_compact(context, scratch.parsed, compact, recovery_id):
        raise InvalidSignatureError("the signature does not parse")
    if not _lib.secp256k1_ecdsa_recover(context, scratch.point, scratch.parsed, digest):
        raise InvalidSignatureError("no public key recovers from this signature")
    # The point's 64 bytes (libsecp256k1's own form) name the key: serialized and hashed into an
    # address the first time only.
    key = scratch.point_bytes[:]
    address = _ADDRESSES.get(key)
    if address is None:
        output = _ffi.new("unsigned char[65]")
        length = _ffi.new("size_t *", 65)
        _lib.secp256k1_ec_pubkey_serialize(context, output, length, scratch.point, _lib.SECP256K1_EC_UNCOMPRESSED)
        if len(_ADDRESSES) >= _ADDRESSES_KEPT:
            _ADDRESSES.clear()
        address = _ADDRESSES[key] = _address_of_public(bytes(_ffi.buffer(output, 65)))
    return address


def recover_transfer_signer(domain: TokenDomain, auth: TransferAuthorization, signature: bytes) -> str:
    """Return the checksum address that signed ``auth`` for ``domain``.

    The caller compares it (case-insensitively) with ``auth.from_address``. Raises
    :class:`InvalidSignatureError` as :func:`recover_digest_signer` does.
    """
    return recover_digest_signer(keccak256(domain.digest_prefix + auth.struct_hash()), signature)


def random_nonce() -> bytes:
    """Return 32 random bytes from :mod:`secrets`, for ``TransferAuthorization.nonce``."""
    return secrets.token_bytes(32)
