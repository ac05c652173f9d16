"""The browser paywall: Chromium opens a paid route, pays from an injected EIP-1193 wallet that holds
USDC and no gas (an EIP-3009 authorization the platform's relayer settles), sees the paid answer,
and on a new page load gets back in with "I already paid" (sign-in-with-x). Screenshots under
build/screenshots/; axe-core on the page; no request leaves the seller's origin."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from playwright.sync_api import expect
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.browser.conftest import BrowserWallet, Browsing, assert_accessible
from tests.harness import Deployment, PlatformHarness, serve_app
from x402mw.adapters.starlette import PaymentMiddleware, paid
from x402mw.platform.server import free_port
from x402mw.seller import Paywall, SignIn

LOGO = (
    "data:image/svg+xml;base64,"
    + base64.b64encode(
        b'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40">'
        b'<circle cx="20" cy="20" r="18" fill="#2a6"/></svg>'
    ).decode()
)


@dataclass
class Seller:
    url: str
    deployment: Deployment


@pytest.fixture
def seller(dev_platform: PlatformHarness) -> Iterator[Seller]:
    deployment = dev_platform.deploy(fund="")
    port = free_port()
    origin = f"http://127.0.0.1:{port}"

    @paid(deployment.endpoint_id, description="Today's forecast for Oslo", sign_in=SignIn(origin=origin))
    async def forecast(request: Request) -> JSONResponse:
        settlement = request.state.x402
        return JSONResponse({"forecast": "sunny", "signedIn": settlement.signed_in})

    app = Starlette(
        routes=[Route("/forecast", forecast)],
        middleware=[
            Middleware(
                PaymentMiddleware,
                api_key=deployment.api_key,
                platform_url=dev_platform.url,
                paywall=Paywall(name="Fjord Weather", logo=LOGO, description="Forecasts by the fjord"),
            )
        ],
    )
    with serve_app(app, port=port) as url:
        yield Seller(url, deployment)


def test_a_browser_pays_then_signs_in_again(seller: Seller, browsing: Browsing, dev_platform: PlatformHarness) -> None:
    wallet = BrowserWallet(dev_platform.chain.chain_id)
    dev_platform.fund(seller.deployment.api_key, wallet.address, "1")  # coins, and no gas: it only signs
    page = browsing.page
    wallet.install(page)
    answer = page.goto(seller.url + "/forecast")
    assert answer is not None and answer.status == 402
    assert len(answer.body()) < 50_000  # the whole page: styles and scripts inlined
    expect(page.locator("#price")).to_have_text("0.01")
    expect(page.locator(".merchant")).to_have_text("Fjord Weather")
    expect(page.locator("#network")).to_have_text(f"on x402mw dev chain (eip155:{dev_platform.chain.chain_id})")
    # the brand: the logo beside the seller's name, the description under it, apart from what is sold
    logo, seller_name, about = (page.locator(s).bounding_box() for s in (".logo", ".merchant", ".description"))
    sold = page.locator("#purchase").bounding_box()
    assert logo and seller_name and about and sold
    assert logo["x"] + logo["width"] <= seller_name["x"] and about["y"] >= seller_name["y"] + seller_name["height"]
    assert sold["y"] >= about["y"] + about["height"] + 8  # not run together
    expect(page.locator("#purchase")).to_have_text("Today's forecast for Oslo")
    assert_accessible(page)
    browsing.shoot("1-paywall")

    page.get_by_role("button", name="Pay with wallet").click()
    expect(page.locator("#result")).to_be_visible()
    paid_answer = json.loads(page.locator("#result-body").inner_text())
    assert paid_answer == {"forecast": "sunny", "signedIn": False}
    assert "eth_signTypedData_v4" in wallet.asked and "eth_sendTransaction" not in wallet.asked
    assert_accessible(page)
    browsing.shoot("2-paid")

    page.goto(seller.url + "/forecast")  # a new page load: the paywall again
    page.get_by_role("button", name="I already paid").click()
    expect(page.locator("#result")).to_be_visible()
    assert json.loads(page.locator("#result-body").inner_text()) == {"forecast": "sunny", "signedIn": True}
    assert wallet.asked.count("eth_signTypedData_v4") == 1  # nothing paid the second time
    assert "personal_sign" in wallet.asked
    browsing.shoot("3-signed-in")
    assert browsing.origins() == {seller.url}  # nothing from another host


def test_a_wallet_that_never_paid_is_told_so(seller: Seller, browsing: Browsing, dev_platform: PlatformHarness) -> None:
    wallet = BrowserWallet(dev_platform.chain.chain_id)
    page = browsing.page
    wallet.install(page)
    page.goto(seller.url + "/forecast")
    page.get_by_role("button", name="I already paid").click()
    expect(page.locator("#wallet-message")).to_contain_text("no payment for this page")
    expect(page.locator("#result")).to_be_hidden()
    browsing.shoot("refused")


def test_agents_get_the_plain_402_and_hostile_headers_change_nothing(seller: Seller) -> None:
    with httpx.Client(base_url=seller.url) as client:
        agent = client.get("/forecast")
        assert agent.status_code == 402 and agent.headers["content-type"] == "application/json"
        assert json.loads(agent.content)["x402Version"] == 2
        for accept in ["application/json", "*/*", "text/plain", "", "x" * 4000]:
            plain = client.get("/forecast", headers={"Accept": accept})
            assert plain.status_code == 402 and plain.headers["content-type"] == "application/json"
        hostile = client.get(
            "/forecast",
            headers={
                "Accept": "text/html<script>alert(1)</script>",
                "Referer": "javascript:alert(1)//</script><script>alert(2)</script>",
            },
        )
        assert hostile.status_code == 402 and hostile.headers["content-type"].startswith("text/html")
        assert "alert" not in hostile.text  # nothing of the request is echoed into the page
        assert "script-src 'sha256-" in hostile.headers["content-security-policy"]
        assert "PAYMENT-REQUIRED" in hostile.headers  # the page is the same 402
