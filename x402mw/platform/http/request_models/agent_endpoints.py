"""The bodies of ``POST /agent/endpoints`` and ``PATCH /agent/endpoints/:id``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, WithJsonSchema, field_validator

from x402mw.platform.http.bodies import PatchBody
from x402mw.platform.http.fields import (
    MINOR_SCHEMA,
    NAME_PATTERN,
    NonZeroAddress,
    ResourceUrl,
    minor_units,
    resource_url,
)

MinorUnits = Annotated[int, WithJsonSchema(MINOR_SCHEMA)]
CURRENCY_PATTERN = "^(?:[Uu][Ss][Dd][Cc]|[Ee][Uu][Rr][Cc])$"
"""``USDC`` or ``EURC``, in any case (``USDT`` has no EIP-3009 and is refused with its own code)."""
FIXED_NEEDS_AMOUNT: dict[str, Any] = {  # fixed pricing (the default) needs an amount
    "if": {"properties": {"pricingMode": {"const": "fixed"}}},
    "then": {"required": ["amountMinor"], "properties": {"amountMinor": {"not": {"type": "null"}}}},
}


class _EndpointFields(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    _v_url = field_validator("resourceUrl", check_fields=False)(resource_url)
    _v_amount = field_validator("amountMinor", "maxAmountMinor", mode="before", check_fields=False)(minor_units)


METERED_NEEDS_CEILING: dict[str, Any] = {  # a ceiling (maxAmountMinor) for metered pricing, and only then
    "if": {"properties": {"pricingMode": {"const": "metered"}}, "required": ["pricingMode"]},
    "then": {
        "required": ["maxAmountMinor"],
        "properties": {"maxAmountMinor": {"not": {"type": "null"}}, "amountMinor": {"type": "null"}},
    },
    "else": {"properties": {"maxAmountMinor": {"type": "null"}}},
}


# The descriptions EndpointCreate and EndpointUpdate share: one text per field in the OpenAPI document.
_NAME = "1–200 characters, no control characters"
_RESOURCE_URL = "absolute http(s) URL of the paid resource, or `mcp://tool/<name>` for an MCP tool"
_PAYOUT_ADDRESS = "EVM address receiving the funds; snapshotted in each challenge"
_PRICING_MODE = (
    "`fixed`, `dynamic` (the middleware's amount callback prices each request) or `metered` "
    "(the handler reports what each request used, up to `maxAmountMinor`)"
)
_AMOUNT_MINOR = 'integer string of minor units (`"10000"` is 0.01 USDC); required with `fixed` pricing'
_RELEASE_POLICY = "`included` (serve once the transfer is in a block) or `confirmed` (wait for confirmations)"
_MAX_TIMEOUT = "validity of challenges and authorizations in seconds, 30–3600"
_DISCOVERABLE = "list the endpoint's settled resources in the public discovery catalogue; default false"


class ChannelOffer(BaseModel):
    """Payment channels (the x402 ``batch-settlement`` scheme) offered by an endpoint."""

    model_config = ConfigDict(extra="forbid")
    minDepositMinor: MinorUnits | None = Field(
        default=None, description="integer string of minor units: the least a first deposit may be; default none"
    )
    withdrawDelaySeconds: StrictInt = Field(
        default=900,
        ge=900,
        le=2_592_000,
        description="how long a payer's timed withdrawal waits, 900 (15 minutes) to 2592000 (30 days)",
    )
    only: StrictBool = Field(
        default=False, description="offer channels alone (else beside the endpoint's `exact` or `upto` offer)"
    )
    idleRefundSeconds: StrictInt | None = Field(
        default=None,
        ge=60,
        le=31_536_000,
        description="refund what is left in a channel idle this long (seconds); default never",
    )

    _v_amount = field_validator("minDepositMinor", mode="before")(minor_units)


_CHANNEL = (
    "payment channels (`batch-settlement`): one deposit, then one off-chain voucher per request; null: not offered"
)


class EndpointCreate(_EndpointFields):
    model_config = ConfigDict(json_schema_extra={"allOf": [FIXED_NEEDS_AMOUNT, METERED_NEEDS_CEILING]})

    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN, description=_NAME)
    resourceUrl: ResourceUrl = Field(description=_RESOURCE_URL)
    chainId: StrictInt = Field(description="EVM chain id settled by this platform (see `GET /v1/x402/supported`)")
    currency: Annotated[str, WithJsonSchema({"type": "string", "pattern": CURRENCY_PATTERN})] = Field(
        description="`USDC` or `EURC`; `USDT` is refused (no EIP-3009)"
    )
    payoutAddress: NonZeroAddress = Field(description=_PAYOUT_ADDRESS)
    pricingMode: Literal["fixed", "dynamic", "metered"] = Field(default="fixed", description=_PRICING_MODE)
    amountMinor: MinorUnits | None = Field(default=None, description=_AMOUNT_MINOR)
    maxAmountMinor: MinorUnits | None = Field(
        default=None,
        description="integer string of minor units: the most one request may cost (the `upto` ceiling agents "
        "sign); required with `metered` pricing, and only then",
    )
    releasePolicy: Literal["included", "confirmed"] = Field(default="included", description=_RELEASE_POLICY)
    maxTimeoutSeconds: StrictInt = Field(default=300, ge=30, le=3600, description=_MAX_TIMEOUT)
    discoverable: StrictBool = Field(default=False, description=_DISCOVERABLE)
    channel: ChannelOffer | None = Field(default=None, description=_CHANNEL)


class EndpointUpdate(_EndpointFields, PatchBody):
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "not": {  # fixed pricing and no amount, in one request
                        "required": ["pricingMode", "amountMinor"],
                        "properties": {"pricingMode": {"const": "fixed"}, "amountMinor": {"type": "null"}},
                    }
                },
                {  # a ceiling only with metered pricing, a fixed amount never with it, in one request
                    "if": {"properties": {"pricingMode": {"const": "metered"}}, "required": ["pricingMode"]},
                    "then": {"properties": {"amountMinor": {"type": "null"}}},
                    "else": {
                        "if": {"required": ["pricingMode"]},
                        "then": {"properties": {"maxAmountMinor": {"type": "null"}}},
                    },
                },
            ]
        }
    )
    CLEARABLE = frozenset({"amountMinor", "channel"})  # a dynamic endpoint has no fixed amount

    name: str | None = Field(default=None, min_length=1, max_length=200, pattern=NAME_PATTERN, description=_NAME)
    resourceUrl: ResourceUrl | None = Field(default=None, description=_RESOURCE_URL)
    payoutAddress: NonZeroAddress | None = Field(default=None, description=_PAYOUT_ADDRESS)
    pricingMode: Literal["fixed", "dynamic", "metered"] | None = Field(default=None, description=_PRICING_MODE)
    amountMinor: MinorUnits | None = Field(default=None, description=_AMOUNT_MINOR)
    maxAmountMinor: MinorUnits | None = Field(
        default=None,
        description="integer string of minor units: the most one request may cost (the `upto` ceiling agents "
        "sign); only for a `metered` endpoint",
    )
    releasePolicy: Literal["included", "confirmed"] | None = Field(default=None, description=_RELEASE_POLICY)
    maxTimeoutSeconds: StrictInt | None = Field(default=None, ge=30, le=3600, description=_MAX_TIMEOUT)
    discoverable: StrictBool | None = Field(default=None, description=_DISCOVERABLE)
    channel: ChannelOffer | None = Field(default=None, description=_CHANNEL)
