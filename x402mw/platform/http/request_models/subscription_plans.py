"""The bodies of ``POST /subscription-plans`` and ``PATCH /subscription-plans/:id``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, WithJsonSchema, field_validator

from x402mw.platform.http.bodies import PatchBody
from x402mw.platform.http.fields import NAME_PATTERN, HttpUrl, amount_schema, http_url
from x402mw.platform.services.payment_intents import ORDER_AMOUNTS, parse_amount
from x402mw.platform.services.subscriptions.plans import SLUG_PATTERN

MAX_GRACE_DAYS = 365
Amount = Annotated[Any, WithJsonSchema(amount_schema(ORDER_AMOUNTS))]
GraceDays = Annotated[StrictInt, Field(ge=0, le=MAX_GRACE_DAYS)]


class PlanCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1,
        max_length=200,
        pattern=NAME_PATTERN,
        description="shown to customers on the subscribe page and in emails, 1–200 characters",
    )
    amount: Amount = Field(
        description="decimal amount per period, greater than 0, at most 6 decimals and 1,000,000,000; a string "
        'such as `"9.99"` is recommended, JSON numbers are read exactly'
    )
    currency: Literal["USDC", "USDT", "EURC"] = Field(description="the coin customers pay in")
    interval: Literal["weekly", "monthly", "quarterly", "yearly"] = Field(description="the length of a billing period")
    slug: str | None = Field(
        default=None,
        pattern=SLUG_PATTERN,
        description="names the plan in its checkout link (`su_<slug>.<merchant id>`) instead of its id: 1–32 "
        "lower-case letters, digits and inner hyphens, unique among the merchant's plans (`409 "
        "slug_taken`)",
    )
    graceDays: GraceDays | None = Field(
        default=None,
        description="days a past-due subscription is kept before it expires, 0–365; null or absent: the "
        "platform's (7 by default)",
    )
    returnUrl: HttpUrl | None = None

    _v_amount = field_validator("amount", mode="before")(parse_amount)
    _v_url = field_validator("returnUrl")(http_url)


class PlanUpdate(PatchBody):
    CLEARABLE = frozenset({"graceDays", "returnUrl"})  # null: the platform's grace period; no return link
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(
        default=None, min_length=1, max_length=200, pattern=NAME_PATTERN, description="1–200 characters"
    )
    amount: Amount | None = Field(
        default=None,
        description="decimal amount per period, greater than 0, at most 6 decimals and 1,000,000,000; a string "
        'such as `"9.99"` is recommended, JSON numbers are read exactly; applies to invoices opened'
        " after the change",
    )
    active: StrictBool | None = Field(
        default=None,
        description="false: the plan opens no new subscriptions (`409 plan_inactive`); open ones keep renewing",
    )
    graceDays: GraceDays | None = Field(
        default=None,
        description="days a past-due subscription is kept before it expires, 0–365; null or absent: the "
        "platform's (7 by default)",
    )
    returnUrl: HttpUrl | None = None

    _v_amount = field_validator("amount", mode="before")(lambda value: None if value is None else parse_amount(value))
    _v_url = field_validator("returnUrl")(http_url)
