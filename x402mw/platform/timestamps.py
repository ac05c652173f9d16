"""How the platform writes an instant: ISO 8601 in UTC with milliseconds, ``2026-11-21T23:25:16.464Z``.

Every timestamp the API answers, every event and every receipt is written by `iso`. A naive
datetime is UTC: SQLite keeps instants without their zone, and the tables' `UtcDateTime` columns
give them back through `aware`, so that a read compares with the clock's instants on every database.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


def aware(value: datetime) -> datetime:
    """``value`` with its zone: a naive datetime is UTC.

    >>> aware(datetime(2026, 11, 21, 23, 25)).tzinfo
    datetime.timezone.utc
    """
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


@overload
def iso(value: datetime) -> str: ...


@overload
def iso(value: None) -> None: ...


def iso(value: datetime | None) -> str | None:
    """ISO 8601 UTC with milliseconds: ``2026-11-21T23:25:16.464Z`` (None stays None).

    >>> iso(datetime(2026, 11, 21, 23, 25, 16, 464999))
    '2026-11-21T23:25:16.464Z'
    """
    if value is None:
        return None
    return aware(value).astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
