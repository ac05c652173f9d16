"""The x402 ``payment-identifier`` extension on the wire: what a seller's 402 declares, where a
payment payload carries its id, and what an id may be (16 to 128 letters, digits, ``-``, ``_``).

>>> payload_extensions({}, "pay_0123456789abcdef")
{'payment-identifier': {'info': {'required': False, 'id': 'pay_0123456789abcdef'}}}
"""

from __future__ import annotations

import copy
import re
import secrets
from typing import Any

from x402mw.protocol.models import PaymentPayload, PaymentRequired

PAYMENT_IDENTIFIER = "payment-identifier"
"""The extension's key in ``PaymentRequired.extensions`` and ``PaymentPayload.extensions``."""

CONFLICT = "payment_identifier_conflict"
"""The reason code (and HTTP 409) of an id already used with another payment payload."""

DECLARATION: dict[str, Any] = {
    "info": {"required": False},
    "schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "required": {"type": "boolean"},
            "id": {"type": "string", "minLength": 16, "maxLength": 128, "pattern": "^[a-zA-Z0-9_-]+$"},
        },
        "required": ["required"],
    },
}
"""What a seller's 402 carries under ``extensions["payment-identifier"]``: an id is welcome, not required."""

_ID = re.compile(r"[A-Za-z0-9_-]{16,128}")


def identifier_of(payload: PaymentPayload) -> str | None:
    """The id the payload's ``payment-identifier`` extension carries; None without one;
    ``ValueError`` for an id that is not 16 to 128 letters, digits, ``-`` or ``_``."""
    extension = (payload.extensions or {}).get(PAYMENT_IDENTIFIER)
    info = extension.get("info") if isinstance(extension, dict) else None
    found = info.get("id") if isinstance(info, dict) else None
    if found is None:
        return None
    if not isinstance(found, str) or not _ID.fullmatch(found):
        raise ValueError("the payment-identifier id must be 16 to 128 characters: letters, digits, '-' and '_'")
    return found


def declared(required: PaymentRequired) -> bool:
    """Whether a seller's 402 declares the extension (a client then sends an id)."""
    return isinstance((required.extensions or {}).get(PAYMENT_IDENTIFIER), dict)


def new_identifier() -> str:
    """A new id: ``pay_`` and 32 random hex digits."""
    return "pay_" + secrets.token_hex(16)


def payload_extensions(declared_extensions: dict[str, Any] | None, identifier: str) -> dict[str, Any]:
    """A payload's ``extensions``: the seller's declaration of the extension echoed, with ``id`` added."""
    found = (declared_extensions or {}).get(PAYMENT_IDENTIFIER)
    extension = copy.deepcopy(found) if isinstance(found, dict) else {}
    info = extension.get("info")
    extension["info"] = {**(info if isinstance(info, dict) else {"required": False}), "id": identifier}
    return {PAYMENT_IDENTIFIER: extension}
