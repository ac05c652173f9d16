"""Column types of our own."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from x402mw.platform.timestamps import aware


class UtcDateTime(TypeDecorator[datetime]):
    """An instant, stored as ``TIMESTAMP WITH TIME ZONE`` (PostgreSQL) or text (SQLite), read back
    timezone-aware in UTC on both. SQLite keeps no zone and SQLAlchemy's SQLite type gives its
    instants back naive, which a comparison with an aware instant (the clock's) refuses with a
    ``TypeError``; an aware instant is written in UTC, as SQLite's text keeps no offset."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or dialect.name != "sqlite" or value.tzinfo is None:
            return value
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return aware(value) if isinstance(value, datetime) else value
