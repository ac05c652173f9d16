"""Accessibility in real Chromium: axe-core finds no serious or critical violation on the hosted
checkout (each state, light and dark), in the popup, in the panel's frame, on the not-found page and on
the example shop; the page and the panel work by keyboard alone; and no page loads anything from
anywhere but the platform (and, for the shop, its own origin)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import Frame, Page, expect

from tests.browser.conftest import (
    WAIT_MS,
    BrowserWallet,
    Browsing,
    Shop,
    assert_accessible,
    axe_violations,
    buyer_transfers,
    new_order,
    origin_of,
    platform_origin,
)
from tests.harness import PlatformHarness, sqlite_only

pytestmark = [pytest.mark.browser, sqlite_only]


def _cancel(harness: PlatformHarness, key: str, payment_id: str) -> None:
    with Shop("", key, harness).api() as api:
        assert api.post(f"/payment-intents/{payment_id}/cancel").status_code == 200


def test_the_hosted_page_passes_axe_in_every_state(dev_platform: PlatformHarness, browsing: Browsing) -> None:
    _, key, _ = dev_platform.merchant("Acme Books")
    page = browsing.page
    states: list[tuple[str, str, Callable[[Page], None] | None]] = []
    awaiting = new_order(dev_platform, key, expiresAt="2099-01-01T00:00:00Z", acceptedCurrencies=["USDC", "EURC"])
    states.append(("awaiting-payment", awaiting["checkoutUrl"], None))
    states.append(("in-the-popup", awaiting["checkoutUrl"] + "?embed=popup&origin=https://shop.example", None))
    states.append(("as-the-panel", awaiting["checkoutUrl"] + "?embed=panel&origin=https://shop.example", None))
    wallet_only = new_order(dev_platform, key, paymentMethods={"wallet": True, "transfer": False})
    states.append(("wallet-only-no-wallet", wallet_only["checkoutUrl"], None))
    canceled = new_order(dev_platform, key)
    _cancel(dev_platform, key, canceled["id"])
    states.append(("canceled", canceled["checkoutUrl"], None))
    states.append(("not-found", f"{platform_origin(dev_platform)}/checkout/pi_{uuid.uuid4()}", None))
    paid = new_order(dev_platform, key, amount="1")

    def pay(page: Page) -> None:
        buyer_transfers(dev_platform, key, page.locator("#deposit-address").inner_text(), 1_000_000)
        expect(page.locator("#status")).to_have_text("Paid", timeout=WAIT_MS)

    states.append(("paid", paid["checkoutUrl"], pay))
    for scheme in ["light", "dark"]:
        page.emulate_media(color_scheme=scheme)
        for name, url, then in states:
            page.goto(url)
            if then is not None and scheme == "light":
                then(page)
            assert_accessible(page)
            browsing.shoot(f"{name}-{scheme}")


def test_the_page_with_a_wallet_passes_axe(dev_platform: PlatformHarness, browsing: Browsing) -> None:
    _, key, _ = dev_platform.merchant()
    order = new_order(dev_platform, key)
    BrowserWallet(dev_platform.chain.chain_id).install(browsing.page)
    browsing.page.goto(order["checkoutUrl"])
    expect(browsing.page.locator("#wallet-pay")).to_be_visible()
    assert_accessible(browsing.page)
    browsing.page.click("#transfer summary")  # the folded transfer details, opened
    assert_accessible(browsing.page)
    browsing.shoot("wallet")


def _panel_frame(page: Page) -> Frame:
    handle = page.locator("iframe[data-x402mw-checkout=panel]").element_handle()
    frame = handle.content_frame()
    assert frame is not None
    frame.wait_for_selector("#status")
    return frame


def test_the_panel_and_the_shop_pass_axe(shop: Shop, browsing: Browsing) -> None:
    page = browsing.page
    page.goto(shop.url)
    assert_accessible(page)
    page.click("#pay-stickers")
    frame = _panel_frame(page)
    assert_accessible(frame)
    assert_accessible(page)  # the shop with the panel in it (the frame has its accessible name)
    browsing.shoot("panel")


def _focused(target: Page | Frame) -> dict[str, Any]:
    focused: dict[str, Any] = target.evaluate(
        """() => {
      const e = document.activeElement;
      const style = getComputedStyle(e);
      return {id: e.id, tag: e.tagName.toLowerCase(), label: e.getAttribute("aria-label") || e.textContent.trim(),
              outline: style.outlineStyle !== "none" && parseFloat(style.outlineWidth) > 0};
    }"""
    )
    return focused


def _tab_to(page: Page, target: Page | Frame, wanted: str, limit: int = 25) -> list[str]:
    """Press Tab until ``wanted`` (a label or an id) has the focus in ``target``; the labels passed."""
    passed = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused = _focused(target)
        if focused["tag"] != "body":
            passed.append(focused["label"])
            assert focused["outline"], f"{focused} has no visible focus"
        if wanted in (focused["label"], focused["id"]):
            return passed
    raise AssertionError(f"{wanted!r} never got the focus; passed {passed}")


def test_the_hosted_page_works_by_keyboard_alone(dev_platform: PlatformHarness, browsing: Browsing) -> None:
    _, key, _ = dev_platform.merchant()
    order = new_order(dev_platform, key, acceptedCurrencies=["USDC", "EURC"])
    page = browsing.page
    browsing.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=platform_origin(dev_platform))
    page.goto(order["checkoutUrl"])
    # The coin picker by keyboard: focus it, choose EURC with the arrow keys, and the page follows.
    _tab_to(page, page, "option")
    with page.expect_navigation():
        page.keyboard.press("ArrowDown")
    expect(page.locator("#transfer")).to_contain_text("EURC")
    passed = _tab_to(page, page, "Copy the deposit address")
    assert "Copy the amount" in passed
    page.keyboard.press("Enter")
    deposit = page.locator("#deposit-address").inner_text()
    expect(page.locator("button[aria-label='Copy the deposit address']")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == deposit
    browsing.shoot("copied-by-keyboard")
    _tab_to(page, page, "Cancel and return to Test merchant")


def test_the_panel_works_by_keyboard_alone(shop: Shop, browsing: Browsing) -> None:
    page = browsing.page
    browsing.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(shop.url)
    _tab_to(page, page, "Pay on this page")
    page.keyboard.press("Enter")
    frame = _panel_frame(page)
    _tab_to(page, frame, "Copy the deposit address")  # from the shop's page into the panel
    page.keyboard.press("Space")
    expect(frame.locator("button[aria-label='Copy the deposit address']")).to_have_text("Copied")
    # The panel may write to the clipboard (allow="clipboard-write"); the test reads it from the shop.
    assert page.evaluate("navigator.clipboard.readText()") == frame.locator("#deposit-address").inner_text()
    browsing.shoot("panel-copied-by-keyboard")
    _tab_to(page, frame, "Cancel payment")
    page.keyboard.press("Enter")
    expect(page.locator("#stickers-result")).to_have_text("Payment not completed (canceled).")


def test_a_buyer_pays_with_a_wallet_by_keyboard_alone(dev_platform: PlatformHarness, browsing: Browsing) -> None:
    _, key, _ = dev_platform.merchant()
    order = new_order(dev_platform, key, amount="0.5")
    wallet = BrowserWallet(dev_platform.chain.chain_id)
    dev_platform.fund(key, wallet.address, "0.5")
    page = browsing.page
    wallet.install(page)
    page.goto(order["checkoutUrl"])
    _tab_to(page, page, "Pay with wallet")
    page.keyboard.press("Enter")
    expect(page.locator("#status")).to_have_text("Paid", timeout=WAIT_MS)
    browsing.shoot("paid-by-keyboard")


def test_the_pages_load_nothing_from_anywhere_but_the_platform(shop: Shop, browsing: Browsing) -> None:
    platform = platform_origin(shop.harness)
    page = browsing.page
    order = new_order(shop.harness, shop.api_key, acceptedCurrencies=["USDC", "EURC"])
    page.goto(order["checkoutUrl"])
    with page.expect_navigation():
        page.select_option("#option", index=1)  # the picker reloads the page for the chosen coin
    page.goto(f"{platform}/checkout/pl_{uuid.uuid4()}")
    assert browsing.origins() == {platform}, browsing.requests
    assert any("/checkout/static/checkout.js" in url for url in browsing.requests)

    browsing.requests.clear()
    page.goto(shop.url)
    with page.expect_popup() as opened:
        page.click("#buy-guide")
    expect(opened.value.locator("#status")).to_have_text("Awaiting payment")
    page.click("#pay-stickers")
    expect(page.frame_locator("iframe").locator("#status")).to_have_text("Awaiting payment")
    assert browsing.origins() == {origin_of(shop.url), platform}, browsing.requests
    assert any(url.startswith(f"{platform}/checkout/pi_") and "embed=panel" in url for url in browsing.requests)
    with httpx.Client(timeout=30) as client:  # and the page's own markup names no other host
        html = client.get(order["checkoutUrl"]).text
    for own in [order["successUrl"], order["cancelUrl"], "http://www.w3.org/2000/svg"]:
        html = html.replace(own, "")
    assert "http://" not in html and "https://" not in html


def test_the_axe_check_finds_serious_violations(browsing: Browsing, dev_platform: PlatformHarness) -> None:
    """The check is not vacuous: a nameless button and an image without a text alternative are reported."""
    page = browsing.page
    page.goto(f"{platform_origin(dev_platform)}/checkout/pi_{uuid.uuid4()}")
    page.evaluate(
        """() => {
      document.querySelector("main").insertAdjacentHTML("beforeend",
        '<button id="nameless"></button><img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">');
    }"""
    )
    found = {v["id"] for v in axe_violations(page)}
    assert {"button-name", "image-alt"} <= found
