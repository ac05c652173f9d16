"""Reason codes carried in ``error`` / ``errorReason`` / ``invalidReason``.

Codes are opaque strings. Implementations spell them differently (``invalid_exact_evm_payload_signature``
in Python, ``invalidExactEvmPayloadSignature`` in some TypeScript code); `normalize_reason` maps both
to the snake_case form so that they compare equal.
"""

from __future__ import annotations

import re

INSUFFICIENT_FUNDS = "insufficient_funds"
INVALID_PAYLOAD = "invalid_payload"
INVALID_SCHEME = "invalid_scheme"
INVALID_NETWORK = "invalid_network"
INVALID_X402_VERSION = "invalid_x402_version"
INVALID_REQUIREMENTS = "invalid_payment_requirements"
INVALID_SIGNATURE = "invalid_exact_evm_payload_signature"
INVALID_VALID_AFTER = "invalid_exact_evm_payload_authorization_valid_after"
INVALID_VALID_BEFORE = "invalid_exact_evm_payload_authorization_valid_before"
INVALID_VALUE = "invalid_exact_evm_payload_authorization_value"
INVALID_RECIPIENT = "invalid_exact_evm_payload_recipient_mismatch"
INVALID_ASSET = "invalid_exact_evm_payload_asset_mismatch"
NONCE_USED = "invalid_exact_evm_payload_authorization_nonce_used"
CHALLENGE_EXPIRED = "challenge_expired"
TRANSACTION_REVERTED = "invalid_transaction_state"
SETTLEMENT_PENDING = "settlement_pending"
UNEXPECTED_SETTLE_ERROR = "unexpected_settle_error"
CHAIN_UNAVAILABLE = "chain_unavailable"  # nothing was sent: the same signature may be sent again later
PAYMENT_IN_USE = "payment_in_use"  # held for a tool call still running: nothing was taken
HOLD_NOT_FOUND = "hold_not_found"  # no held payment of this authorization to settle or release

_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def normalize_reason(code: str) -> str:
    """``invalidExactEvmPayloadSignature`` and ``invalid_exact_evm_payload_signature`` both give the latter."""
    return _CAMEL.sub(r"_\1", code.strip()).replace("-", "_").lower()
