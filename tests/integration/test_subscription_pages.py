"""What a subscriber sees: reminder emails received by a real SMTP server (aiosmtpd) with working
payment and customer page links, and the hosted subscribe and customer pages, driven in real Chromium
(with the payment made by a real transfer on the dev chain)."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.browser.conftest import SCREENSHOTS, assert_accessible
from tests.subscription_fixtures import Shop, SubscriptionPlatform, subscription_platform
from tests.waiting import eventually
from x402mw.client.merchant import signed_subscribe_url
from x402mw.platform.db.engine import create_engine_for
from x402mw.platform.services.merchants import create_api_key, revoke_api_key
from x402mw.platform.services.subscriptions.customer_links import spend_form_token

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
    return eventually(lambda: mailbox.find(to, subject), what=f"the email {subject!r} to {to}")[0]


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
def test_a_buyer_subscribes_pays_and_cancels_at_period_end_in_the_browser(
    subs: SubscriptionPlatform, shop: Shop, page: Page
) -> None:
    buyer = f"buyer-{uuid.uuid4().hex[:8]}@example.com"
    slug = f"pro-{uuid.uuid4().hex[:8]}"
    plan = shop.plan(name="Pro Monthly", amount="4.5", slug=slug, returnUrl="https://shop.example/account")
    assert plan["returnUrl"] == "https://shop.example/account"
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
    page.get_by_label("Email").fill(buyer)
    page.locator("#subscribe-button").click()
    page.wait_for_url(re.compile(r".*/checkout/pi_[0-9a-f-]{36}$"))
    expect(page.locator("h1")).to_have_text("4.50 USDC")

    [sub] = shop.ok(shop.api.get("/subscriptions", params={"customerId": "cus_browser"}))["data"]
    assert (sub["status"], sub["customerEmail"], sub["planId"]) == ("incomplete", buyer, plan["id"])
    deposit = page.locator("#deposit-address").inner_text()
    tx = shop.transfer(deposit, Decimal("4.5"))
    expect(page.locator("#status")).to_have_text("Paid", timeout=45_000)
    created = shop.event("created", sub["id"])
    assert created.data["subscription"]["merchantCustomerId"] == "cus_browser"

    # The paid page leads back to the shop (the plan's returnUrl), never to the customer page.
    expect(page.locator("#success-link")).to_have_attribute("href", "https://shop.example/account")
    text_links, html_links = _links(_email(subs, buyer, "your subscription"))  # it comes by email
    [page_link] = {link for link in text_links + html_links if "/checkout/subscriptions/" in link}
    page.goto(page_link)
    expect(page.locator("#status")).to_have_text("Active")
    assert_accessible(page)
    expect(page.locator("#invoices")).to_contain_text("4.50 USDC")
    expect(page.locator("#invoices .tx")).to_have_attribute("title", tx)
    expect(page.locator("#invoices .tx")).to_have_text(f"{tx[:6]}…{tx[-4:]}")
    expect(page.locator("#back-link")).to_have_attribute("href", "https://shop.example/account")
    expect(page.locator("#back-link")).to_have_text("Back to Acme Streaming")
    shots = SCREENSHOTS / "customer-page"
    shots.mkdir(parents=True, exist_ok=True)
    for width, height in ((1280, 800), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        # a period's dates keep to one line each: the row is no taller than two lines of text
        row = page.locator("#invoices tbody tr").first.locator("td").first.bounding_box()
        assert row is not None and row["height"] < 60, row
        assert_accessible(page)
        page.screenshot(path=str(shots / f"customer-page-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.locator("#cancel-button").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#notice")).to_have_text("Your subscription will end when the paid period ends.")
    expect(page.locator("#ends")).to_contain_text("will not renew")
    expect(page.locator("#cancel-button")).to_have_count(0)
    after = shop.subscription(sub["id"])
    assert (after["status"], after["cancelAtPeriodEnd"]) == ("active", True)
    # opening the link again shows nothing of the subscription: its link goes to the email on file
    page.goto(plan["checkoutUrl"] + "?customer=cus_browser")
    page.get_by_label("Email").fill(buyer)
    page.locator("#subscribe-button").click()
    expect(page.locator("#sent-message")).to_contain_text("sent the link to it")
    assert_accessible(page)
    access = _email(subs, buyer, "the link to your subscription")
    assert page_link in _links(access)[0]
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


def _form_token(client: httpx.Client, url: str) -> str:
    form = client.get(url)
    assert form.status_code == 200, form.text
    token = re.search(r'name="token" value="([^"]+)"', form.text)
    assert token is not None
    return token.group(1)


def _subscribe(client: httpx.Client, url: str, email: str, customer: str = "") -> httpx.Response:
    """Post the subscribe form of ``url`` (the plan's link, with its query) as a browser would."""
    fields = {"token": _form_token(client, url), "email": email, "customer": customer}
    return client.post(url, data=fields)


def _page_links(text: str) -> list[str]:
    return re.findall(r"https?://[^\s\"'<>]*/checkout/subscriptions/[A-Za-z0-9_-]{43}", text)


def _active_customer(shop: Shop, plan: dict[str, Any], customer: str, email: str) -> dict[str, Any]:
    opened = shop.open(plan, customer, customerEmail=email)
    shop.pay(opened["paymentIntent"]["id"])
    sub_id = opened["subscription"]["id"]
    eventually(lambda: shop.subscription(sub_id), until=lambda sub: sub["status"] == "active", what=f"{sub_id} active")
    return opened


def test_the_subscribe_page_hands_no_visitor_an_existing_subscription(subs: SubscriptionPlatform, shop: Shop) -> None:
    """Finding 1 (over HTTP): a visitor knowing a plan link and a customer id gets neither the
    subscription, nor its invoice's order, nor its customer page; its link goes to the email on file."""
    plan = shop.plan(name="Victim plan")
    victim = f"victim-{uuid.uuid4().hex[:8]}@example.com"
    attacker = f"mallory-{uuid.uuid4().hex[:8]}@example.com"
    opened = _active_customer(shop, plan, "user_victim", victim)
    sub_id, order_id = opened["subscription"]["id"], opened["paymentIntent"]["id"]
    checkout = plan["checkoutUrl"].rsplit("/", 1)[0]
    with httpx.Client(timeout=60) as visitor:
        for customer, email in (("user_victim", attacker), ("", victim)):  # by id, and by email as the id
            url = plan["checkoutUrl"] + (f"?customer={customer}" if customer else "")
            if not customer:  # a customer who subscribed on the page has their email as their id
                assert _subscribe(visitor, url, victim).status_code == 303  # (the victim's own, new)
            answer = _subscribe(visitor, url, email, customer)
            assert answer.status_code == 200, (answer.status_code, answer.headers.get("location"))
            assert "sent the link to it" in answer.text
            assert "/pi_" not in answer.text and _page_links(answer.text) == []
        # the paid invoice's order, public to whoever holds its id, shows no customer page link
        public = visitor.get(f"{checkout}/v1/payment-intents/{order_id}")
        assert public.status_code == 200 and _page_links(public.text) == [], public.text
        assert public.json()["successUrl"] is None
        assert _page_links(visitor.get(f"{checkout}/pi_{order_id}").text) == []
    mailbox = subs.mailbox
    assert mailbox is not None and mailbox.find(attacker, "") == []

    sent = eventually(
        lambda: mailbox.find(victim, "the link to your subscription"),
        until=lambda found: len(found) == 2,
        what="the two link emails",
    )
    assert shop.subscription(sub_id)["customerPageUrl"] in {link for m in sent for link in _links(m)[0]}
    after = shop.subscription(sub_id)
    assert (after["status"], after["cancelAtPeriodEnd"]) == ("active", False)


@pytest.mark.browser
def test_a_visitor_cannot_reach_or_cancel_another_customers_subscription_in_the_browser(
    subs: SubscriptionPlatform, shop: Shop, page: Page
) -> None:
    """Finding 1, the attack path in Chromium: the subscribe link with the victim's customer id, then
    any customer page link the pages show, then its cancel form. The subscription stays as it was."""
    plan = shop.plan(name="Chromium victim plan")
    victim = f"victim-{uuid.uuid4().hex[:8]}@example.com"
    opened = _active_customer(shop, plan, "user_browser_victim", victim)
    sub_id = opened["subscription"]["id"]
    page.goto(plan["checkoutUrl"] + "?customer=user_browser_victim")
    page.get_by_label("Email").fill("mallory@example.com")
    page.locator("#subscribe-button").click()
    page.wait_for_load_state()
    landed = page.url
    found = _page_links(page.content())
    for href in page.locator("a").evaluate_all("links => links.map(a => a.href)"):
        page.goto(href)
        found += _page_links(page.content()) + _page_links(page.url)
    for link in found:  # (on main: the paid invoice's page leads to the customer page and its cancel form)
        page.goto(link)
        if page.locator("#cancel-button").count():
            page.locator("#cancel-button").click()
            page.wait_for_load_state()
    after = shop.subscription(sub_id)
    assert (after["status"], after["cancelAtPeriodEnd"]) == ("active", False)
    assert found == [] and "/subscriptions/" not in landed and "/pi_" not in landed, (landed, found)
    # the customer themselves: the link by email, their page, and their cancel form works
    page.goto(plan["checkoutUrl"] + "?customer=user_browser_victim")
    page.get_by_label("Email").fill(victim)
    page.locator("#subscribe-button").click()
    expect(page.locator("#sent-message")).to_contain_text("sent the link to it")
    [link] = {x for x in _links(_email(subs, victim, "the link to your subscription"))[0] if "/subscriptions/" in x}
    page.goto(link)
    expect(page.locator("#status")).to_have_text("Active")
    page.locator("#cancel-button").click()
    expect(page.locator("#notice")).to_have_text("Your subscription will end when the paid period ends.")
    assert shop.subscription(sub_id)["cancelAtPeriodEnd"] is True


def test_a_merchant_signed_customer_link_leads_to_the_customers_subscription(shop: Shop) -> None:
    """A ``?customer=`` signed with `signed_subscribe_url` reaches the existing subscription's page;
    an expired, tampered or revoked-key signature is refused; a new customer subscribes as usual."""
    plan = shop.plan(name="Signed plan")
    opened = _active_customer(shop, plan, "user_signed", f"signed-{uuid.uuid4().hex[:8]}@example.com")
    page_url = shop.subscription(opened["subscription"]["id"])["customerPageUrl"]
    harness = shop.harness
    key_row, other_key = harness.server.call(lambda p: create_api_key(p.engine, shop.merchant_id))
    with httpx.Client(timeout=60) as visitor:
        url = signed_subscribe_url(plan["checkoutUrl"], "user_signed", shop.key)
        answer = _subscribe(visitor, url, "anyone@example.com", "user_signed")
        assert answer.status_code == 303 and answer.headers["location"] == page_url
        assert visitor.get(page_url).status_code == 200
        signed_new = signed_subscribe_url(plan["checkoutUrl"], "user_new", other_key)
        new = _subscribe(visitor, signed_new, "n@example.com", "user_new")
        assert new.status_code == 303 and "/pi_" in new.headers["location"]
        [made] = shop.ok(shop.api.get("/subscriptions", params={"customerId": "user_new"}))["data"]
        assert made["customerEmail"] == "n@example.com"
        expired = signed_subscribe_url(plan["checkoutUrl"], "user_signed", shop.key, now=time.time() - 7200)
        tampered = url.replace("customer=user_signed", "customer=user_other")
        revoked = signed_subscribe_url(plan["checkoutUrl"], "user_signed", other_key)
        assert harness.server.call(lambda p: revoke_api_key(p.engine, key_row.id))
        unsigned_expiry = url.split("&signature=")[0]
        for refused in (expired, tampered, revoked, unsigned_expiry):
            assert visitor.get(refused).status_code == 400, refused
            assert visitor.post(refused, data={"token": "x", "email": "a@b.example"}).status_code == 400


def test_a_visitors_subscription_under_a_customer_id_is_not_the_merchants_customers(
    subs: SubscriptionPlatform, shop: Shop
) -> None:
    """Finding 2: an outsider subscribing first under a customer id the merchant uses later does not get
    the merchant's customer: the API refuses, 409 ``customer_unverified``, to take it for another email."""
    plan = shop.plan(name="Squatted plan")
    outsider = f"outsider-{uuid.uuid4().hex[:8]}@example.com"
    with httpx.Client(timeout=60) as visitor:
        made = _subscribe(visitor, plan["checkoutUrl"] + "?customer=user_99", outsider, "user_99")
        assert made.status_code == 303 and "/pi_" in made.headers["location"]
    [squatted] = shop.ok(shop.api.get("/subscriptions", params={"customerId": "user_99"}))["data"]
    victim = f"victim-{uuid.uuid4().hex[:8]}@example.com"
    body = {"planId": plan["id"], "merchantCustomerId": "user_99", "customerEmail": victim}
    refused = shop.api.post("/subscriptions", json=body)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "customer_unverified"
    assert squatted["id"] in refused.json()["error"]["message"]
    assert shop.subscription(squatted["id"])["customerEmail"] == outsider  # unchanged, and not handed over
    confirmation = _email(subs, outsider, "your subscription")  # the outsider's own subscription
    assert squatted["customerPageUrl"] in _links(confirmation)[0]
    # the merchant cancels the outsider's one and opens its customer's
    shop.ok(shop.api.post(f"/subscriptions/{squatted['id']}/cancel", json={}))
    fresh = shop.open(plan, "user_99", customerEmail=victim)
    assert fresh["subscription"]["id"] != squatted["id"] and fresh["subscription"]["customerEmail"] == victim
    # a visitor's subscription under the email the merchant gives is that customer's: taken over
    with httpx.Client(timeout=60) as visitor:
        own = f"own-{uuid.uuid4().hex[:8]}@example.com"
        assert _subscribe(visitor, plan["checkoutUrl"] + "?customer=user_7", own, "user_7").status_code == 303
    taken = shop.open(plan, "user_7", status=200, customerEmail=own.upper())
    assert taken["subscription"]["customerEmail"] == own


def test_subscribe_posts_are_rate_limited_and_a_form_token_is_good_once(shop: Shop) -> None:
    """Finding 3: 120 posts from one address with one form token make one subscription; past the
    address's budget the posts are answered 429."""
    plan = shop.plan(name="Flooded plan")
    address = "127.0.0.2" if shop.harness.platform.engine.dialect.name == "sqlite" else "127.0.0.3"
    transport = httpx.HTTPTransport(local_address=address)
    statuses = []
    with httpx.Client(timeout=60, transport=transport) as flooder:
        fields = {"token": _form_token(flooder, plan["checkoutUrl"]), "email": "flood@example.com", "customer": ""}
        for n in range(120):
            sent = flooder.post(plan["checkoutUrl"], data=fields | {"email": f"flood{n}@example.com"})
            statuses.append(sent.status_code)
    made = shop.ok(shop.api.get("/subscriptions", params={"planId": plan["id"], "limit": 100}))["data"]
    assert len(made) == 1, len(made)
    assert statuses[0] == 303 and set(statuses[1:30]) == {400} and set(statuses[30:]) == {429}, statuses


def test_a_spent_form_token_is_spent_for_every_process_on_the_database(shop: Shop) -> None:
    """The single use is kept in the database: another process's engine finds the token the serving
    process took, and of two engines taking one new token at once, one gets it."""
    plan = shop.plan(name="Once plan")
    harness = shop.harness
    url = harness.platform.settings.database_url.get_secret_value()
    with httpx.Client(timeout=60) as visitor:
        token = _form_token(visitor, plan["checkoutUrl"])
        fields = {"token": token, "email": f"once-{uuid.uuid4().hex[:8]}@example.com", "customer": ""}
        assert visitor.post(plan["checkoutUrl"], data=fields).status_code == 303
        fresh = _form_token(visitor, plan["checkoutUrl"])

    async def elsewhere(platform: Any) -> list[bool]:
        other = create_engine_for(url, pool_size=2)  # another process's pool on the same database
        try:
            now = platform.clock.now()
            spent_before = await spend_form_token(other, token, now)
            both = await asyncio.gather(
                spend_form_token(other, fresh, now), spend_form_token(platform.engine, fresh, now)
            )
            return [spent_before, *sorted(both)]
        finally:
            await other.dispose()

    assert harness.server.call(elsewhere) == [False, False, True]
