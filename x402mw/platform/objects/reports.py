"""The answer of ``GET /reports/{name}``: one row per period (and coin, endpoint, reason or payer),
members present as the report has them."""

from __future__ import annotations

from typing import Literal

from x402mw.platform.objects.base import Money, ResponseModel, Timestamp, omitted_if_none


class ReportRow(ResponseModel):
    """One row of a report. ``period`` is the first local day (``YYYY-MM-DD``) of the day, ISO week or
    month; amounts are decimal strings in the coin; ``endpoint`` is an agent endpoint's id (or, in
    revenue, a subscription plan's; "" for orders of their own)."""

    period: str | None = omitted_if_none(description="first local day of the period, YYYY-MM-DD")
    currency: str | None = omitted_if_none()
    endpoint: str | None = omitted_if_none(description="the agent endpoint's (or subscription plan's) id")
    reason: str | None = omitted_if_none(description="why the payments failed")
    payer: str | None = omitted_if_none(description="the paying wallet, lowercase")
    gross: Money | None = omitted_if_none(description="paid in the period")
    refunded: Money | None = omitted_if_none(description="refunds completed in the period")
    net: Money | None = omitted_if_none(description="gross less refunded")
    amount: Money | None = omitted_if_none()
    mrr: Money | None = omitted_if_none(description="the active subscriptions' prices per month, at the period's end")
    payments: int | None = omitted_if_none()
    refunds: int | None = omitted_if_none()
    issued: int | None = omitted_if_none()
    paid: int | None = omitted_if_none()
    count: int | None = omitted_if_none()
    new: int | None = omitted_if_none()
    churned: int | None = omitted_if_none()
    active: int | None = omitted_if_none()
    settled: int | None = omitted_if_none()
    p50_ms: int | None = omitted_if_none()
    p95_ms: int | None = omitted_if_none()


class Report(ResponseModel):
    """A report over ``start`` to ``end`` (exclusive) of the key's mode, cut into ``groupBy`` periods
    at the midnights of ``timeZone``."""

    object: Literal["report"] = "report"
    name: str
    livemode: bool
    start: Timestamp
    end: Timestamp
    group_by: Literal["day", "week", "month"]
    time_zone: str
    data: list[ReportRow]
