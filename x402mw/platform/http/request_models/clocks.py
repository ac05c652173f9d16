"""The bodies of ``/test-clocks``: a clock's frozen time, to make it and to advance it."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

FROZEN_TIME_PATTERN = (
    r"^2[01][0-9]{2}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r"(?:\.[0-9]{1,6})?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"
)
"""A test clock's time: an RFC 3339 timestamp with a timezone, in the years 2000-2199."""
_FROZEN_TIME = re.compile(FROZEN_TIME_PATTERN)


def _frozen_time(value: object) -> datetime:
    if not isinstance(value, str) or not _FROZEN_TIME.fullmatch(value):
        raise ValueError(
            "must be an RFC 3339 timestamp with a timezone in the years 2000-2199, e.g. 2026-01-31T12:00:00Z"
        )
    try:
        return datetime.fromisoformat(value.upper()).astimezone(UTC)
    except ValueError:  # a day the month does not have
        raise ValueError("must be a real date and time, e.g. 2026-01-31T12:00:00Z") from None


FrozenTime = Annotated[
    datetime,
    BeforeValidator(_frozen_time),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": FROZEN_TIME_PATTERN}),
]


class ClockCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    frozenTime: FrozenTime = Field(
        description="the clock's time: RFC 3339 timestamp with a timezone, in the years 2000–2199"
    )


class ClockAdvance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    frozenTime: FrozenTime = Field(
        description="the clock's new time, not before its current one: RFC 3339 timestamp with a timezone, in "
        "the years 2000–2199"
    )
