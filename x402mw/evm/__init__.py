"""Ethereum primitives for x402mw: keccak, addresses and keys, EIP-712/EIP-3009 transfer
authorizations, and EIP-191 signed receipts.

Modules: :mod:`~x402mw.evm.keccak`, :mod:`~x402mw.evm.keys`, :mod:`~x402mw.evm.eip712`,
:mod:`~x402mw.evm.receipts`.
"""

from __future__ import annotations

from x402mw.evm.eip712 import (
    InvalidSignatureError,
    TokenDomain,
    TransferAuthorization,
    random_nonce,
    recover_digest_signer,
    recover_transfer_signer,
    sign_digest,
    sign_transfer,
    transfer_digest,
)
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import address_of, is_address, new_private_key, to_checksum_address
from x402mw.evm.receipts import (
    RECEIPT_FIELDS,
    receipt_message,
    recover_receipt_signer,
    sign_receipt,
    verify_receipt,
)

__all__ = [
    "RECEIPT_FIELDS",
    "InvalidSignatureError",
    "TokenDomain",
    "TransferAuthorization",
    "address_of",
    "is_address",
    "keccak256",
    "new_private_key",
    "random_nonce",
    "receipt_message",
    "recover_digest_signer",
    "recover_receipt_signer",
    "recover_transfer_signer",
    "sign_digest",
    "sign_receipt",
    "sign_transfer",
    "to_checksum_address",
    "transfer_digest",
    "verify_receipt",
]
