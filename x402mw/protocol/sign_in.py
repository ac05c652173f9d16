"""Sign-in-with-x on the wire: the ``SIGN-IN-WITH-X`` header and the EIP-4361 (SIWE) message it signs.

The header is base64 of a JSON object (``domain``, ``address``, ``uri``, ``version``, ``chainId``
as CAIP-2, ``type``, ``nonce``, ``issuedAt``, the optional ``statement``, ``expirationTime``,
``notBefore``, ``requestId``, ``resources``, and ``signature``). The signed text is rebuilt from
those fields, so a signature covers exactly what the header says.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from x402mw.errors import InvalidPaymentError

SIGN_IN_WITH_X = "sign-in-with-x"
SIGN_IN_HEADER = "SIGN-IN-WITH-X"
MAX_HEADER = 8192
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
_SIGNATURE = re.compile(r"^0x[0-9a-fA-F]{130,}$")
_CHAIN = re.compile(r"^eip155:[1-9][0-9]{0,15}$")
_NONCE = re.compile(r"^[A-Za-z0-9]{8,128}$")
_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]*$")


@dataclass(frozen=True, slots=True)
class SignInMessage:
    """A decoded ``SIGN-IN-WITH-X`` header (EVM only)."""

    domain: str
    address: str
    uri: str
    version: str
    chain_id: str
    nonce: str
    issued_at: str
    signature: str
    statement: str | None = None
    expiration_time: str | None = None
    not_before: str | None = None
    request_id: str | None = None
    resources: tuple[str, ...] | None = None

    def text(self) -> str:
        """The EIP-4361 message the signature is over."""
        return siwe_text(self)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "domain": self.domain,
            "address": self.address,
            "uri": self.uri,
            "version": self.version,
            "chainId": self.chain_id,
            "type": "eip191",
            "nonce": self.nonce,
            "issuedAt": self.issued_at,
        }
        for key, value in (
            ("statement", self.statement),
            ("expirationTime", self.expiration_time),
            ("notBefore", self.not_before),
            ("requestId", self.request_id),
            ("resources", list(self.resources) if self.resources is not None else None),
        ):
            if value is not None:
                wire[key] = value
        wire["signature"] = self.signature
        return wire


def siwe_text(message: SignInMessage) -> str:
    """EIP-4361's message text: header, address, optional statement, then the fields in order."""
    prefix = f"{message.domain} wants you to sign in with your Ethereum account:\n{message.address}"
    prefix = f"{prefix}\n\n{message.statement}" if message.statement is not None else prefix + "\n"
    lines = [
        f"URI: {message.uri}",
        f"Version: {message.version}",
        f"Chain ID: {message.chain_id.removeprefix('eip155:')}",
        f"Nonce: {message.nonce}",
        f"Issued At: {message.issued_at}",
    ]
    if message.expiration_time:
        lines.append(f"Expiration Time: {message.expiration_time}")
    if message.not_before:
        lines.append(f"Not Before: {message.not_before}")
    if message.request_id is not None:
        lines.append(f"Request ID: {message.request_id}")
    if message.resources is not None:
        lines.append("\n".join(["Resources:", *(f"- {r}" for r in message.resources)]))
    return prefix + "\n\n" + "\n".join(lines)


def parse_time(value: str) -> datetime:
    """An RFC 3339 time (``2026-11-26T02:00:00.000Z``) as an aware datetime; ValueError otherwise."""
    if not isinstance(value, str) or len(value) > 40 or "T" not in value:
        raise ValueError("not an RFC 3339 time")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError("an RFC 3339 time needs its offset")
    return parsed.astimezone(UTC)


def _text(data: dict[str, Any], key: str, *, required: bool = True, limit: int = 2048) -> str | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > limit or not _PRINTABLE.match(value):
        raise InvalidPaymentError(f"the sign-in message's {key} is missing or malformed", reason="invalid_siwx_payload")
    return value


def decode_sign_in(header: str) -> SignInMessage:
    """Decode a ``SIGN-IN-WITH-X`` header; `InvalidPaymentError` (reason ``invalid_siwx_payload``,
    ``invalid_siwx_malformed_signature`` or ``invalid_siwx_unsupported_chain``) when it is unusable."""
    if len(header) > MAX_HEADER:
        raise InvalidPaymentError("the SIGN-IN-WITH-X header is too large", reason="invalid_siwx_payload")
    try:
        data = json.loads(base64.b64decode(header.strip(), validate=True))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidPaymentError(
            "the SIGN-IN-WITH-X header is not base64 of a JSON object", reason="invalid_siwx_payload"
        ) from None
    if not isinstance(data, dict):
        raise InvalidPaymentError("the SIGN-IN-WITH-X header is not a JSON object", reason="invalid_siwx_payload")
    chain = _text(data, "chainId", limit=64) or ""
    if not _CHAIN.match(chain) or data.get("type", "eip191") != "eip191":
        raise InvalidPaymentError(
            "only EVM (eip155, eip191) sign-in is accepted", reason="invalid_siwx_unsupported_chain"
        )
    address = _text(data, "address", limit=42) or ""
    if not _ADDRESS.match(address):
        raise InvalidPaymentError("the sign-in address is not an EVM address", reason="invalid_siwx_payload")
    signature = data.get("signature")
    if not isinstance(signature, str) or len(signature) > 4096 or not _SIGNATURE.match(signature):
        raise InvalidPaymentError("the sign-in signature is malformed", reason="invalid_siwx_malformed_signature")
    nonce = _text(data, "nonce", limit=128) or ""
    if not _NONCE.match(nonce):
        raise InvalidPaymentError("the sign-in nonce must be 8 to 128 letters and digits", reason="invalid_siwx_nonce")
    resources = data.get("resources")
    if resources is not None and (
        not isinstance(resources, list)
        or len(resources) > 16
        or not all(isinstance(r, str) and 0 < len(r) <= 2048 and _PRINTABLE.match(r) for r in resources)
    ):
        raise InvalidPaymentError("the sign-in resources are malformed", reason="invalid_siwx_payload")
    statement = _text(data, "statement", required=False, limit=1000)
    if statement is not None and "\n" in statement:
        raise InvalidPaymentError("the sign-in statement spans lines", reason="invalid_siwx_payload")
    return SignInMessage(
        domain=_text(data, "domain", limit=255) or "",
        address=address,
        uri=_text(data, "uri") or "",
        version=_text(data, "version", limit=8) or "",
        chain_id=chain,
        nonce=nonce,
        issued_at=_text(data, "issuedAt", limit=40) or "",
        signature=signature,
        statement=statement,
        expiration_time=_text(data, "expirationTime", required=False, limit=40),
        not_before=_text(data, "notBefore", required=False, limit=40),
        request_id=_text(data, "requestId", required=False, limit=200),
        resources=tuple(resources) if resources is not None else None,
    )


def encode_sign_in(message: SignInMessage) -> str:
    """The ``SIGN-IN-WITH-X`` header value of a signed message."""
    return base64.b64encode(json.dumps(message.to_wire(), separators=(",", ":")).encode()).decode("ascii")
