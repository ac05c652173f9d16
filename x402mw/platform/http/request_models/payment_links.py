"""The bodies of ``POST /payment-links`` and ``PATCH /payment-links/:id``."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, WithJsonSchema, field_validator

from x402mw.platform.http.bodies import PatchBody
from x402mw.platform.http.fields import NAME_PATTERN, UUID_PATTERN, HttpUrl, http_url, is_uuid
from x402mw.platform.http.request_models.payment_intents import (
    _CREATE_RULES,
    _METADATA_SCHEMA,
    AcceptedCurrencies,
    Currency,
    OrderAmount,
    PaymentMethodsIn,
    _metadata,
)
from x402mw.platform.services.payment_intents import FIXED_TRANSFER_KEY, parse_amount

SLUG_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$"
"""A slug: 1-64 lower-case letters, digits and inner hyphens, and not a UUID (``/paylink/<uuid>``
names payment intents)."""


def _slug(value: str) -> str:
    if is_uuid(value):
        raise ValueError("must not be a UUID (those name payment intents in /paylink/ links)")
    return value


Slug = Annotated[
    str,
    Field(pattern=SLUG_PATTERN),
    AfterValidator(_slug),
    WithJsonSchema({"type": "string", "pattern": SLUG_PATTERN, "not": {"pattern": UUID_PATTERN}}),
]


def _link_metadata(value: object) -> dict[str, str]:
    found = _metadata(value)
    if FIXED_TRANSFER_KEY in found:
        raise ValueError(f"{FIXED_TRANSFER_KEY} cannot be set on a link: every buyer gets an order of their own")
    return found


_LINK_METADATA_SCHEMA = _METADATA_SCHEMA | {"not": {"required": [FIXED_TRANSFER_KEY]}}


class PaymentLinkCreate(BaseModel):
    # acceptedCurrencies must include currency, as for payment intents
    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": [_CREATE_RULES[0]]})

    name: str = Field(
        min_length=1,
        max_length=200,
        pattern=NAME_PATTERN,
        description="what the link sells, shown to the merchant (1–200 characters)",
    )
    amount: OrderAmount = Field(description="decimal amount, as for payment intents; answered as sent")
    currency: Currency = Field(description="the primary coin")
    acceptedCurrencies: AcceptedCurrencies = None
    paymentMethods: PaymentMethodsIn | None = Field(default=None, description="what checkout offers each buyer's order")
    successUrl: HttpUrl | None = Field(default=None, description="where buyers return after paying")
    cancelUrl: HttpUrl | None = Field(default=None, description="where buyers return after cancelling")
    metadata: Annotated[dict[str, str], WithJsonSchema(_LINK_METADATA_SCHEMA)] | None = Field(
        default=None, description="copied to each buyer's payment intent (not `fixed_transfer_customer_id`)"
    )
    slug: Slug | None = Field(
        default=None,
        description="adds `{checkout_url_base}/paylink/<slug>.<merchant id>`: 1–64 lower-case letters, digits "
        "and inner hyphens, not a UUID, unique among the merchant's links (409 `slug_taken`)",
    )

    _v_amount = field_validator("amount", mode="before")(parse_amount)
    _v_urls = field_validator("successUrl", "cancelUrl")(http_url)
    _v_metadata = field_validator("metadata", mode="before")(_link_metadata)


class PaymentLinkUpdate(PatchBody):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=NAME_PATTERN, description="a new name")
    active: StrictBool | None = Field(
        default=None, description="false: the link opens no new orders (orders already opened stay payable)"
    )
