"""Billing periods: calendar arithmetic from a subscription's anchor, and when each renewal step falls due.

Period ``n`` (1-based) of a subscription anchored at ``anchor`` (its first payment's time) runs from
``boundary(anchor, interval, n - 1)`` to ``boundary(anchor, interval, n)``. Month-based intervals count
calendar months from the anchor, clamping to the last day of shorter months, and always from the
anchor (never from the previous, clamped end): a plan anchored on 31 January renews on 28 (or 29)
February, 31 March, 30 April, ...

>>> from datetime import datetime, UTC
>>> jan31 = datetime(2026, 1, 31, 9, 30, tzinfo=UTC)
>>> [boundary(jan31, "monthly", n).date().isoformat() for n in (1, 2, 3)]
['2026-02-28', '2026-03-31', '2026-04-30']
"""

from __future__ import annotations

import calendar
from datetime import datetime, timedelta

INTERVALS = ("weekly", "monthly", "quarterly", "yearly")
_MONTHS = {"monthly": 1, "quarterly": 3, "yearly": 12}
REMINDER_LEAD = timedelta(days=1)
"""How long before a period ends the reminder of its unpaid renewal invoice is sent."""


def add_months(moment: datetime, months: int) -> datetime:
    """``moment`` ``months`` calendar months later, on the same day of the month or, in a shorter
    month, on its last day; the time of day is kept."""
    total = moment.month - 1 + months
    year, month = moment.year + total // 12, total % 12 + 1
    return moment.replace(year=year, month=month, day=min(moment.day, calendar.monthrange(year, month)[1]))


def boundary(anchor: datetime, interval: str, periods: int) -> datetime:
    """The end of period ``periods`` (the start of the next one); ``boundary(anchor, _, 0)`` is the anchor."""
    if interval == "weekly":
        return anchor + timedelta(days=7 * periods)
    return add_months(anchor, _MONTHS[interval] * periods)


def renewal_lead(interval: str) -> timedelta:
    """How long before a period ends its renewal invoice (and payment order) opens: 7 days, 2 for weekly plans."""
    return timedelta(days=2 if interval == "weekly" else 7)


def grace_end(period_end: datetime | None, past_due_at: datetime, grace_days: int) -> datetime:
    """When a past-due subscription expires: ``grace_days`` after its paid period ended, or after it
    went past due if that was later (a reorg can reverse a payment before its period is over)."""
    start = past_due_at if period_end is None else max(period_end, past_due_at)
    return start + timedelta(days=grace_days)
