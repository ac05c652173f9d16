"""Settlement receipts signed with EIP-191 (``personal_sign``) by the platform's receipt key.

The signed message is the canonical JSON of the receipt fields: only names from
:data:`RECEIPT_FIELDS`, string values, keys sorted, no whitespace, ASCII-escaped. Anyone can check
a receipt with a generic wallet library, e.g. eth-account's
``Account.recover_message(encode_defunct(text=message), signature=...)``.

>>> from x402mw.evm.keys import address_of, new_private_key
>>> key = new_private_key()
>>> receipt = sign_receipt({"network": "eip155:8453", "amount": "10000", "transaction": "0xab"}, key)
>>> verify_receipt(receipt, address_of(key))
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from x402mw.evm.eip712 import recover_digest_signer, sign_digest
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import address_of

RECEIPT_FIELDS = (  # ``scheme`` and ``maxAmount`` (the signed ceiling) only on ``upto`` receipts
    "challengeId",
    "endpointId",
    "network",
    "asset",
    "amount",
    "payer",
    "payTo",
    "transaction",
    "settledAt",
    "scheme",
    "maxAmount",
)
_KNOWN = frozenset(RECEIPT_FIELDS)
_SIGNATURE_KEYS = ("signer", "signature")


def receipt_message(fields: Mapping[str, str]) -> bytes:
    """Return the canonical bytes that a receipt's signature covers.

    ``fields`` holds any subset of :data:`RECEIPT_FIELDS` (absent ones are simply omitted), each a
    ``str``. Raises ``ValueError`` on an unknown key or a non-string value.
    """
    unknown = set(fields) - _KNOWN
    if unknown:
        raise ValueError(f"unknown receipt fields: {', '.join(sorted(map(str, unknown)))}")
    for name, value in fields.items():
        if not isinstance(value, str):
            raise ValueError(f"receipt field {name!r} must be a string")
    text = json.dumps(dict(fields), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text.encode("ascii")


def personal_message_digest(message: bytes) -> bytes:
    """EIP-191 version 0x45: ``keccak256("\\x19Ethereum Signed Message:\\n" + len(message) + message)``."""
    return keccak256(b"\x19Ethereum Signed Message:\n" + str(len(message)).encode("ascii") + message)


def sign_receipt(fields: Mapping[str, str], private_key: bytes) -> dict[str, str]:
    """Return ``fields`` plus ``signer`` (checksum address) and ``signature`` (``0x`` + 65-byte hex).

    Raises ``ValueError`` as :func:`receipt_message` does, or for a malformed key.
    """
    signature = sign_digest(private_key, personal_message_digest(receipt_message(fields)))
    return {**fields, "signer": address_of(private_key), "signature": "0x" + signature.hex()}


def recover_receipt_signer(receipt: Mapping[str, str]) -> str:
    """Return the checksum address that signed ``receipt``.

    The ``signer`` key, if present, is ignored here (see :func:`verify_receipt`). Raises
    ``ValueError`` (including :class:`~x402mw.evm.eip712.InvalidSignatureError`) when the receipt
    or its signature is malformed.
    """
    signature_hex = receipt.get("signature")
    if not isinstance(signature_hex, str) or not signature_hex.startswith("0x"):
        raise ValueError("a receipt needs a '0x'-prefixed hex 'signature'")
    signature = bytes.fromhex(signature_hex[2:])
    fields = {k: v for k, v in receipt.items() if k not in _SIGNATURE_KEYS}
    return recover_digest_signer(personal_message_digest(receipt_message(fields)), signature)


def verify_receipt(receipt: Mapping[str, str], expected_signer: str) -> bool:
    """Whether ``receipt`` was signed by ``expected_signer`` (compared case-insensitively).

    A ``signer`` key in the receipt, if present, must name the same address. Never raises: any
    malformed input gives ``False``.
    """
    try:
        recovered = recover_receipt_signer(receipt).lower()
        claimed = receipt.get("signer")
        if claimed is not None and claimed.lower() != recovered:
            return False
        return recovered == expected_signer.lower()
    except Exception:
        return False
