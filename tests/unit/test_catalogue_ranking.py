"""The discovery catalogue's popularity: settlements counted with a weight that halves every week,
stored so that rows compare without being updated (`x402mw.platform.services.catalogue.popularity`)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from x402mw.platform.services.catalogue import popularity

NOW = datetime(2026, 11, 26, 5, 0, tzinfo=UTC)
WEEK = timedelta(days=7)


def test_counts_add_up_and_fade_by_half_a_week() -> None:
    once = popularity(None, 1, NOW)
    assert math.isclose(popularity(once, 1, NOW), popularity(None, 2, NOW))
    assert math.isclose(popularity(popularity(None, 4, NOW - WEEK), 0, NOW), popularity(None, 2, NOW))
    # thrice two weeks ago (0.75 now) ranks below once today, thrice yesterday above it
    assert popularity(None, 3, NOW - 2 * WEEK) < once < popularity(None, 3, NOW - timedelta(days=1))
    # a row not settled for since keeps its value: rows compare as the counts stand now
    assert popularity(None, 8, NOW - 3 * WEEK) < popularity(None, 2, NOW - timedelta(days=1))


def test_a_clock_that_goes_back_does_not_overflow() -> None:
    later = popularity(None, 1_000_000, NOW + 5000 * WEEK)
    assert math.isfinite(popularity(later, 1, NOW))
