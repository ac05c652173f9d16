"""``GET /v1/reports/{name}`` and ``GET /v1/exports/{kind}.csv`` over HTTP on a running platform: an
order paid on the chain by the sandbox and refunded shows in the revenue report and the exports,
in the key's mode only; bad filters get the documented errors."""

from __future__ import annotations

import csv
import io
import uuid
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.harness import PlatformHarness
from tests.waiting import eventually
from x402mw.client.merchant import MerchantClient, NotFoundError, Report


def _api(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _error(reply: httpx.Response, status: int, code: str, param: str | None = None) -> None:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert (error["code"], error.get("param")) == (code, param), error
    assert error["requestId"] == reply.headers["request-id"]


def _paid_order(api: httpx.Client, amount: str) -> dict[str, Any]:
    reply = api.post("/payment-intents", json={"orderId": f"o-{uuid.uuid4()}", "amount": amount, "currency": "USDC"})
    assert reply.status_code == 201, reply.text
    order: dict[str, Any] = reply.json()["paymentIntent"]
    paid = api.post(f"/sandbox/payment-intents/pi_{order['id']}/simulate-payment", json={"scenario": "exact"})
    assert paid.status_code == 200, paid.text
    return order


def _revenue(api: httpx.Client, **params: str) -> list[dict[str, Any]]:
    reply = api.get("/reports/revenue", params=params)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["object"] == "report" and body["name"] == "revenue" and body["livemode"] is False
    rows: list[dict[str, Any]] = body["data"]
    return rows


def test_a_paid_and_refunded_order_is_reported_and_exported(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        first = _paid_order(api, "12.5")
        _paid_order(api, "0.000001")

        def paid() -> list[dict[str, Any]]:
            rows = [r for r in _revenue(api, groupBy="month") if r["currency"] == "USDC"]
            assert sum(int(r["payments"]) for r in rows) == 2
            return rows

        rows = eventually(paid, what="the payments in the revenue report")
        assert [r["gross"] for r in rows if r["payments"]] == ["12.500001"]
        assert all(r["net"] == r["gross"] for r in rows)

        refund = api.post(f"/payment-intents/{first['id']}/refunds", json={})
        assert refund.status_code == 201, refund.text

        def refunded() -> bool:
            rows = [r for r in _revenue(api) if r["refunds"]]
            assert [(r["refunded"], r["net"]) for r in rows] == [("12.5", "0.000001")]
            return True

        eventually(refunded, what="the refund in the revenue report")
        top = api.get("/reports/top_payers", params={"limit": "1"}).json()["data"]
        assert [(t["amount"], t["payments"]) for t in top] == [("12.5", 1)]  # the sandbox pays from a wallet per order

        export = api.get("/exports/payments.csv")
        assert export.status_code == 200, export.text
        assert export.headers["content-type"].startswith("text/csv")
        lines = list(csv.DictReader(io.StringIO(export.text)))
        assert sorted(line["amount_received"] for line in lines) == ["0.000001", "12.5"]
        assert sorted(line["amount_received_base_units"] for line in lines) == ["1", "12500000"]
        refunds = list(csv.DictReader(io.StringIO(api.get("/exports/refunds.csv").text)))
        assert [(r["payment_intent_id"], r["amount"]) for r in refunds] == [(first["id"], "12.5")]


def test_another_mode_and_merchant_see_nothing(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    _, other, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        _paid_order(api, "3")
    with _api(dev_platform, other) as api:
        assert all(r["gross"] == "0" for r in _revenue(api))
        assert api.get("/exports/payments.csv").text.count("\n") == 1  # the header alone


def test_bad_filters_get_the_documented_errors(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        _error(api.get("/reports/nope"), 404, "resource_missing", "name")
        _error(api.get("/reports/revenue", params={"groupBy": "year"}), 400, "parameter_invalid", "groupBy")
        _error(api.get("/reports/revenue", params={"timeZone": "Mars/Base"}), 400, "parameter_invalid", "timeZone")
        _error(api.get("/reports/revenue", params={"timeZone": "../etc"}), 400, "parameter_invalid", "timeZone")
        _error(api.get("/reports/revenue", params={"from": "yesterday"}), 400, "parameter_invalid", "from")
        bad_range = {"from": "2026-03-02", "to": "2026-03-01"}
        _error(api.get("/reports/revenue", params=bad_range), 400, "parameter_invalid", "from")
        _error(
            api.get("/reports/revenue", params={"from": "2020-01-01", "to": "2026-01-01"}),
            400,
            "parameter_invalid",
            "to",
        )
        _error(api.get("/reports/top_payers", params={"limit": "0"}), 400, "parameter_invalid", "limit")
        _error(api.get("/reports/revenue", params={"colour": "red"}), 400, "parameter_unknown", "colour")
        _error(api.get("/exports/secrets.csv"), 404, "resource_missing", "kind")
        _error(api.get("/exports/payments.csv", params={"from": "x"}), 400, "parameter_invalid", "from")
    with httpx.Client(base_url=dev_platform.url, timeout=60) as anonymous:
        assert anonymous.get("/reports/revenue").status_code == 401
        assert anonymous.get("/exports/payments.csv").status_code == 401


def test_periods_follow_the_time_zone_and_grouping(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        params = {"from": "2026-03-01", "to": "2026-04-01", "timeZone": "Asia/Tokyo"}
        days = _revenue(api, **params)
        assert [r["period"] for r in days][:2] == ["2026-03-01", "2026-03-02"] and len(days) == 31
        weeks = _revenue(api, groupBy="week", **params)
        assert weeks[0]["period"] == "2026-02-23"  # the Monday of the week holding 1 March
        reply = api.get("/reports/revenue", params=params).json()
        assert reply["start"] == "2026-02-28T15:00:00.000Z" and reply["timeZone"] == "Asia/Tokyo"


def test_the_merchant_client_reads_reports(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with _api(dev_platform, key) as api:
        _paid_order(api, "7.25")
    with MerchantClient(key, dev_platform.url) as client:

        def paid() -> Report:
            report = client.reports.retrieve("revenue", group_by="month", time_zone="Europe/Paris")
            assert sum(row.gross or 0 for row in report.data) == Decimal("7.25")
            return report

        report = eventually(paid, what="the payment in the revenue report")
        assert report.time_zone == "Europe/Paris" and report.group_by == "month"
        top = client.reports.retrieve("top_payers", limit=5)
        assert [row.amount for row in top.data] == [Decimal("7.25")]
        with pytest.raises(NotFoundError):
            client.reports.retrieve("nope")  # type: ignore[arg-type]
