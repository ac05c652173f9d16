"""checkout.js in real Chromium: the button (popup, and the redirect when the browser blocks the popup),
the panel, the completion callback, the origins each side accepts, and what the pages load."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from tests.browser.conftest import (
    WAIT_MS,
    Browsing,
    Shop,
    buyer_transfers,
    new_order,
    origin_of,
    platform_origin,
)
from tests.harness import PlatformHarness, serve_app, sqlite_only

pytestmark = [pytest.mark.browser, sqlite_only]

# A merchant's page that records what onComplete reports, for the callback's exact contract.
RECORD = "window.results = []; window.record = (result) => window.results.push(result);"


def _results(page: Page) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = page.evaluate("window.results")
    return results


def _open_popup(page: Page, checkout_url: str) -> Page:
    """``open()`` as a click handler calls it (playwright's evaluate carries a user gesture)."""
    with page.expect_popup() as opened:
        page.evaluate(
            "url => { " + RECORD + " X402mwCheckout.open({checkoutUrl: url, onComplete: window.record}); }",
            checkout_url,
        )
    return opened.value


def _click_to_close(popup: Page, selector: str) -> None:
    """Click a button that closes its popup, and wait for the popup to close. The page may close
    before playwright is done with the click, which it reports as an error: the close is the proof."""
    with popup.expect_event("close"):
        try:
            popup.click(selector)
        except PlaywrightError as exc:
            if "has been closed" not in str(exc):
                raise


def test_the_button_opens_checkout_in_a_popup_and_the_shop_learns_it_was_paid(shop: Shop, browsing: Browsing) -> None:
    page = browsing.page
    page.goto(shop.url)
    browsing.shoot("shop")
    with page.expect_popup() as opened:
        page.click("#buy-guide")
    popup = opened.value
    query = parse_qs(urlsplit(popup.url).query)
    assert query == {"embed": ["popup"], "origin": [origin_of(shop.url)]}
    expect(popup.locator("h1")).to_have_text("12.00 USDC")
    expect(popup.locator(".merchant")).to_have_text("Corner Shop")
    expect(popup.locator("#status")).to_have_text("Awaiting payment")
    expect(popup.locator("#cancel-payment")).to_be_visible()
    expect(popup.locator("#cancel-link")).to_have_count(0)  # in the popup, the shop's page takes over
    browsing.shoot("popup-awaiting-payment", popup)

    deposit = popup.locator("#deposit-address").inner_text()
    buyer_transfers(shop.harness, shop.api_key, deposit, 12_000_000)
    expect(popup.locator("#status")).to_have_text("Paid", timeout=WAIT_MS)
    expect(popup.locator("#success-link")).to_have_count(0)
    browsing.shoot("popup-paid", popup)
    # The callback only told the page; the shop's server asked the platform before saying "paid".
    expect(page.locator("#guide-result")).to_have_text("Thank you: your order is paid.", timeout=WAIT_MS)
    browsing.shoot("shop-paid")
    assert Decimal(shop.balance()) == Decimal("12")
    _click_to_close(popup, "#close-window")
    assert browsing.origins() == {origin_of(shop.url), platform_origin(shop.harness)}


def test_the_completion_callback_reports_the_payment_once(shop: Shop, browsing: Browsing) -> None:
    page = browsing.page
    page.goto(shop.url)
    order = new_order(shop.harness, shop.api_key, amount="1.25")
    popup = _open_popup(page, order["checkoutUrl"])
    deposit = popup.locator("#deposit-address").inner_text()
    assert _results(page) == []
    buyer_transfers(shop.harness, shop.api_key, deposit, 1_250_000)
    page.wait_for_function("window.results.length > 0", timeout=WAIT_MS)
    browsing.shoot("popup-paid", popup)
    expect(popup.locator("#status")).to_have_text("Paid")
    assert _results(page) == [{"paymentId": order["id"], "status": "succeeded"}]


def test_canceling_in_the_popup_closes_it_and_reports_canceled(shop: Shop, browsing: Browsing) -> None:
    page = browsing.page
    page.goto(shop.url)
    order = new_order(shop.harness, shop.api_key)
    popup = _open_popup(page, order["checkoutUrl"])
    browsing.shoot("popup-before-cancel", popup)
    _click_to_close(popup, "#cancel-payment")
    page.wait_for_function("window.results.length > 0")
    assert _results(page) == [{"paymentId": order["id"], "status": "canceled", "reason": "buyer"}]


def test_closing_the_popup_before_paying_reports_canceled(shop: Shop, browsing: Browsing) -> None:
    page = browsing.page
    page.goto(shop.url)
    order = new_order(shop.harness, shop.api_key)
    popup = _open_popup(page, order["checkoutUrl"])
    expect(popup.locator("#status")).to_have_text("Awaiting payment")
    popup.close()
    page.wait_for_function("window.results.length > 0")
    assert _results(page) == [{"paymentId": order["id"], "status": "canceled", "reason": "closed"}]
    browsing.shoot("shop-after-close")


BLOCKED_PAGE = """<!doctype html><html lang="en"><head><title>Shop</title><link rel="icon" href="data:,">
<script src="%(js)s"></script></head><body><main><h1>Shop</h1></main><script>
// Not from a click: the browser's popup blocker refuses the window, and the page goes there instead.
try {
  X402mwCheckout.open({checkoutUrl: "%(url)s"});
  console.log("popup opened");
} catch (error) {
  console.log("open failed: " + error.code);
  if (error.code !== "popup_blocked") throw error;
  X402mwCheckout.open({checkoutUrl: "%(url)s", mode: "redirect"});
}
</script></body></html>"""


def test_a_blocked_popup_raises_popup_blocked_and_the_page_falls_back_to_a_redirect(
    shop: Shop, browsing: Browsing
) -> None:
    page = browsing.page
    order = new_order(shop.harness, shop.api_key)
    js = f"{platform_origin(shop.harness)}/checkout/static/x402mw-checkout.js"
    html = BLOCKED_PAGE % {"js": js, "url": order["checkoutUrl"]}
    app = Starlette(routes=[Route("/", lambda request: HTMLResponse(html))])
    with serve_app(app) as merchant:
        page.goto(merchant)
        page.wait_for_url(order["checkoutUrl"])
    expect(page.locator("#status")).to_have_text("Awaiting payment")
    assert "open failed: popup_blocked" in browsing.console and "popup opened" not in browsing.console
    assert browsing.context.pages == [page]  # no window was opened
    expect(page.locator("#cancel-link")).to_have_attribute("href", "https://shop.example/cart")  # the plain page
    browsing.shoot("redirected-checkout")


def test_open_and_mount_refuse_what_they_cannot_use(shop: Shop, browsing: Browsing) -> None:
    page = browsing.page
    page.goto(shop.url)
    codes = page.evaluate(
        """() => {
      const code = (f) => { try { f(); return "none"; } catch (e) { return e.code; } };
      return [
        code(() => X402mwCheckout.open({})),
        code(() => X402mwCheckout.open({checkoutUrl: "javascript:alert(1)"})),
        code(() => X402mwCheckout.open({checkoutUrl: "https://pay.example/pi_x", mode: "iframe"})),
        code(() => X402mwCheckout.mount(document.body, {paymentId: "not-an-id"})),
        code(() => X402mwCheckout.mount("#nothing-here", {paymentId: "pi_00000000-0000-0000-0000-000000000000"})),
      ];
    }"""
    )
    assert codes == [
        "invalid_checkout_url",
        "invalid_checkout_url",
        "invalid_mode",
        "invalid_payment_id",
        "invalid_element",
    ]


def test_the_panel_embeds_checkout_sized_to_its_content_and_reports_the_payment(shop: Shop, browsing: Browsing) -> None:
    page = browsing.page
    page.goto(shop.url)
    page.click("#pay-stickers")
    element = page.locator("iframe[data-x402mw-checkout=panel]")
    expect(element).to_have_attribute("title", "Pay for the sticker pack")
    panel = page.frame_locator("iframe[data-x402mw-checkout=panel]")
    expect(panel.locator("h1")).to_have_text("3.50 USDC")
    frame = element.element_handle().content_frame()
    assert frame is not None
    assert parse_qs(urlsplit(frame.url).query) == {"embed": ["panel"], "origin": [origin_of(shop.url)]}
    # The frame follows its content: no scrolling inside it, and no empty space below it.
    fitted = "() => Math.abs(document.documentElement.scrollHeight - window.innerHeight) <= 1"
    frame.wait_for_function(fitted)
    tall = element.bounding_box()
    assert tall is not None
    panel.locator("#transfer summary").click()  # fold the transfer details: the frame shrinks
    frame.wait_for_function(f"() => window.innerHeight < {tall['height'] - 100}")
    frame.wait_for_function(fitted)
    panel.locator("#transfer summary").click()
    frame.wait_for_function(fitted)
    browsing.shoot("panel-awaiting-payment")

    deposit = panel.locator("#deposit-address").inner_text()
    buyer_transfers(shop.harness, shop.api_key, deposit, 3_500_000)
    expect(panel.locator("#status")).to_have_text("Paid", timeout=WAIT_MS)
    expect(page.locator("#stickers-result")).to_have_text("Thank you: your order is paid.", timeout=WAIT_MS)
    expect(panel.locator("#success-link")).to_have_count(0)
    frame.wait_for_function(fitted)
    browsing.shoot("panel-paid")
    assert Decimal(shop.balance()) == Decimal("3.5")
    assert browsing.origins() == {origin_of(shop.url), platform_origin(shop.harness)}


def test_canceling_in_the_panel_reports_canceled(shop: Shop, browsing: Browsing) -> None:
    page = browsing.page
    page.goto(shop.url)
    page.click("#pay-stickers")
    panel = page.frame_locator("iframe[data-x402mw-checkout=panel]")
    panel.locator("#cancel-payment").click()
    expect(page.locator("#stickers-result")).to_have_text("Payment not completed (canceled).")
    expect(page.locator("iframe")).to_have_count(0)  # the shop unmounts the panel on cancel
    browsing.shoot("panel-canceled")


def test_the_shop_accepts_messages_from_the_checkout_frame_only(shop: Shop, browsing: Browsing) -> None:
    """A message that claims a payment but comes from anywhere but the panel's own frame, on the
    platform's origin, is ignored: here the shop's own window sends it."""
    page = browsing.page
    page.goto(shop.url)
    order = new_order(shop.harness, shop.api_key)
    page.evaluate(
        "id => { " + RECORD + " window.panel = X402mwCheckout.mount(document.querySelector('main'), "
        "{paymentId: id, onComplete: window.record}); }",
        order["id"],
    )
    panel = page.frame_locator("iframe[data-x402mw-checkout=panel]")
    expect(panel.locator("#status")).to_have_text("Awaiting payment")
    forged = {"source": "x402mw-checkout", "version": 1, "type": "complete", "status": "succeeded"}
    page.evaluate("m => window.postMessage(m, '*')", {**forged, "paymentId": order["id"]})
    panel.locator("#cancel-payment").click()
    page.wait_for_function("window.results.length > 0")
    assert _results(page) == [{"paymentId": order["id"], "status": "canceled", "reason": "buyer"}]
    expect(panel.locator("[data-reason=buyer]")).to_be_visible()


def _csp(harness: PlatformHarness, url: str) -> tuple[str, str]:
    with httpx.Client(timeout=30) as client:
        reply = client.get(url)
    assert reply.status_code == 200, reply.text
    directives = dict(d.strip().split(" ", 1) for d in reply.headers["content-security-policy"].split(";"))
    embed = reply.text.split('data-embed="', 1)[1].split('"', 1)[0]
    return directives["frame-ancestors"], embed


def test_only_the_page_that_asked_may_frame_the_panel(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    url = new_order(dev_platform, key)["checkoutUrl"]
    assert _csp(dev_platform, url) == ("'none'", "")
    assert _csp(dev_platform, url + "?embed=panel&origin=https://shop.example") == ("https://shop.example", "panel")
    assert _csp(dev_platform, url + "?embed=panel&origin=http://127.0.0.1:8000") == ("http://127.0.0.1:8000", "panel")
    assert _csp(dev_platform, url + "?embed=popup&origin=https://shop.example") == ("'none'", "popup")
    for bad in [
        "?embed=panel&origin=*",
        "?embed=panel&origin=https://shop.example/path",
        "?embed=panel&origin=https://shop.example;%20script-src%20*",
        "?embed=panel&origin=javascript:alert(1)",
        "?embed=panel&origin=https://SHOP.example",
        "?embed=panel",
        "?embed=window&origin=https://shop.example",
    ]:
        assert _csp(dev_platform, url + bad) == ("'none'", ""), bad


def test_checkout_js_is_served_at_its_stable_url_with_etag_and_cache_control(dev_platform: PlatformHarness) -> None:
    url = f"{platform_origin(dev_platform)}/checkout/static/x402mw-checkout.js"
    with httpx.Client(timeout=30) as client:
        first = client.get(url)
        assert first.status_code == 200
        assert first.headers["content-type"].startswith(("text/javascript", "application/javascript"))
        assert first.headers["cache-control"] == "public, max-age=300"
        assert "X402mwCheckout" in first.text
        again = client.get(url, headers={"If-None-Match": first.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        page = client.get(new_order(dev_platform, dev_platform.merchant()[1])["checkoutUrl"])
        assets = [part.split('"', 1)[0] for part in page.text.split('="/checkout/static/')[1:]]
        assert sorted(a.split("?")[0] for a in assets) == ["checkout.css", "checkout.js", "wallet.js"]
        for asset in assets:
            reply = client.get(f"{platform_origin(dev_platform)}/checkout/static/{asset}")
            assert reply.status_code == 200
            assert reply.headers["cache-control"] == "public, max-age=31536000, immutable"


def test_the_button_opens_a_payment_link_in_the_popup(shop: Shop, browsing: Browsing) -> None:
    """A ``pl_`` link is a checkoutUrl too: the buyer's own order opens in the popup, which still
    reports to the shop (the link's page, shown in place, keeps ``embed`` and ``origin``)."""
    with shop.api() as api:
        reply = api.post("/payment-links", json={"name": "Poster", "amount": "1.50", "currency": "USDC"})
    assert reply.status_code == 201, reply.text
    link = reply.json()["paymentLink"]
    page = browsing.page
    page.goto(shop.url)
    popup = _open_popup(page, link["checkoutUrl"])
    expect(popup.locator("h1")).to_have_text("1.50 USDC")
    assert urlsplit(popup.url).path.endswith(f"/pl_{link['id']}")
    assert parse_qs(urlsplit(popup.url).query) == {"embed": ["popup"], "origin": [origin_of(shop.url)]}
    payment_id = popup.locator("main").get_attribute("data-payment-id")
    _click_to_close(popup, "#cancel-payment")
    page.wait_for_function("window.results.length > 0")
    assert _results(page) == [{"paymentId": payment_id, "status": "canceled", "reason": "buyer"}]
    browsing.shoot("shop-after-link-popup")


def test_a_page_kept_for_the_next_view_follows_the_order(dev_platform: PlatformHarness) -> None:
    """The server keeps a page it made for the next view of the same order in the same state: a view
    after the order changed shows the change, and each view carries the server's clock."""
    _, key, _ = dev_platform.merchant()
    order = new_order(dev_platform, key, expiresAt="2099-01-01T00:00:00Z")
    with httpx.Client(timeout=30) as client:

        def view() -> tuple[str, str]:
            reply = client.get(order["checkoutUrl"])
            assert reply.status_code == 200
            now = reply.text.split('data-server-now="', 1)[1].split('"', 1)[0]
            assert datetime.fromisoformat(now) <= datetime.now(UTC)  # the clock at this view, not a placeholder
            return reply.text.replace(now, ""), now

        first, first_now = view()
        again, again_now = view()
        assert again == first and again_now >= first_now
        with Shop("", key, dev_platform).api() as api:
            assert api.post(f"/payment-intents/{order['id']}/cancel").status_code == 200
        canceled, _ = view()
    assert 'data-status="requires_payment"' in first and "deposit-address" in first
    assert 'data-status="canceled"' in canceled and "deposit-address" not in canceled
