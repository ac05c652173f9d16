"""Each hosted checkout page says what is bought, in real Chromium, at a desktop (1280 px) and a phone
(390 px) width: an order's description, a payment link's name, a subscription invoice's plan and
period; every amount on the page carries its coin; a paid page says "Paid" once. Screenshots of each
page at both widths are kept under ``build/screenshots/<test>/``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import WAIT_MS, Browsing, assert_accessible, buyer_transfers, new_order
from tests.harness import PlatformHarness, sqlite_only
from tests.waiting import eventually

pytestmark = [pytest.mark.browser, sqlite_only]

WIDTHS = {"desktop": (1280, 800), "phone": (390, 844)}


def _api(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _at_each_width(browsing: Browsing, url: str, name: str, check: Any) -> None:
    page = browsing.page
    for width, size in WIDTHS.items():
        page.set_viewport_size({"width": size[0], "height": size[1]})
        page.goto(url)
        check(page)
        assert_accessible(page)
        # Nothing wider than the screen: a phone must not scroll sideways.
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        browsing.shoot(f"{name}-{width}")


def test_an_order_names_its_description(dev_platform: PlatformHarness, browsing: Browsing) -> None:
    _, key, _ = dev_platform.merchant("Acme Books")
    order = new_order(dev_platform, key, description="A Field Guide to Stablecoins (paperback)", amount="3.5")
    assert order["description"] == "A Field Guide to Stablecoins (paperback)"
    with httpx.Client(timeout=60) as web:
        public = web.get(f"{dev_platform.url.removesuffix('/v1')}/checkout/v1/payment-intents/pi_{order['id']}")
    assert public.json()["description"] == "A Field Guide to Stablecoins (paperback)"
    assert public.json()["subscription"] is None

    def check(page: Page) -> None:
        expect(page.locator("#purchase")).to_have_text("A Field Guide to Stablecoins (paperback)")
        expect(page.locator("h1")).to_have_text("3.50 USDC")
        assert "A Field Guide to Stablecoins" in page.title()

    _at_each_width(browsing, order["checkoutUrl"], "order", check)


def test_a_payment_link_names_itself(dev_platform: PlatformHarness, browsing: Browsing) -> None:
    _, key, _ = dev_platform.merchant("Corner Shop")
    with _api(dev_platform, key) as api:
        reply = api.post("/payment-links", json={"name": "Sticker pack", "amount": "2.50", "currency": "USDC"})
    assert reply.status_code == 201, reply.text
    link: dict[str, Any] = reply.json()["paymentLink"]

    def check(page: Page) -> None:
        expect(page.locator("#purchase")).to_have_text("Sticker pack")
        expect(page.locator("h1")).to_have_text("2.50 USDC")

    _at_each_width(browsing, link["checkoutUrl"], "payment-link", check)
    payment_id = browsing.page.locator("main").get_attribute("data-payment-id")  # shown at the link's address
    with _api(dev_platform, key) as api:
        opened = api.get(f"/payment-intents/{payment_id}").json()["paymentIntent"]
    assert opened["description"] == "Sticker pack"


def test_an_invoice_names_its_plan_and_period(dev_platform: PlatformHarness, browsing: Browsing) -> None:
    _, key, _ = dev_platform.merchant("Cloud Notes")
    with _api(dev_platform, key) as api:
        plan = api.post(
            "/subscription-plans", json={"name": "Pro", "amount": "9.90", "currency": "USDC", "interval": "monthly"}
        ).json()["plan"]
        opened = api.post(
            "/subscriptions",
            json={"planId": plan["id"], "merchantCustomerId": "user_7", "customerEmail": "seven@example.com"},
        ).json()
    url = opened["paymentIntent"]["checkoutUrl"]

    def unpaid(page: Page) -> None:
        expect(page.locator("#purchase")).to_have_text("Pro · monthly subscription")

    _at_each_width(browsing, url, "invoice-first", unpaid)
    page = browsing.page
    buyer_transfers(dev_platform, key, page.locator("#deposit-address").inner_text(), 9_900_000)
    expect(page.locator("#status")).to_have_text("Paid", timeout=WAIT_MS)

    def paid(page: Page) -> None:
        # The first payment anchored the period: the page now says which one was paid for.
        expect(page.locator("#purchase")).to_contain_text("Pro · monthly subscription, ")
        expect(page.locator("#purchase")).to_contain_text(" – ")
        expect(page.locator("#paid-title")).to_have_text("Thank you")
        expect(page.locator("main")).to_contain_text("has received your payment of 9.90 USDC.")
        assert page.get_by_text("Paid", exact=True).count() == 1

    _at_each_width(browsing, url, "invoice-paid", paid)


def test_a_part_payment_shows_its_coin(dev_platform: PlatformHarness, browsing: Browsing) -> None:
    _, key, _ = dev_platform.merchant("Acme Books")
    order = new_order(dev_platform, key, amount="10")
    page = browsing.page
    page.goto(order["checkoutUrl"])
    buyer_transfers(dev_platform, key, page.locator("#deposit-address").inner_text(), 4_000_000)

    def received(page: Page) -> None:
        expect(page.locator(".received")).to_have_text("Received so far: 4.00 USDC. Still to pay: 6.00 USDC.")

    with httpx.Client(base_url=dev_platform.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
        eventually(  # the watcher counts the transfer within a few of its rounds
            lambda: api.get(f"/payment-intents/{order['id']}").json()["paymentIntent"]["amountReceived"],
            until=lambda received: received != "0",
            what="the transfer counted",
            interval=0.5,
        )
    _at_each_width(browsing, order["checkoutUrl"], "part-paid", received)
