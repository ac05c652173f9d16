"""The body of ``POST /payment-intents`` and what payment links share with it (metadata, accepted
payment methods, an amount as sent)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from x402mw.platform.http.fields import NAME_PATTERN, NO_NUL, Email, HttpUrl, amount_schema, http_url
from x402mw.platform.services.payment_intents import (
    ORDER_AMOUNTS,
    parse_amount,
)
from x402mw.protocol.prices import JsonNumber

Currency = Literal["USDC", "USDT", "EURC"]
OrderAmount = Annotated[int, WithJsonSchema(amount_schema(ORDER_AMOUNTS))]
"""An order's amount: a decimal string or a JSON number, parsed (`parse_amount`) before validation."""
AcceptedCurrencies = Annotated[
    list[Currency] | None,
    Field(
        min_length=1,
        max_length=3,
        description="coins offered at checkout; must include `currency`; default `[currency]`",
    ),
]
MAX_METADATA_KEYS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 50, 40, 500


def _metadata(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("must be an object of string values")
    if len(value) > MAX_METADATA_KEYS:
        raise ValueError(f"may have at most {MAX_METADATA_KEYS} keys")
    for key, item in value.items():
        if not key or len(key) > MAX_METADATA_KEY:
            raise ValueError(f"keys must be 1-{MAX_METADATA_KEY} characters")
        if not isinstance(item, str):
            raise ValueError(f"the value of {key[:40]!r} must be a string")
        if len(item) > MAX_METADATA_VALUE:
            raise ValueError(f"the value of {key[:40]!r} is longer than {MAX_METADATA_VALUE} characters")
    return value


def sent_text(amount: object) -> str | None:
    """An amount sent as a string, kept to be answered as sent (it passed the amount grammar); None
    for a JSON number, answered as its plain decimal."""
    return amount if isinstance(amount, str) and not isinstance(amount, JsonNumber) else None


def _timestamp(value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("must be an ISO 8601 timestamp string")
    try:
        # RFC 3339 allows a lower-case "t" and "z"; Python's parser only the upper-case ones
        parsed = datetime.fromisoformat(value.upper())
    except ValueError:
        raise ValueError("must be an ISO 8601 timestamp, e.g. 2026-01-31T12:00:00Z") from None
    if parsed.tzinfo is None:
        raise ValueError("must carry a timezone, e.g. 2026-01-31T12:00:00Z")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # within a day of year 1 or year 9999: as good as the first or last instant
        return (datetime.min if parsed.year == 1 else datetime.max).replace(tzinfo=UTC)


_METADATA_SCHEMA = {
    "type": "object",
    "maxProperties": MAX_METADATA_KEYS,
    "propertyNames": {"minLength": 1, "maxLength": MAX_METADATA_KEY, "pattern": NO_NUL},
    "additionalProperties": {"type": "string", "maxLength": MAX_METADATA_VALUE, "pattern": NO_NUL},
}
# Rules across fields, as JSON Schema says them (the handler checks the same).
_CREATE_RULES: list[Any] = [
    {  # acceptedCurrencies must include currency
        "if": {"required": ["currency", "acceptedCurrencies"], "properties": {"acceptedCurrencies": {"type": "array"}}},
        "then": {
            "anyOf": [
                {"properties": {"currency": {"const": symbol}, "acceptedCurrencies": {"contains": {"const": symbol}}}}
                for symbol in ("USDC", "USDT", "EURC")
            ]
        },
    },
    *(
        {  # a legacy flat field and its customer.* twin, both given: send one of them
            "not": {
                "required": [flat, "customer"],
                "properties": {
                    flat: {"type": "string"},
                    "customer": {"type": "object", "required": [inner], "properties": {inner: {"type": "string"}}},
                },
            }
        }
        for flat, inner in (("customerEmail", "email"), ("customerName", "name"))
    ),
]


class CustomerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    email: Email | None = Field(
        default=None,
        description="exactly one email address (`local@domain.example`; no list, group or display name), at "
        "most 320 characters",
    )
    name: str | None = Field(default=None, max_length=200, pattern=NAME_PATTERN, description="at most 200 characters")


class PaymentMethodsIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "not": {
                "anyOf": [  # no method at all; the transfer panel open without transfer
                    {
                        "required": ["wallet", "transfer"],
                        "properties": {"wallet": {"const": False}, "transfer": {"const": False}},
                    },
                    {
                        "required": ["transferDefaultOpen", "transfer"],
                        "properties": {"transferDefaultOpen": {"const": True}, "transfer": {"const": False}},
                    },
                ]
            }
        },
    )

    wallet: StrictBool = Field(default=True, description="offer payment from a browser wallet (default true)")
    transfer: StrictBool = Field(
        default=True, description="offer a transfer to a dedicated deposit address (default true)"
    )
    transferDefaultOpen: StrictBool = Field(
        default=False, description="open the transfer panel first (default false; needs `transfer`)"
    )

    @model_validator(mode="after")
    def _one_method(self) -> PaymentMethodsIn:
        if not (self.wallet or self.transfer):
            raise ValueError("at least one of wallet and transfer must be true")
        if self.transferDefaultOpen and not self.transfer:
            raise ValueError("transferDefaultOpen needs transfer")
        return self


class PaymentIntentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": _CREATE_RULES})

    orderId: str = Field(
        min_length=1,
        max_length=200,
        description="the order's id in the merchant's system, 1–200 characters, unique per merchant and mode",
    )
    amount: OrderAmount = Field(
        description="decimal amount, greater than 0, at most 6 decimals and 1,000,000,000; a string such as "
        '`"12.50"` is recommended, JSON numbers are read exactly (never as floats)'
    )
    currency: Currency = Field(description="the primary coin")
    acceptedCurrencies: AcceptedCurrencies = None
    customer: CustomerIn | None = Field(default=None, description="the buyer")
    customerEmail: Email | None = Field(
        default=None, description="legacy form of `customer.email`; must agree with it when both are sent"
    )
    customerName: str | None = Field(
        default=None,
        max_length=200,
        pattern=NAME_PATTERN,
        description="legacy form of `customer.name`; must agree with it when both are sent",
    )
    description: str | None = Field(default=None, min_length=1, max_length=1000)
    successUrl: HttpUrl | None = Field(
        default=None, description="absolute http(s) URL the buyer returns to after paying, at most 2048 characters"
    )
    cancelUrl: HttpUrl | None = Field(
        default=None, description="absolute http(s) URL the buyer returns to after cancelling, at most 2048 characters"
    )
    metadata: Annotated[dict[str, str], WithJsonSchema(_METADATA_SCHEMA)] | None = Field(
        default=None,
        description="at most 50 string values, keys at most 40 and values at most 500 characters. "
        "`fixed_transfer_customer_id` reuses one deposit address for that customer's orders (`409 "
        "fixed_transfer_active_payment` while another open order holds it)",
    )
    paymentMethods: PaymentMethodsIn | None = Field(
        default=None, description="what checkout offers; default wallet and transfer, transfer panel closed"
    )
    expiresAt: datetime | None = Field(
        default=None, description="ISO 8601 timestamp with a timezone, in the future; the order expires then"
    )

    _v_amount = field_validator("amount", mode="before")(parse_amount)
    _v_urls = field_validator("successUrl", "cancelUrl")(http_url)
    _v_metadata = field_validator("metadata", mode="before")(_metadata)
    _v_expires = field_validator("expiresAt", mode="before")(_timestamp)
