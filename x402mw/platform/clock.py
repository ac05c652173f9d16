"""One injectable clock for everything time-based."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta


class Clock:
    """Wall-clock time in UTC. Subclass to move time in tests."""

    def time(self) -> float:
        return time.time()

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.time(), UTC)


SystemClock = Clock


class ManualClock(Clock):
    """A clock that stands still until advanced: ``clock.advance(seconds=30)``."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float = 0, **delta: float) -> None:
        self._now += seconds + timedelta(**delta).total_seconds()
