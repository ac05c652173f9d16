"""One injectable clock for everything time-based."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta


class Clock:
    """Wall-clock time in UTC. Subclass to move time in tests."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (`time.monotonic`): for intervals and deadlines."""
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.time(), UTC)


SystemClock = Clock


class ManualClock(Clock):
    """A clock that stands still until advanced: ``clock.advance(seconds=30)``.

    Its `monotonic` runs on with real time, plus what was advanced: a wait on it still ends (a
    deadline a few seconds away is not put off for ever by a clock that stands still), and
    ``advance`` brings the deadlines and intervals timed on it closer at once."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._ahead = 0.0

    def time(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return time.monotonic() + self._ahead

    def advance(self, seconds: float = 0, **delta: float) -> None:
        step = seconds + timedelta(**delta).total_seconds()
        self._now += step
        self._ahead += step
