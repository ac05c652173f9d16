"""The dashboard on a phone (390 px, issue 36): the navigation is one row that scrolls sideways
instead of five lines, the payments list shows every column of a payment (one card per payment, no
column cut off), and the overview's chart labels stay legible as the chart shrinks."""

from __future__ import annotations

import re

from playwright.sync_api import Page

from tests.browser.conftest import Browsing, assert_accessible
from tests.dashboard_fixtures import PASSWORD, Team, make_team
from tests.harness import PlatformHarness

PHONE = {"width": 390, "height": 844}
COLUMNS = ["Payment", "Kind", "Status", "Amount", "Customer or payer", "Created (UTC)"]


def _sign_in(page: Page, team: Team) -> None:
    page.goto(team.origin + "/dashboard/sign-in")
    page.get_by_label("Email").fill(team.users["owner"].email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/dashboard/$"))


def _line_height(page: Page, selector: str) -> float:
    return float(page.evaluate(f"parseFloat(getComputedStyle(document.querySelector('{selector}')).lineHeight)"))


def test_overview_and_payments_on_a_phone(browsing: Browsing, dev_platform: PlatformHarness) -> None:
    team = make_team(dev_platform, "Phone shop")
    team.order(customerEmail="a-rather-long-customer-address@example.com")
    team.order()
    page = browsing.page
    page.set_viewport_size(PHONE)
    _sign_in(page, team)

    # the overview: the navigation is one row, the chart's day labels are at least 12 px tall
    assert_accessible(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    nav = page.locator("nav ul").bounding_box()
    assert nav is not None and nav["height"] < 2 * _line_height(page, "nav a") + 20, nav
    assert page.evaluate("document.querySelector('nav ul').scrollWidth") > PHONE["width"]  # it scrolls, inside
    labels = page.locator("svg.chart text")
    assert labels.count() >= 14
    heights = [box["height"] for box in (labels.nth(i).bounding_box() for i in range(labels.count())) if box]
    assert min(heights) >= 12, heights
    browsing.shoot("overview-390", page)

    # the payments list: each payment a card with all six fields inside the screen
    page.goto(team.origin + "/dashboard/payments")
    assert_accessible(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    first = page.locator("table.cards tbody tr").first
    for column in COLUMNS:
        cell = first.locator(f'td[data-label="{column}"]')
        box = cell.bounding_box()
        assert box is not None and box["width"] > 0 and box["x"] >= 0, (column, box)
        assert box["x"] + box["width"] <= PHONE["width"], (column, box)
        label = page.evaluate("(e) => getComputedStyle(e, '::before').content", cell.element_handle())
        assert label == f'"{column}"', label  # each field names itself, the header row being hidden
    assert "12.5 USDC" in first.inner_text() or "12.50 USDC" in first.inner_text()
    browsing.shoot("payments-390", page)

    # at 1280 px it is a table again, with its header row
    page.set_viewport_size({"width": 1280, "height": 900})
    assert page.locator("table.cards thead").is_visible()
    assert page.evaluate("getComputedStyle(document.querySelector('table.cards tr')).display") == "table-row"
