"""``GET /reports/{name}`` (figures read from the rollups, in the key's mode) and
``GET /exports/{kind}.csv`` (rows streamed as CSV in bounded memory)."""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from x402mw.platform.api.auth import authenticate
from x402mw.platform.http.errors import HttpError
from x402mw.platform.http.responses import ModelResponse
from x402mw.platform.http.routing import STRING, ApiRoute, Operation, enum, path, query
from x402mw.platform.http.state import platform_of
from x402mw.platform.objects.base import money
from x402mw.platform.objects.reports import Report, ReportRow
from x402mw.platform.services.reports import EXPORT_KINDS, GROUPS, REPORTS, ReportQuery, export_csv, run_report
from x402mw.platform.services.reports.queries import MAX_RANGE, Group

DEFAULT_RANGE = timedelta(days=30)
_REPORT_PARAMS = ("from", "to", "groupBy", "timeZone", "currency", "endpoint", "limit")
_MONEY = ("gross", "refunded", "net", "amount", "mrr")


def _refuse(param: str, message: str) -> HttpError:
    return HttpError(400, "parameter_invalid", message, param=param)


def _unknown(request: Request, known: tuple[str, ...]) -> None:
    for name in request.query_params:
        if name not in known:
            raise HttpError(400, "parameter_unknown", f"Received unknown parameter: {name[:80]}", param=name[:80])


def _instant(request: Request, name: str, tz: ZoneInfo) -> datetime | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            return datetime(day.year, day.month, day.day, tzinfo=tz)
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00")) if len(value) <= 40 else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise _refuse(name, f"{name} must be a date (YYYY-MM-DD, local midnight) or an ISO 8601 instant")
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=tz)


def _zone(request: Request) -> ZoneInfo:
    name = request.query_params.get("timeZone", "UTC")
    if name not in _zone_names():  # a name the database knows too: never a file path or "localtime"
        raise _refuse("timeZone", "timeZone must be an IANA time zone name, such as Europe/Paris")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise _refuse("timeZone", "timeZone must be an IANA time zone name, such as Europe/Paris") from None


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(name for name in available_timezones() if "/" in name or name == "UTC")


def _range(request: Request, tz: ZoneInfo, now: datetime) -> tuple[datetime, datetime]:
    end = _instant(request, "to", tz) or now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = _instant(request, "from", tz) or end - DEFAULT_RANGE
    if start >= end:
        raise _refuse("from", "from must be before to")
    if end - start > MAX_RANGE:
        raise _refuse("to", "a report covers at most three years")
    return start.astimezone(UTC), end.astimezone(UTC)


def _limit(request: Request) -> int:
    value = request.query_params.get("limit", "10")
    if not value.isdigit() or not 1 <= int(value) <= 100:
        raise _refuse("limit", "limit must be an integer from 1 to 100")
    return int(value)


def _row(values: dict[str, Any]) -> ReportRow:
    fields: dict[str, Any] = {}
    for key, value in values.items():
        if key == "currency" and not value:
            continue  # a report of a range where nothing was paid
        if key == "period":
            fields[key] = value.isoformat()
        elif key in _MONEY:
            fields[key] = money(int(value))
        elif key in ("p50Ms", "p95Ms"):
            fields[key.replace("Ms", "_ms")] = value
        else:
            fields[key] = value
    return ReportRow(**fields)


def report_query(request: Request, merchant_id: str, livemode: bool, now: datetime) -> ReportQuery:
    """The `ReportQuery` of a request's query string (the dashboard reads the same names)."""
    tz = _zone(request)
    start, end = _range(request, tz, now)
    group = request.query_params.get("groupBy", "day")
    if group not in GROUPS:
        raise _refuse("groupBy", "groupBy must be day, week or month")
    currency = request.query_params.get("currency") or None
    if currency is not None and (len(currency) > 8 or not currency.isalnum()):
        raise _refuse("currency", "currency must be a coin's symbol, such as USDC")
    endpoint = request.query_params.get("endpoint") or None
    if endpoint is not None and (len(endpoint) > 64 or not endpoint.replace("-", "").isalnum()):
        raise _refuse("endpoint", "endpoint must be an agent endpoint's or a subscription plan's id")
    chosen: Group = next(g for g in GROUPS if g == group)
    return ReportQuery(
        merchant_id,
        livemode,
        start,
        end,
        currency=currency,
        dimension=endpoint,
        group=chosen,
        tz=tz,
        limit=_limit(request),
    )


async def retrieve_report(request: Request) -> ModelResponse:
    caller = await authenticate(request)
    name = request.path_params["name"]
    if name not in REPORTS:
        raise HttpError.missing("report", name, param="name")
    _unknown(request, _REPORT_PARAMS)
    platform = platform_of(request)
    q = report_query(request, caller.merchant_id, caller.livemode, platform.clock.now())
    rows = await run_report(platform.engine, name, q)
    return ModelResponse(
        Report(
            name=name,
            livemode=caller.livemode,
            start=q.start,
            end=q.end,
            group_by=q.group,
            time_zone=q.tz.key,
            data=[_row(row) for row in rows],
        )
    )


async def export(request: Request) -> StreamingResponse:
    caller = await authenticate(request)
    kind = request.path_params["kind"]
    if kind not in EXPORT_KINDS:
        raise HttpError.missing("export", kind, param="kind")
    _unknown(request, ("from", "to", "timeZone"))
    platform = platform_of(request)
    tz = _zone(request)
    end = _instant(request, "to", tz) or platform.clock.now()
    start = _instant(request, "from", tz) or datetime(2000, 1, 1, tzinfo=UTC)
    if start >= end:
        raise _refuse("from", "from must be before to")
    body = export_csv(platform.engine, kind, caller.merchant_id, caller.livemode, start, end)
    filename = f"{kind}-{start.date().isoformat()}-{end.date().isoformat()}.csv"
    return StreamingResponse(
        body,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


_TAG = "Reports"
_FILTERS = [
    query(
        "from", "start: a date (local midnight in timeZone) or an ISO 8601 instant; default 30 days before to", STRING
    ),
    query("to", "end, exclusive: a date or an instant; default the end of the current hour", STRING),
    query("groupBy", "the periods: day (default), ISO week (from Monday) or month", enum(*GROUPS)),
    query("timeZone", "an IANA time zone whose midnights cut the periods (default UTC)", STRING),
    query("currency", "only this coin", STRING),
    query("endpoint", "only this agent endpoint (or subscription plan)", STRING),
    query(
        "limit", "top_payers: how many payers, 1 to 100 (default 10)", {"type": "integer", "minimum": 1, "maximum": 100}
    ),
]
routes = [
    ApiRoute(
        "GET",
        "/reports/{name}",
        retrieve_report,
        Operation(
            id="retrieveReport",
            tag=_TAG,
            summary="Retrieve a report",
            description="The figures of the key's mode, read from rollups kept up to date with every payment, "
            "refund, subscription and challenge: `revenue` (gross, refunded, net per period and coin), "
            "`conversion` (402 challenges issued and paid per endpoint, on the day each was issued), "
            "`failures` (per reason), `subscriptions` (new, churned, active and MRR), `top_payers` "
            "(over the whole range) and `settlement_latency` (p50 and p95 of agent settlements). "
            "Periods are cut at the midnights of `timeZone` (to the hour: rollups are hourly). "
            "An unknown name is 404 `resource_missing`.",
            answer=Report,
            parameters=[path("name", "the report", enum(*REPORTS)), *_FILTERS],
            errors=(400, 404),
        ),
    ),
]
export_routes = [Route("/exports/{kind}.csv", export, methods=["GET"], include_in_schema=False)]
"""The CSV exports (not JSON: outside the OpenAPI document, described in docs/reports.md)."""
