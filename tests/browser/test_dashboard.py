"""The dashboard in Chromium: every page at 1280 and 390 px (screenshots under
``build/screenshots/<test>/``, axe-core with no serious or critical violation, nothing loaded from
another host, no sideways scrolling on a phone), and every action a person takes: sign-in by
keyboard with and without two-factor, refund, cancel a subscription, create a plan and open its
link, rotate a webhook secret, redeliver an event, find an API request by its id."""

from __future__ import annotations

import re
import time
import uuid

from playwright.sync_api import Page

from tests.browser.conftest import Browsing, assert_accessible, origin_of
from tests.dashboard_fixtures import PASSWORD, Team, make_team
from tests.harness import PlatformHarness
from x402mw.platform.services import dashboard_users as accounts

WIDTHS = (1280, 390)


def _sign_in(page: Page, team: Team, role: str = "owner") -> None:
    """Sign in with the keyboard alone: type, Tab, type, Enter."""
    page.goto(team.origin + "/dashboard/sign-in")
    page.locator("#email").focus()
    page.keyboard.type(team.users[role].email)
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/dashboard/(sign-in/two-factor)?$"))


def _check(browsing: Browsing, page: Page, name: str) -> None:
    """At each width: a screenshot, axe-core, and no sideways scrolling."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        assert_accessible(page)
        overflow = page.evaluate("document.documentElement.scrollWidth")
        assert overflow <= width, (name, width, overflow)
        browsing.shoot(f"{name}-{width}", page)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_every_page_and_action(browsing: Browsing, dev_platform: PlatformHarness) -> None:
    team = make_team(dev_platform, "Corner <Shop>")
    paid = team.order(metadata={"note": "<img src=x onerror=alert(1)>"}, customerEmail="buyer@example.com")
    with team.api() as api:
        hook = api.post("/webhook-endpoints", json={"url": "https://hooks.example.com/x", "enabledEvents": ["*"]})
        assert hook.status_code == 201
        request_id = api.get("/balances").headers["request-id"]
    page = browsing.page
    page.goto(team.origin + "/dashboard/sign-in")
    _check(browsing, page, "sign-in")
    _sign_in(page, team)

    pages = {
        "overview": "/dashboard/",
        "payments": "/dashboard/payments",
        "payment": f"/dashboard/payments/{paid['id']}",
        "refunds": "/dashboard/refunds",
        "subscriptions": "/dashboard/subscriptions",
        "plans": "/dashboard/plans",
        "links": "/dashboard/links",
        "agents": "/dashboard/agents",
        "keys": "/dashboard/developers/keys",
        "webhooks": "/dashboard/developers/webhooks",
        "events": "/dashboard/developers/events",
        "requests": "/dashboard/developers/requests",
        "sandbox": "/dashboard/sandbox",
        "team": "/dashboard/team",
        "audit": "/dashboard/audit",
        "account": "/dashboard/account",
    }
    for name, path in pages.items():
        page.goto(team.origin + path)
        assert page.locator("h1").count() == 1
        _check(browsing, page, name)
    page.goto(team.origin + f"/dashboard/payments/{paid['id']}")
    assert page.locator("img").count() == 0  # the metadata is shown as text

    # refund, with its confirmation
    page.get_by_role("link", name="Refund this payment").click()
    _check(browsing, page, "refund-confirm")
    page.get_by_label("I want to refund this payment").check()
    page.get_by_role("button", name="Refund", exact=True).click()
    page.wait_for_url(re.compile(rf"/dashboard/payments/{paid['id']}\?notice="))
    assert "Refund" in page.locator(".notice").inner_text()

    # create a plan and open its link
    slug = f"club-{uuid.uuid4().hex[:6]}"
    page.goto(team.origin + "/dashboard/plans")
    page.get_by_label("Name", exact=True).fill("Coffee club")
    page.get_by_label("Amount (for example 9.99)").fill("9.99")
    page.get_by_label("Slug (optional: names the plan in its link)").fill(slug)
    page.get_by_role("button", name="Create plan").click()
    page.wait_for_url(re.compile(r"/dashboard/plans\?notice="))
    link = page.locator(f'a.plan-link[href$="/su_{slug}.{team.merchant_id}"]')  # slugs are per merchant
    href = link.get_attribute("href")
    assert href is not None
    page.goto(href)
    assert "Coffee club" in page.content()
    browsing.shoot("plan-subscribe-page")

    # cancel a subscription
    with team.api() as api:
        plan_id = next(p["id"] for p in api.get("/subscription-plans").json()["data"] if p["slug"] == slug)
        sub = api.post("/subscriptions", json={"planId": plan_id, "merchantCustomerId": "cust-7"}).json()
    page.goto(team.origin + f"/dashboard/subscriptions/{sub['subscription']['id']}")
    _check(browsing, page, "subscription")
    page.get_by_role("button", name="Cancel subscription").click()
    page.wait_for_url(re.compile(r"\?notice="))
    assert "canceled" in page.locator("dl").inner_text()

    # rotate a webhook secret
    page.goto(team.origin + "/dashboard/developers/webhooks")
    page.get_by_role("button", name=re.compile("Rotate secret")).first.click()
    secret = page.locator("#signing-secret").inner_text()
    assert secret.startswith("whsec_")
    _check(browsing, page, "webhook-rotated")

    # redeliver an event
    page.goto(team.origin + "/dashboard/developers/events")
    page.get_by_role("link", name="payment_intent.succeeded").first.click()
    _check(browsing, page, "event")
    page.get_by_role("button", name="Redeliver").click()
    assert "Queued to 1 endpoint" in page.locator(".notice").inner_text()

    # find an API request by its id
    page.goto(team.origin + "/dashboard/developers/requests")
    page.get_by_label("Request id").fill(request_id)
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"request_id="))
    rows = page.locator("tbody tr")
    assert rows.count() == 1 and request_id in rows.inner_text() and "/v1/balances" in rows.inner_text()
    _check(browsing, page, "request-found")

    assert browsing.origins() == {origin_of(team.origin)}, browsing.origins()


def test_two_factor_sign_in(browsing: Browsing, dev_platform: PlatformHarness) -> None:
    team = make_team(dev_platform)
    page = browsing.page
    _sign_in(page, team)
    page.goto(team.origin + "/dashboard/account")
    page.get_by_role("button", name="Set up two-factor sign-in").click()
    secret = page.locator("#totp-secret").inner_text()
    _check(browsing, page, "two-factor-setup")
    step = int(time.time() // 30)
    page.get_by_label("Code").fill(accounts.totp_code(secret, step))
    page.get_by_role("button", name="Turn on").click()
    page.locator("#recovery-codes").wait_for()  # shown once, on the answer to turning it on
    assert len(page.locator("#recovery-codes li").all()) == 10
    _check(browsing, page, "two-factor-recovery-codes")
    page.get_by_role("button", name="Switch to live").click()
    assert "Live mode" in page.locator(".mode-badge").inner_text()
    page.get_by_role("button", name="Sign out").click()

    _sign_in(page, team)
    assert page.url.endswith("/dashboard/sign-in/two-factor")
    _check(browsing, page, "two-factor")
    page.get_by_label("The 6-digit code from your authenticator app").fill(accounts.totp_code(secret, step + 1))
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/dashboard/$"))
    assert page.locator("h1").inner_text() == "Overview"


def test_refusals_read_clearly(browsing: Browsing, dev_platform: PlatformHarness) -> None:
    team = make_team(dev_platform)
    page = browsing.page
    _sign_in(page, team, "viewer")
    page.goto(team.origin + f"/dashboard/payments/{uuid.uuid4()}")
    assert page.locator("h1").inner_text() == "Not found"
    _check(browsing, page, "not-found")
    page.goto(team.origin + "/dashboard/sign-in")
    page.get_by_label("Email").fill("nobody@shop.test")
    page.get_by_label("Password").fill("wrong password!")
    page.get_by_role("button", name="Sign in").click()
    assert "do not match" in page.locator(".error").inner_text()
    _check(browsing, page, "sign-in-refused")
