"""Plain values read from query strings and forms, which no pydantic model sees first: whole
numbers, calendar days and months, moments, and text that can be stored.

Python's own readers take more than these values mean: ``int`` reads any script's decimal digits
(``int("١٢")`` is 12) and has no bound, ``str.isdigit`` is true of digits ``int`` cannot read
(``"²"``), a day late in year 9999 has no next day to stop a range at, and no stored text can hold
a NUL (PostgreSQL refuses it) or a lone surrogate (UTF-8 cannot). Each reader here answers None
for what it does not take; the surface answers its own refusal (the API's 400, a form's error).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

MAX_DIGITS = 18
"""The most digits a whole number may have: any 18 digits fit a BIGINT column (below 2**63)."""

_DIGITS = re.compile(r"[0-9]{1,18}")
_YEAR = r"(?:0{3}[1-9]|0{2}[1-9][0-9]|0[1-9][0-9]{2}|[1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])"
MONTH_PATTERN = rf"^{_YEAR}-(?:0[1-9]|1[0-2])$"
"""A month, ``YYYY-MM``, of the years 0001 to 9998 (each has a next month to end a range at)."""
DAY_PATTERN = rf"^{_YEAR}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])$"
"""A day, ``YYYY-MM-DD``, of the years 0001 to 9998 (one the calendar has: not 2026-02-30)."""
_MONTH = re.compile(MONTH_PATTERN)
_DAY = re.compile(DAY_PATTERN)


def whole_number(text: str, *, high: int = 10**MAX_DIGITS - 1) -> int | None:
    """``text`` as a whole number from 0 to ``high``: ASCII digits only, at most `MAX_DIGITS`."""
    if not _DIGITS.fullmatch(text):
        return None
    number = int(text)
    return number if number <= high else None


def calendar_month(text: str) -> datetime | None:
    """The first moment (UTC) of the month ``text`` names, as `MONTH_PATTERN` spells it."""
    if not _MONTH.fullmatch(text):
        return None
    return datetime(int(text[:4]), int(text[5:]), 1, tzinfo=UTC)


def calendar_day(text: str) -> datetime | None:
    """The first moment (UTC) of the day ``text`` names, as `DAY_PATTERN` spells it."""
    if not _DAY.fullmatch(text):
        return None
    try:
        return datetime(int(text[:4]), int(text[5:7]), int(text[8:]), tzinfo=UTC)
    except ValueError:  # a day its month does not have
        return None


def moment(text: str) -> datetime | None:
    """An ISO 8601 time with its UTC offset (as `datetime.isoformat` writes it), in ASCII, of the
    years 0001 to 9998 once in UTC."""
    if not text.isascii() or len(text) > 40:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    if value.tzinfo is None or not 1 < value.year < 9999:  # its UTC form has a year too
        return None
    return value.astimezone(UTC)


def unstorable(text: str) -> str | None:
    """Why no stored text can hold ``text`` (a NUL character, an unpaired surrogate), or None."""
    if "\x00" in text:
        return "a NUL character"
    try:
        text.encode()
    except UnicodeEncodeError:
        return "an unpaired surrogate (\\ud800-\\udfff), which is not text"
    return None


def unstorable_field(fields: Iterable[tuple[str, object]]) -> tuple[str, str] | None:
    """The first of a form's fields (name, value) whose name or text no stored text can hold, as
    (its name, spelled so that it can be stored; why); None when all can be stored (uploaded files
    are not looked at)."""
    for name, value in fields:
        what = unstorable(name) or (unstorable(value) if isinstance(value, str) else None)
        if what is not None:
            return name.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode()[:200], what
    return None
