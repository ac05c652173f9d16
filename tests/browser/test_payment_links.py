"""A payment link bought twice, by two buyers in two browsers, in real Chromium: each gets an order of
their own from the same ``pl_`` link; one pays by transfer, the other with a wallet that has no gas;
both orders succeed, carry the link's id, and the merchant is credited twice."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.browser.conftest import WAIT_MS, BrowserWallet, Browsing, Shop, assert_accessible, buyer_transfers
from tests.harness import PlatformHarness

pytestmark = pytest.mark.browser


def _merchant_api(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def test_a_payment_link_bought_twice_by_two_buyers(
    dev_platform: PlatformHarness, browser: Browser, browsing: Browsing
) -> None:
    _, key, _ = dev_platform.merchant("Corner Shop")
    with _merchant_api(dev_platform, key) as api:
        reply = api.post("/payment-links", json={"name": "Sticker pack", "amount": "2.50", "currency": "USDC"})
    assert reply.status_code == 201, reply.text
    link: dict[str, Any] = reply.json()["paymentLink"]
    assert link["checkoutUrl"].endswith(f"/pl_{link['id']}")
    shots = browsing.shots
    orders: list[str] = []
    for buyer in ["transfer", "wallet"]:
        context = browser.new_context()  # each buyer's own browser: no cookie of the other's order
        context.set_default_timeout(WAIT_MS)
        try:
            page = context.new_page()
            wallet = BrowserWallet(dev_platform.chain.chain_id) if buyer == "wallet" else None
            if wallet is not None:
                dev_platform.fund(key, wallet.address, "2.50")
                wallet.install(page)
            page.goto(link["checkoutUrl"])
            expect(page.locator("h1")).to_have_text("2.50 USDC")
            assert page.url == link["checkoutUrl"], "the link shows the buyer's order in place"
            payment_id = page.locator("main").get_attribute("data-payment-id") or ""
            assert payment_id not in orders
            orders.append(payment_id)
            assert_accessible(page)
            page.screenshot(path=str(shots / f"{buyer}-buyer-awaiting-payment.png"), full_page=True)
            if wallet is None:
                deposit = page.locator("#deposit-address").inner_text()
                buyer_transfers(dev_platform, key, deposit, 2_500_000)
            else:
                page.click("#wallet-pay")
            expect(page.locator("#status")).to_have_text("Paid", timeout=WAIT_MS)
            page.screenshot(path=str(shots / f"{buyer}-buyer-paid.png"), full_page=True)
        finally:
            context.close()
    with _merchant_api(dev_platform, key) as api:
        paid = [api.get(f"/payment-intents/{payment_id}").json()["paymentIntent"] for payment_id in orders]
    assert [(o["status"], o["paymentLinkId"], o["amount"]) for o in paid] == [("succeeded", link["id"], "2.50")] * 2
    assert Decimal(Shop("", key, dev_platform).balance()) == Decimal("5")


def test_a_slug_link_shows_its_order_in_place_and_one_amount_format(
    dev_platform: PlatformHarness, browser: Browser, browsing: Browsing
) -> None:
    """Spec 2.1: ``/paylink/<slug>`` stays valid and does not redirect. Chromium opens it and stays
    there, on the buyer's own order; choosing another coin reloads the same address and the same
    order; the amount reads ``3.50 USDC`` in the header and in the transfer's copy field alike."""
    _, key, _ = dev_platform.merchant("Corner Shop")
    slug = f"zine-{uuid.uuid4().hex[:8]}"
    body = {"name": "Zine", "amount": "3.5", "currency": "USDC", "acceptedCurrencies": ["USDC", "EURC"], "slug": slug}
    with _merchant_api(dev_platform, key) as api:
        reply = api.post("/payment-links", json=body)
    assert reply.status_code == 201, reply.text
    slug_url = reply.json()["paymentLink"]["slugUrl"]
    page = browsing.page
    response = page.goto(slug_url)
    assert response is not None and response.status == 200
    assert response.request.redirected_from is None and page.url == slug_url
    expect(page.locator("h1")).to_have_text("3.50 USDC")
    expect(page.locator("#transfer-amount")).to_have_text("3.50")
    assert page.locator("#transfer-amount").locator("xpath=..").inner_text().startswith("3.50 USDC")
    assert page.locator("#transfer-amount ~ button.copy").get_attribute("data-copy") == "3.50"
    payment_id = page.locator("main").get_attribute("data-payment-id")
    with page.expect_navigation():  # the picker reloads the page as the coin changes
        page.select_option("#option", value=f"eip155:{dev_platform.chain.chain_id}/EURC")
    assert page.url.split("?", 1)[0] == slug_url
    assert page.locator("main").get_attribute("data-payment-id") == payment_id
    expect(page.locator("h1")).to_have_text("3.50 USDC")
    browsing.shoot("slug-link-in-place")
    with _merchant_api(dev_platform, key) as api:
        assert [o["id"] for o in api.get("/payment-intents").json()["data"]] == [payment_id]
