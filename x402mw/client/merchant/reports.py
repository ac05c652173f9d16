"""``/reports/{name}``: the merchant's figures (revenue, conversion, failures, subscriptions, top
payers, settlement latency), per day, week or month of a time zone.

>>> report = client.reports.retrieve("revenue", start="2026-03-01", end="2026-04-01", group_by="week")
>>> [(row.period, row.currency, row.net) for row in report.data]
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

from x402mw.client.merchant.calls import Call
from x402mw.client.merchant.resource import APIObject, Mode, Resource, operation

ReportName = Literal["revenue", "conversion", "failures", "subscriptions", "top_payers", "settlement_latency"]


class ReportRow(APIObject):
    """One row: the members its report has, the others None. Money is ``Decimal`` in the coin."""

    period: date | None = None
    currency: str | None = None
    endpoint: str | None = None
    reason: str | None = None
    payer: str | None = None
    gross: Decimal | None = None
    refunded: Decimal | None = None
    net: Decimal | None = None
    amount: Decimal | None = None
    mrr: Decimal | None = None
    payments: int | None = None
    refunds: int | None = None
    issued: int | None = None
    paid: int | None = None
    count: int | None = None
    new: int | None = None
    churned: int | None = None
    active: int | None = None
    settled: int | None = None
    p50_ms: int | None = None
    p95_ms: int | None = None


class Report(APIObject):
    """A report over ``start`` to ``end`` (exclusive), cut into ``group_by`` periods of ``time_zone``."""

    object: str = "report"
    name: str
    livemode: bool
    start: datetime
    end: datetime
    group_by: str
    time_zone: str
    data: list[ReportRow]


def _text(value: date | datetime | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return value.isoformat()


def _report(answer: Any) -> Report:
    return Report.model_validate(answer)


class Reports(Resource[Mode]):
    """``client.reports``: the figures of the key's mode, read from rollups on the platform."""

    @operation
    def retrieve(
        self,
        name: ReportName,
        *,
        start: date | datetime | str | None = None,
        end: date | datetime | str | None = None,
        group_by: Literal["day", "week", "month"] | None = None,
        time_zone: str | None = None,
        currency: str | None = None,
        endpoint: str | None = None,
        limit: int | None = None,
    ) -> Call[Report]:
        """The report ``name`` from ``start`` to ``end`` (a date is the time zone's midnight; an
        aware ``datetime`` an instant), by ``group_by`` in ``time_zone`` (an IANA name)."""
        params = {
            "from": _text(start),
            "to": _text(end),
            "groupBy": group_by,
            "timeZone": time_zone,
            "currency": currency,
            "endpoint": endpoint,
            "limit": None if limit is None else str(limit),
        }
        return Call("GET", f"/reports/{name}", _report, params={k: v for k, v in params.items() if v is not None})
