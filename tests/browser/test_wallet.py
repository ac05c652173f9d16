"""Gasless wallet payments in real Chromium: a browser wallet (EIP-1193, injected into the page and
its frames) whose account holds USDC and no gas signs the EIP-3009 authorization that ``attempts``
answers; the page posts it to the platform's relay, which pays the gas. On the hosted page and in the
panel."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import FrameLocator, Page, expect

from tests.browser.conftest import WAIT_MS, WALLET_SCRIPT, BrowserWallet, Browsing, Shop, new_order
from tests.harness import PlatformHarness, sqlite_only

pytestmark = pytest.mark.browser


def _gas(harness: PlatformHarness, address: str) -> int:
    async def read(platform: Any) -> int:
        return int(await harness.chain.rpc.request("eth_getBalance", [address, "latest"]), 16)

    return int(harness.server.call(read))


def _order_status(harness: PlatformHarness, api_key: str, payment_id: str) -> dict[str, Any]:
    with Shop("", api_key, harness).api() as api:
        reply = api.get(f"/payment-intents/{payment_id}")
    assert reply.status_code == 200, reply.text
    order: dict[str, Any] = reply.json()["paymentIntent"]
    return order


def _funded_wallet(
    harness: PlatformHarness, api_key: str, amount: str, *, on_chain: int | None = None
) -> BrowserWallet:
    wallet = BrowserWallet(harness.chain.chain_id, wallet_chain=on_chain)
    harness.fund(api_key, wallet.address, amount)
    assert _gas(harness, wallet.address) == 0  # the coin only: no gas at all
    return wallet


def _check_the_signature(wallet: BrowserWallet, harness: PlatformHarness, deposit: str, value: int) -> None:
    [typed] = wallet.signed
    assert typed["primaryType"] == "TransferWithAuthorization"
    assert typed["domain"]["verifyingContract"] == harness.usdc
    assert typed["domain"]["chainId"] == harness.chain.chain_id
    message = typed["message"]
    assert (message["from"], message["to"], message["value"]) == (wallet.address, deposit, str(value))


def test_a_wallet_without_gas_pays_on_the_hosted_page(dev_platform: PlatformHarness, browsing: Browsing) -> None:
    _, key, _ = dev_platform.merchant("Acme Books")
    order = new_order(dev_platform, key, amount="2.75")
    wallet = _funded_wallet(dev_platform, key, "2.75", on_chain=1)  # on another network at first
    page = browsing.page
    wallet.install(page)
    page.goto(order["checkoutUrl"])
    expect(page.locator("#wallet")).to_contain_text("No network fee")
    expect(page.locator("#transfer-title")).to_have_text("Or pay by transfer")
    browsing.shoot("wallet-awaiting-payment")
    deposit = page.locator("#deposit-address").text_content() or ""
    page.click("#wallet-pay")
    expect(page.locator("#status")).to_have_text("Paid", timeout=WAIT_MS)
    browsing.shoot("wallet-paid")
    assert wallet.asked == ["eth_requestAccounts", "eth_chainId", "wallet_switchEthereumChain", "eth_signTypedData_v4"]
    _check_the_signature(wallet, dev_platform, deposit, 2_750_000)
    paid = _order_status(dev_platform, key, order["id"])
    assert (paid["status"], paid["amountReceived"], paid["payer"]) == ("succeeded", "2.75", wallet.address)
    assert Decimal(Shop("", key, dev_platform).balance()) == Decimal("2.75")
    assert dev_platform.balance(wallet.address) == 0 and _gas(dev_platform, wallet.address) == 0
    expect(page.locator("#tx-hash")).to_have_text(paid["txHash"])


def test_a_wallet_without_gas_pays_in_the_panel(shop: Shop, browsing: Browsing) -> None:
    wallet = _funded_wallet(shop.harness, shop.api_key, "3.50")
    page = browsing.page
    wallet.install(page)  # the page and its frames, as a wallet extension does
    page.goto(shop.url)
    page.click("#pay-stickers")
    panel: FrameLocator = page.frame_locator("iframe[data-x402mw-checkout=panel]")
    expect(panel.locator("#wallet-pay")).to_be_visible()
    deposit = panel.locator("#deposit-address").text_content() or ""
    panel.locator("#wallet-pay").click()
    expect(panel.locator("#status")).to_have_text("Paid", timeout=WAIT_MS)
    expect(page.locator("#stickers-result")).to_have_text("Thank you: your order is paid.", timeout=WAIT_MS)
    browsing.shoot("panel-wallet-paid")
    assert wallet.asked == ["eth_requestAccounts", "eth_chainId", "eth_signTypedData_v4"]
    _check_the_signature(wallet, shop.harness, deposit, 3_500_000)
    assert Decimal(shop.balance()) == Decimal("3.5")
    assert shop.harness.balance(wallet.address) == 0 and _gas(shop.harness, wallet.address) == 0


@sqlite_only
def test_a_signature_refused_in_the_wallet_leaves_the_order_payable(
    dev_platform: PlatformHarness, browsing: Browsing
) -> None:
    _, key, _ = dev_platform.merchant()
    order = new_order(dev_platform, key, paymentMethods={"wallet": True, "transfer": False})
    refusing = BrowserWallet(dev_platform.chain.chain_id)
    page: Page = browsing.page

    def wallet(method: str, params: list[Any]) -> Any:
        if method == "eth_signTypedData_v4":
            refusing.asked.append(method)
            return {"rpcError": {"code": 4001, "message": "User rejected the request."}}
        return refusing(method, params)

    page.expose_function("testWallet", wallet)
    page.add_init_script(WALLET_SCRIPT)
    page.goto(order["checkoutUrl"])
    page.click("#wallet-pay")
    expect(page.locator("#wallet-message")).to_have_text("You cancelled in your wallet. You can try again.")
    expect(page.locator("#wallet-pay")).to_be_enabled()
    expect(page.locator("#status")).to_have_text("Awaiting payment")
    browsing.shoot("wallet-refused")
    assert refusing.asked == ["eth_requestAccounts", "eth_chainId", "eth_signTypedData_v4"]
    assert _order_status(dev_platform, key, order["id"])["status"] == "requires_payment"
