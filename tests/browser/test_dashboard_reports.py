"""The reports page in Chromium at 1280 and 390 px: axe-core finds no serious or critical
violation, nothing comes from another host, no sideways scrolling; its charts are SVG drawn without
a script, each with its numbers in a table; the period picker changes the figures; a CSV export of
the period downloads."""

from __future__ import annotations

import csv
import io

from playwright.sync_api import Page

from tests.browser.conftest import Browsing, origin_of
from tests.browser.test_dashboard import _check, _sign_in
from tests.dashboard_fixtures import make_team
from tests.harness import PlatformHarness
from tests.waiting import eventually


def _gross(page: Page) -> str:
    row = page.locator("table", has=page.locator("caption", has_text="USDC: this period")).locator(
        "tr", has_text="Gross"
    )
    return row.locator("td").first.inner_text()


def test_the_reports_page_and_its_period_picker(browsing: Browsing, dev_platform: PlatformHarness) -> None:
    team = make_team(dev_platform, "Reports shop")
    team.order()
    team.order(amount="0.5")
    page = browsing.page
    _sign_in(page, team)

    def shown() -> str:
        page.goto(team.origin + "/dashboard/reports?period=day")
        return _gross(page)

    assert eventually(shown, what="today's payments on the reports page", until=lambda g: g == "13") == "13"
    assert page.locator("h1").inner_text() == "Reports"
    assert page.locator("svg.chart").count() >= 1 and page.locator("svg.chart title").count() >= 1
    assert page.locator("script").count() == 0 or all(
        origin_of(src) in ("", team.origin)
        for src in page.locator("script[src]").evaluate_all("s => s.map(e => e.src)")
    )
    _check(browsing, page, "reports")

    # the picker, by keyboard and mouse: a custom period long before the payments shows none
    page.get_by_label("Custom", exact=True).check()
    page.get_by_label("From", exact=True).fill("2020-01-01")
    page.get_by_label("To", exact=True).fill("2020-01-31")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**period=custom**")
    assert "2020-01-01 to 2020-01-31" in page.locator("#period-shown").inner_text()
    assert page.get_by_text("Nothing paid in this period or the previous one.").count() == 1
    _check(browsing, page, "reports-custom")

    page.get_by_label("Last 7 days").check()
    page.get_by_role("button", name="Show").click()
    assert _gross(page) == "13"

    page.get_by_label("Custom", exact=True).check()
    page.get_by_label("From", exact=True).fill("2020-02-01")
    page.get_by_label("To", exact=True).fill("2020-01-01")
    page.get_by_role("button", name="Show").click()
    assert "end date comes before" in page.get_by_role("alert").inner_text()

    page.goto(team.origin + "/dashboard/reports?period=week")
    link = page.get_by_role("link", name="payments", exact=True)
    reply = page.request.get(team.origin + str(link.get_attribute("href")))
    assert reply.status == 200 and reply.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(reply.text())))
    assert sorted((row["amount"], row["amount_base_units"]) for row in rows) == [
        ("0.5", "500000"),
        ("12.5", "12500000"),
    ]
    assert browsing.origins() <= {team.origin}
