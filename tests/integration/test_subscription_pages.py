"""What a subscriber sees: reminder emails received by a real SMTP server (aiosmtpd) with working
payment and customer page links, and the hosted subscribe and customer pages, driven in real Chromium
(with the payment made by a real transfer on the dev chain)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from decimal import Decimal
from email.message import EmailMessage
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.browser.conftest import assert_accessible
from tests.subscription_fixtures import Shop, SubscriptionPlatform, subscription_platform, wait_for

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
START = "2026-01-31T10:00:00Z"
LINK = re.compile(r"https?://[^\s\"<>]+")


@pytest.fixture(scope="module")
def subs(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SubscriptionPlatform]:
    with subscription_platform(tmp_path_factory.mktemp(f"subscription-pages-{database}"), database) as platform:
        yield platform


@pytest.fixture
def shop(subs: SubscriptionPlatform) -> Shop:
    return subs.shop("Acme Streaming")


def _email(subs: SubscriptionPlatform, to: str, subject: str) -> EmailMessage:
    assert subs.mailbox is not None
    mailbox = subs.mailbox
    return wait_for(lambda: next(iter(mailbox.find(to, subject)), None), f"the email {subject!r} to {to}")


def _links(message: EmailMessage) -> tuple[list[str], list[str]]:
    text = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert text is not None and html is not None, "a plain text part and an HTML part"
    return LINK.findall(text.get_content()), LINK.findall(html.get_content())


def test_reminder_emails_carry_working_payment_and_customer_page_links(subs: SubscriptionPlatform, shop: Shop) -> None:
    to = f"ada-{uuid.uuid4().hex[:8]}@example.com"
    clock = shop.clock(START)
    opened = shop.open(shop.plan(name="Pro"), "cus_mail", testClock=clock, customerEmail=to)
    sub_id = opened["subscription"]["id"]
    shop.pay(opened["paymentIntent"]["id"])
    shop.event("created", sub_id)
    assert subs.mailbox is not None and subs.mailbox.find(to, "") == []  # the first invoice sends no email

    shop.advance(clock, "2026-02-21T10:00:00Z")
    renewal = shop.invoices(sub_id)[0]
    opened_mail = _email(subs, to, "renewal: 9.99 USDC to pay")
    shop.advance(clock, "2026-02-27T10:00:00Z")
    reminder = _email(subs, to, "ends tomorrow unless renewed")
    shop.advance(clock, "2026-02-28T10:00:00Z")
    past_due = _email(subs, to, "is past due")
    assert "Acme Streaming: Pro" in str(past_due["Subject"]) and str(past_due["From"]).endswith("<billing@localhost>")

    page_links = set()
    for message in (opened_mail, reminder, past_due):
        text_links, html_links = _links(message)
        for links in (text_links, html_links):
            assert renewal["checkoutUrl"] in links, links
            pages = [link for link in links if "/checkout/subscriptions/" in link]
            assert len(pages) == 1, links
            page_links.add(pages[0])
    [page_link] = page_links  # the same link in every email
    text = past_due.get_body(("plain",))
    assert text is not None and "7 March 2026" in text.get_content()  # the end of the grace period

    with httpx.Client(timeout=60) as browser:
        checkout = browser.get(renewal["checkoutUrl"])
        assert checkout.status_code == 200 and "9.99" in checkout.text
        page = browser.get(page_link)
        assert page.status_code == 200, page.text
        assert "Past due" in page.text and renewal["checkoutUrl"] in page.text
        assert page.headers["referrer-policy"] == "no-referrer"
        token = page_link.rsplit("/", 1)[1]
        for wrong in (token[:20] + ("A" if token[20] != "A" else "B") + token[21:], sub_id, token[:20]):
            assert browser.get(page_link.replace(token, wrong)).status_code == 404
    shop.pay(renewal["paymentId"])
    assert shop.event("renewed", sub_id).data["subscription"]["status"] == "active"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM}: `make test` installs it (apt-get install -y chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    context.set_default_timeout(30_000)
    yield context.new_page()
    context.close()


@pytest.mark.browser
def test_a_buyer_subscribes_pays_and_cancels_at_period_end_in_the_browser(shop: Shop, page: Page) -> None:
    slug = f"pro-{uuid.uuid4().hex[:8]}"
    plan = shop.plan(name="Pro Monthly", amount="4.5", slug=slug)
    origin = shop.harness.url.removesuffix("/v1")
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    response = page.goto(plan["checkoutUrl"] + "?customer=cus_browser")
    assert response is not None and response.status == 200
    expect(page.locator("h1")).to_have_text("Pro Monthly")
    expect(page.locator("#plan-price")).to_have_text("4.50")
    expect(page.locator(".per")).to_have_text("a month")
    expect(page.locator(".merchant")).to_have_text("Acme Streaming")
    assert_accessible(page)  # axe-core: no serious or critical violation
    # keyboard: the email field, then the button
    page.keyboard.press("Tab")
    expect(page.get_by_label("Email")).to_be_focused()
    page.keyboard.type("not an email")
    page.keyboard.press("Tab")
    expect(page.locator("#subscribe-button")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#email-problem")).to_contain_text("Enter an email address")
    expect(page.get_by_label("Email")).to_have_attribute("aria-invalid", "true")
    page.get_by_label("Email").fill("buyer@example.com")
    page.locator("#subscribe-button").click()
    page.wait_for_url(re.compile(r".*/checkout/pi_[0-9a-f-]{36}$"))
    expect(page.locator("h1")).to_have_text("4.50 USDC")

    [sub] = shop.ok(shop.api.get("/subscriptions", params={"customerId": "cus_browser"}))["data"]
    assert (sub["status"], sub["customerEmail"], sub["planId"]) == ("incomplete", "buyer@example.com", plan["id"])
    deposit = page.locator("#deposit-address").inner_text()
    tx = shop.transfer(deposit, Decimal("4.5"))
    expect(page.locator("#status")).to_have_text("Paid", timeout=45_000)
    created = shop.event("created", sub["id"])
    assert created.data["subscription"]["merchantCustomerId"] == "cus_browser"

    page.locator("#success-link").click()  # the paid checkout leads to the customer page
    page.wait_for_url(re.compile(r".*/checkout/subscriptions/[A-Za-z0-9_-]{43}$"))
    expect(page.locator("#status")).to_have_text("Active")
    assert_accessible(page)
    expect(page.locator("#invoices")).to_contain_text("4.50 USDC")
    expect(page.locator("#invoices .tx")).to_have_text(tx)
    page.locator("#cancel-button").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#notice")).to_have_text("Your subscription will end when the paid period ends.")
    expect(page.locator("#ends")).to_contain_text("will not renew")
    expect(page.locator("#cancel-button")).to_have_count(0)
    after = shop.subscription(sub["id"])
    assert (after["status"], after["cancelAtPeriodEnd"]) == ("active", True)
    # opening the link again leads to the same subscription's current invoice
    page.goto(plan["checkoutUrl"] + "?customer=cus_browser")
    page.get_by_label("Email").fill("buyer@example.com")
    page.locator("#subscribe-button").click()
    page.wait_for_url(re.compile(r".*/checkout/pi_[0-9a-f-]{36}$"))
    expect(page.locator("#status")).to_have_text("Paid")
    assert all(url.startswith(origin + "/checkout/") for url in requested), "nothing loaded from elsewhere"


def test_the_forms_refuse_cross_site_and_stale_posts(shop: Shop) -> None:
    plan = shop.plan()
    with httpx.Client(timeout=60) as browser:
        form = browser.get(plan["checkoutUrl"])
        token = re.search(r'name="token" value="([^"]+)"', form.text)
        assert token is not None
        good = {"token": token.group(1), "email": "eve@example.com", "customer": ""}
        foreign = browser.post(plan["checkoutUrl"], data=good, headers={"Origin": "https://evil.example"})
        assert foreign.status_code == 400
        stale = browser.post(plan["checkoutUrl"], data=good | {"token": "1000000000.x"})
        assert stale.status_code == 400
        other = shop.plan()
        wrong_plan = browser.post(other["checkoutUrl"], data=good)
        assert wrong_plan.status_code == 400
        assert shop.ok(shop.api.get("/subscriptions"))["data"] == []
        made = browser.post(plan["checkoutUrl"], data=good)
        assert made.status_code == 303
        [sub] = shop.ok(shop.api.get("/subscriptions"))["data"]
        assert sub["merchantCustomerId"] == "eve@example.com"  # no ?customer=: the email is the id
        shop.ok(shop.api.patch(f"/subscription-plans/{other['id']}", json={"active": False}))
        assert browser.get(other["checkoutUrl"]).status_code == 409
        assert browser.get(plan["checkoutUrl"].replace("su_", "su_x")).status_code == 404
        base = plan["checkoutUrl"].rsplit("/", 1)[0]
        for ref in ("x" * 40, "Pro", "-pro", "%C3%A9", plan["id"].upper() + "0", "a%2Fb"):
            assert browser.get(f"{base}/su_{ref}").status_code == 404, ref
        fresh = browser.get(plan["checkoutUrl"])
        form_token = re.search(r'name="token" value="([^"]+)"', fresh.text)
        assert form_token is not None
        nul = browser.post(plan["checkoutUrl"], data=good | {"token": form_token.group(1), "customer": "a\x00b"})
        assert nul.status_code == 400
