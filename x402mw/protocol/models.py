"""x402 v2 wire models.

Every model serialises to camelCase JSON with nulls omitted (`to_wire`) and accepts unknown members
from other implementations (they are kept, so an echoed block round-trips unchanged).
Amounts are decimal strings of integer atomic units on the wire and ``int`` in Python.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

X402_VERSION = 2


class WireModel(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow", frozen=True)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict: camelCase keys, ``None`` members left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def _atomic(value: object) -> int:
    """Parse an atomic amount: a decimal string of digits (or an int), never a float."""
    if isinstance(value, bool | float):
        raise ValueError("amount must be a string of integer atomic units")
    if isinstance(value, int):
        result = value
    elif isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 78:
        result = int(value)
    else:
        raise ValueError("amount must be a string of integer atomic units")
    if result < 0 or result >= 2**256:
        raise ValueError("amount is out of range")
    return result


class ResourceInfo(WireModel):
    url: str
    description: str | None = None
    mime_type: str | None = Field(default=None, alias="mimeType")


class PaymentRequirements(WireModel):
    """One way to pay, as offered in ``PaymentRequired.accepts`` and echoed in ``accepted``."""

    scheme: str = Field(description="`exact`")
    network: str = Field(description="CAIP-2 network, e.g. `eip155:8453`")
    amount: int = Field(description="integer string of the token's atomic units")
    asset: str = Field(description="token address")
    pay_to: str = Field(alias="payTo", description="recipient address")
    max_timeout_seconds: int = Field(alias="maxTimeoutSeconds", description="how long the payment may take")
    extra: dict[str, Any] = Field(default_factory=dict, description="the token's EIP-712 domain `name` and `version`")

    _check_amount = field_validator("amount", mode="before")(lambda v: _atomic(v))

    @field_serializer("amount")
    def _amount_out(self, value: int) -> str:
        return str(value)


class PaymentRequired(WireModel):
    """The body of the ``PAYMENT-REQUIRED`` header of a 402 answer."""

    x402_version: int = Field(default=X402_VERSION, alias="x402Version")
    error: str | None = None
    resource: ResourceInfo | None = None
    accepts: list[PaymentRequirements]
    extensions: dict[str, Any] | None = None


class Authorization(WireModel):
    """An EIP-3009 ``TransferWithAuthorization`` message (``nonce`` is 0x-prefixed 32-byte hex)."""

    from_address: str = Field(alias="from", description="payer address")
    to: str = Field(description="recipient address")
    value: int = Field(description="integer string of atomic units")
    valid_after: int = Field(alias="validAfter", description="Unix time (seconds) as a string")
    valid_before: int = Field(alias="validBefore", description="Unix time (seconds) as a string")
    nonce: str = Field(description="0x followed by 64 hex digits")

    _check_value = field_validator("value", "valid_after", "valid_before", mode="before")(lambda v: _atomic(v))

    @field_validator("nonce")
    @classmethod
    def _check_nonce(cls, value: str) -> str:
        body = value[2:] if value.startswith(("0x", "0X")) else ""
        if len(body) != 64 or any(c not in "0123456789abcdefABCDEF" for c in body):
            raise ValueError("nonce must be 0x followed by 64 hex digits")
        return "0x" + body.lower()

    @field_serializer("value", "valid_after", "valid_before")
    def _ints_out(self, value: int) -> str:
        return str(value)


class ExactEvmPayload(WireModel):
    signature: str = Field(description="EIP-712 signature of the authorization, 0x hex")
    authorization: Authorization


class PaymentPayload(WireModel):
    """The body of the ``PAYMENT-SIGNATURE`` header.

    ``accepted`` is ``None`` only for payloads read from x402 v1 (``X-PAYMENT``), where the scheme
    and network travel as top-level members instead.
    """

    x402_version: int = Field(
        default=X402_VERSION, alias="x402Version", description="2 (1 for payloads read from `X-PAYMENT`)"
    )
    resource: ResourceInfo | None = None
    accepted: PaymentRequirements | None = Field(
        default=None, description="the requirements the payer accepted, as offered"
    )
    payload: ExactEvmPayload = Field(description="the signed authorization")
    extensions: dict[str, Any] | None = None
    scheme: str | None = None
    network: str | None = None


def _uint256(value: object) -> int:
    """A uint256 on the wire: a decimal string (or int) of atomic units, or ``0x`` hex (Permit2 nonces
    are written both ways)."""
    if isinstance(value, str) and value[:2] in ("0x", "0X") and 2 < len(value) <= 66:
        try:
            return int(value[2:], 16)
        except ValueError:
            raise ValueError("must be a decimal string or 0x hex of a uint256") from None
    return _atomic(value)


class TokenPermissions(WireModel):
    token: str
    amount: int

    _check_amount = field_validator("amount", mode="before")(lambda v: _atomic(v))

    @field_serializer("amount")
    def _amount_out(self, value: int) -> str:
        return str(value)


class UptoWitness(WireModel):
    """The x402 upto proxy's witness: the payee, the only facilitator that may settle, the start."""

    to: str
    facilitator: str
    valid_after: int = Field(alias="validAfter")

    _check_start = field_validator("valid_after", mode="before")(lambda v: _atomic(v))

    @field_serializer("valid_after")
    def _start_out(self, value: int) -> str:
        return str(value)


class Permit2Authorization(WireModel):
    """A Permit2 ``PermitWitnessTransferFrom`` with the upto witness (``permitted.amount`` is the ceiling)."""

    from_address: str = Field(alias="from")
    permitted: TokenPermissions
    spender: str
    nonce: int
    deadline: int
    witness: UptoWitness

    _check_nonce = field_validator("nonce", mode="before")(lambda v: _uint256(v))
    _check_deadline = field_validator("deadline", mode="before")(lambda v: _atomic(v))

    @field_serializer("nonce", "deadline")
    def _ints_out(self, value: int) -> str:
        return str(value)


class UptoEvmPayload(WireModel):
    signature: str
    permit2_authorization: Permit2Authorization = Field(alias="permit2Authorization")


class UptoPaymentPayload(WireModel):
    """The body of ``PAYMENT-SIGNATURE`` for the ``upto`` scheme (Permit2); x402 v2 only."""

    x402_version: int = Field(default=X402_VERSION, alias="x402Version")
    resource: ResourceInfo | None = None
    accepted: PaymentRequirements
    payload: UptoEvmPayload
    extensions: dict[str, Any] | None = None


AnyPaymentPayload = PaymentPayload | UptoPaymentPayload
"""A payment payload of either scheme we take: ``exact`` (EIP-3009) or ``upto`` (Permit2)."""


class SettlementResponse(WireModel):
    """The body of the ``PAYMENT-RESPONSE`` header. ``extensions.receipt`` carries our signed receipt."""

    success: bool
    error_reason: str | None = Field(
        default=None, alias="errorReason", description="x402 reason code when `success` is false"
    )
    payer: str | None = Field(default=None, description="payer address")
    transaction: str = Field(default="", description="transaction hash")
    network: str
    amount: int | None = Field(default=None, description="settled amount in atomic units")
    extensions: dict[str, Any] | None = Field(default=None, description="`receipt`: the platform's signed receipt")

    _check_amount = field_validator("amount", mode="before")(lambda v: None if v is None else _atomic(v))

    @field_serializer("amount")
    def _amount_out(self, value: int | None) -> str | None:
        return None if value is None else str(value)

    @property
    def receipt(self) -> dict[str, Any] | None:
        """The platform's signed receipt, when the settlement carries one."""
        found = (self.extensions or {}).get("receipt")
        return found if isinstance(found, dict) else None


class VerifyResponse(WireModel):
    """Answer of a facilitator's ``/verify``."""

    is_valid: bool = Field(alias="isValid")
    invalid_reason: str | None = Field(
        default=None, alias="invalidReason", description="x402 reason code when `isValid` is false"
    )
    payer: str | None = Field(default=None, description="payer address")
