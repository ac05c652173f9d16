"""What every object the API answers is made of: the base model and the kinds of value it holds.

A response model is written in Python terms (snake_case fields, `Decimal` money, `datetime`
instants, `int` minor units) and answers in the API's: camelCase members, money as a decimal
string, instants as `x402mw.platform.timestamps.iso` writes them, minor units as a digit string.
Every field is answered, ``null`` included, except those declared `omitted_if_none`, which
are left out while ``None``. The OpenAPI document describes each model as it serialises
(`x402mw.platform.openapi.answers`).

>>> from decimal import Decimal
>>> class Example(ResponseModel):
...     amount_due: Money
...     paid_at: Timestamp | None
>>> Example(amount_due=money(2500000), paid_at=None).model_dump_json()
'{"amountDue":"2.5","paidAt":null}'
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, WithJsonSchema
from pydantic.alias_generators import to_camel

from x402mw.platform.timestamps import iso
from x402mw.protocol.prices import format_amount


class ResponseModel(BaseModel):
    """The base of every answer: camelCase members (``tx_hash`` answers ``txHash``), built with
    the Python names, every member answered (``null`` too) unless declared `omitted_if_none`."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        serialize_by_alias=True,
        validate_by_name=True,
        extra="forbid",
        # the document lists a member with a default as always present: it is
        json_schema_serialization_defaults_required=True,
    )


class Envelope(ResponseModel):
    """An answer that carries one object under its name, as ``{"paymentIntent": {...}}``: the
    document describes it inline in its operation rather than as an object of its own."""


T = TypeVar("T", bound=BaseModel)


class ListPage(ResponseModel, Generic[T]):
    """A page of a list, newest first: ``{"object": "list", "data": [...], "hasMore"}``. Each list
    is a subclass naming its item (``class RefundList(ListPage[Refund])``)."""

    object: Literal["list"] = "list"
    data: list[T]
    has_more: bool


def _is_none(value: object) -> bool:
    return value is None


def omitted_if_none(*, description: str | None = None, pattern: str | None = None) -> Any:
    """The field of a member that is left out of the answer while it is ``None``, as
    ``param: str | None = omitted_if_none()`` (documented as not required, and never ``null``)."""
    return Field(default=None, exclude_if=_is_none, description=description, pattern=pattern)


def _plain(value: Decimal) -> str:
    return format(value, "f")  # never an exponent: Decimal("1E+2") is "100"


def money(minor: int, decimals: int = 6, *, scale: int = 0) -> Decimal:
    """An amount of minor units as the exact `Decimal` the API answers, with at least ``scale``
    decimals and no other trailing zeros: ``money(12500000) == Decimal("12.5")``, answered ``"12.5"``;
    ``money(12500000, scale=2)`` is answered ``"12.50"``."""
    whole, _, fraction = format_amount(minor, decimals).partition(".")
    fraction = fraction.ljust(min(scale, decimals), "0")
    return Decimal(f"{whole}.{fraction}" if fraction else whole)


Money = Annotated[
    Decimal,
    PlainSerializer(_plain, return_type=str),
    WithJsonSchema({"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$", "description": "decimal amount"}),
]
"""Money in coins (see `money`), answered as a plain decimal string: ``"12.5"``."""

Minor = Annotated[
    int,
    PlainSerializer(str, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": "^[0-9]+$",
            "description": "integer amount in the coin's minor units (6 decimals)",
        }
    ),
]
"""An integer amount of minor units, answered as a digit string: ``"10000"``."""

Timestamp = Annotated[
    datetime,
    PlainSerializer(iso, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time", "description": "ISO 8601 UTC, milliseconds"}),
]
"""An instant (a naive one is UTC), answered as `iso` writes it: ``"2026-11-21T23:25:16.464Z"``."""

EvmAddress = Annotated[
    str,
    WithJsonSchema({"type": "string", "pattern": "^0x[0-9a-fA-F]{40}$", "description": "EVM address"}),
]
"""An EVM address, as stored (EIP-55 checksum case where the platform wrote it)."""

Uuid = Annotated[str, WithJsonSchema({"type": "string", "format": "uuid"})]
"""An id the platform made: a UUID."""

Url = Annotated[str, WithJsonSchema({"type": "string", "format": "uri"})]
"""An absolute URL."""

Currency = Literal["USDC", "USDT", "EURC"]
"""A coin of a payment order."""
