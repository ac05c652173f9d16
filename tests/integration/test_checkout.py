"""Hosted checkout against a real platform: the public checkout API (spec 4.2) and the checkout page in
real Chromium, with real payments on the dev chain (a buyer's EIP-3009 transfer, and a wallet's
signature over the typed data that ``attempts`` hands out)."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.harness import PlatformHarness
from x402mw.evm.keys import address_of, is_address, new_private_key, to_checksum_address
from x402mw.platform.chain.token import encode_transfer_with_authorization
from x402mw.platform.services.deposits import authorization_call

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
WAIT_MS = 30_000  # for what the page does by itself (polling, reloading): a bound, not a measurement
PRIVATE_FIELDS = {"orderId", "metadata", "customer", "customerEmail", "customerName", "payer", "checkoutUrl"}


def _origin(harness: PlatformHarness) -> str:
    return harness.url.removesuffix("/v1")


def _public(harness: PlatformHarness) -> httpx.Client:
    """The checkout API as a buyer's browser reaches it: no API key."""
    return httpx.Client(base_url=_origin(harness) + "/checkout/v1", timeout=60, follow_redirects=False)


def _merchant_api(harness: PlatformHarness, key: str) -> httpx.Client:
    return httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _order(harness: PlatformHarness, key: str, **fields: Any) -> dict[str, Any]:
    body = {
        "orderId": f"o-{uuid.uuid4()}",
        "amount": "12.5",
        "currency": "USDC",
        "successUrl": "https://shop.example/thanks",
        "cancelUrl": "https://shop.example/cart",
        **fields,
    }
    with _merchant_api(harness, key) as api:
        reply = api.post("/payment-intents", json=body)
    assert reply.status_code == 201, reply.text
    order: dict[str, Any] = reply.json()["paymentIntent"]
    return order


def _attempt(harness: PlatformHarness, payment_id: str, **choice: str) -> httpx.Response:
    body = {"network": harness.network, "currency": "USDC", "method": "transfer", **choice}
    with _public(harness) as checkout:
        return checkout.post(f"/payment-intents/{payment_id}/attempts", json=body)


def _transfer_status(harness: PlatformHarness, payment_id: str) -> dict[str, Any]:
    with _public(harness) as checkout:
        reply = checkout.post(f"/payment-intents/{payment_id}/transfer-status")
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def _buyer_pays(harness: PlatformHarness, api_key: str, to: str, amount: int) -> str:
    """A buyer funded by the faucet signs a USDC transfer to ``to``; the relayer submits it."""
    buyer = new_private_key()
    harness.fund(api_key, address_of(buyer), str(Decimal(amount).scaleb(-6)))
    return _buyer_sends(harness, buyer, to, amount)


def _buyer_sends(harness: PlatformHarness, buyer: bytes, to: str, amount: int) -> str:
    chain = harness.chain
    data, _, _ = authorization_call(chain, harness.usdc, buyer, to, amount, secrets.token_bytes(32))

    async def send(platform: Any) -> str:
        tx = await chain.relayer.send(harness.usdc, data)
        await chain.wait_for(tx)
        return tx

    return harness.server.call(send)


def _error(reply: httpx.Response, status: int) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    error: dict[str, Any] = reply.json()["error"]
    assert error["requestId"] == reply.headers["request-id"]
    return error


def test_public_data_shows_the_order_and_nothing_private(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("Acme Books")
    order = _order(
        dev_platform,
        key,
        acceptedCurrencies=["USDC", "EURC"],
        customer={"email": "buyer@example.com", "name": "Ada Buyer"},
        metadata={"internal_note": "vip-discount-7"},
        expiresAt="2099-01-01T00:00:00Z",
    )
    with _public(dev_platform) as checkout:
        bare = checkout.get(f"/payment-intents/{order['id']}")
        prefixed = checkout.get(f"/payment-intents/pi_{order['id']}")
    assert bare.status_code == prefixed.status_code == 200, bare.text
    public = prefixed.json()
    assert public == bare.json()
    assert public["id"] == public["paymentId"] == order["id"]
    assert public["object"] == "checkout_payment_intent"
    assert (public["status"], public["amount"], public["amountReceived"], public["amountDue"]) == (
        "requires_payment",
        "12.5",
        "0",
        "12.5",
    )
    assert public["currency"] == "USDC" and public["acceptedCurrencies"] == ["USDC", "EURC"]
    assert public["paymentMethods"] == {"wallet": True, "transfer": True, "transferDefaultOpen": False}
    assert public["merchant"] == {"name": "Acme Books"}
    assert (public["successUrl"], public["cancelUrl"]) == ("https://shop.example/thanks", "https://shop.example/cart")
    assert public["expiresAt"] == "2099-01-01T00:00:00.000Z"
    assert (public["txHash"], public["exceptions"], public["livemode"]) == (None, [], False)
    [network] = public["networks"]
    assert network["network"] == dev_platform.network and network["testnet"] is True
    coins = {c["currency"]: c for c in network["currencies"]}
    assert list(coins) == ["USDC", "EURC"]
    assert coins["USDC"]["tokenAddress"] == dev_platform.usdc and coins["USDC"]["decimals"] == 6
    assert coins["USDC"]["methods"] == ["transfer", "wallet"]
    assert PRIVATE_FIELDS.isdisjoint(public)
    for secret in ["buyer@example.com", "Ada Buyer", "vip-discount-7", order["orderId"]]:
        assert secret not in prefixed.text


def test_unknown_and_malformed_ids_are_404_on_every_endpoint(dev_platform: PlatformHarness) -> None:
    unknown = str(uuid.uuid4())
    with _public(dev_platform) as checkout:
        for payment_id in [unknown, f"pi_{unknown}", "pi_nope", "not-a-uuid", f"pl_{unknown}"]:
            for method, suffix, body in [
                ("GET", "", None),
                ("POST", "/attempts", {"network": dev_platform.network, "currency": "USDC", "method": "transfer"}),
                ("POST", "/transfer-status", {}),
                ("POST", "/sync", {"txHash": "0x" + "ab" * 32, "network": dev_platform.network}),
            ]:
                reply = checkout.request(method, f"/payment-intents/{payment_id}{suffix}", json=body)
                error = _error(reply, 404)
                assert error["code"] == "resource_missing", (payment_id, suffix)


def test_a_transfer_attempt_answers_the_deposit_address_and_an_eip681_uri(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, expiresAt="2099-01-01T00:00:00Z")
    reply = _attempt(dev_platform, f"pi_{order['id']}")
    assert reply.status_code == 200, reply.text
    attempt = reply.json()
    deposit = attempt["depositAddress"]
    chain_id = dev_platform.chain.chain_id
    assert is_address(deposit)
    assert attempt == {
        "object": "checkout_attempt",
        "paymentId": order["id"],
        "method": "transfer",
        "network": dev_platform.network,
        "chainId": chain_id,
        "networkName": dev_platform.chain.network.name,
        "currency": "USDC",
        "tokenAddress": dev_platform.usdc,
        "decimals": 6,
        "depositAddress": deposit,
        "amountDue": "12.5",
        "amountDueMinor": "12500000",
        "paymentUri": f"ethereum:{dev_platform.usdc}@{chain_id}/transfer?address={deposit}&uint256=12500000",
        "expiresAt": "2099-01-01T00:00:00.000Z",
        "transaction": None,
        "authorization": None,
    }
    again = _attempt(dev_platform, order["id"]).json()
    assert again["depositAddress"] == deposit, "one deposit address per order"
    other = _attempt(dev_platform, _order(dev_platform, key)["id"]).json()
    assert other["depositAddress"] != deposit


def test_bad_choices_are_400_naming_the_param(dev_platform: PlatformHarness) -> None:
    # A choice the OpenAPI document refuses is a 400; a valid one this order does not offer, a 409.
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, paymentMethods={"wallet": False, "transfer": True})
    path = f"/payment-intents/{order['id']}/attempts"
    cases: list[tuple[dict[str, Any], str, str, int]] = [
        ({"network": "eip155:1"}, "network", "unsupported_chain", 400),  # not a network of this platform
        ({"network": "solana:mainnet"}, "network", "unsupported_chain", 400),
        ({"currency": "EURC"}, "currency", "unsupported_currency", 409),  # not accepted by this order
        ({"currency": "DOGE"}, "currency", "parameter_invalid", 400),
        ({"method": "card"}, "method", "parameter_invalid", 400),
        ({"method": "wallet"}, "method", "payment_method_unavailable", 409),  # disabled for this order
        ({"tip": "1"}, "tip", "parameter_unknown", 400),
    ]
    for change, param, code, status in cases:
        error = _error(_attempt(dev_platform, order["id"], **change), status)
        assert (error["param"], error["code"]) == (param, code), change
    with _public(dev_platform) as checkout:
        missing = checkout.post(path, json={"network": dev_platform.network, "currency": "USDC"})
        assert (_error(missing, 400)["code"], missing.json()["error"]["param"]) == ("parameter_missing", "method")
        for raw in [b"{not json", b"[1, 2]", b""]:
            bad = checkout.post(path, content=raw, headers={"Content-Type": "application/json"})
            assert _error(bad, 400)["code"] in {"invalid_json", "body_missing"}, raw
        sync = f"/payment-intents/{order['id']}/sync"
        bad_hash = checkout.post(sync, json={"txHash": "0x1234", "network": dev_platform.network})
        assert _error(bad_hash, 400)["param"] == "txHash"
        bad_network = checkout.post(sync, json={"txHash": "0x" + "ab" * 32, "network": "eip155:1"})
        assert _error(bad_network, 400)["param"] == "network"
        bad_status = checkout.post(f"/payment-intents/{order['id']}/transfer-status", json={"x": 1})
        assert _error(bad_status, 400)["param"] == "x"


def test_attempts_refuse_an_order_that_no_longer_awaits_payment(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key)
    with _merchant_api(dev_platform, key) as api:
        assert api.post(f"/payment-intents/{order['id']}/cancel").status_code == 200
    error = _error(_attempt(dev_platform, order["id"]), 409)
    assert error["code"] == "payment_intent_unexpected_state"
    assert _transfer_status(dev_platform, order["id"])["status"] == "canceled"


def test_a_buyers_transfer_is_seen_by_transfer_status(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key)
    deposit = _attempt(dev_platform, order["id"]).json()["depositAddress"]
    assert _transfer_status(dev_platform, order["id"])["status"] == "requires_payment"
    tx = _buyer_pays(dev_platform, key, deposit, 12_500_000)
    paid = _transfer_status(dev_platform, f"pi_{order['id']}")
    assert (paid["status"], paid["amountReceived"], paid["amountDue"], paid["txHash"]) == ("succeeded", "12.5", "0", tx)
    assert (paid["network"], paid["paidCurrency"]) == (dev_platform.network, "USDC")
    assert _error(_attempt(dev_platform, order["id"]), 409)["code"] == "payment_intent_unexpected_state"
    with _merchant_api(dev_platform, key) as api:
        seen = api.get(f"/payment-intents/{order['id']}").json()["paymentIntent"]
    assert (seen["status"], seen["txHash"]) == ("succeeded", tx)


def test_an_underpaid_order_asks_for_the_rest_in_the_same_coin(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, amount="10", acceptedCurrencies=["USDC", "EURC"])
    deposit = _attempt(dev_platform, order["id"]).json()["depositAddress"]
    _buyer_pays(dev_platform, key, deposit, 4_000_000)
    part = _transfer_status(dev_platform, order["id"])
    assert (part["status"], part["amountReceived"], part["amountDue"], part["exceptions"]) == (
        "requires_payment",
        "4",
        "6",
        ["underpaid"],
    )
    assert [c["currency"] for c in part["networks"][0]["currencies"]] == ["USDC"]
    rest = _attempt(dev_platform, order["id"]).json()
    assert (rest["depositAddress"], rest["amountDue"], rest["amountDueMinor"]) == (deposit, "6", "6000000")
    assert rest["paymentUri"].endswith("&uint256=6000000")
    assert _error(_attempt(dev_platform, order["id"], currency="EURC"), 409)["param"] == "currency"


def test_a_wallet_signs_the_attempts_typed_data_and_sync_reports_it(dev_platform: PlatformHarness) -> None:
    """The wallet method's EIP-712 parameters are exactly what a wallet signs (eth-account's
    ``eth_signTypedData_v4`` equivalent): the token accepts the signature and the order is paid."""
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, amount="3.25")
    attempt = _attempt(dev_platform, order["id"], method="wallet").json()
    deposit = attempt["depositAddress"]
    transaction = attempt["transaction"]
    assert transaction["to"] == dev_platform.usdc and transaction["chainId"] == hex(dev_platform.chain.chain_id)
    assert transaction["data"] == "0xa9059cbb" + deposit[2:].lower().rjust(64, "0") + format(3_250_000, "064x")
    typed = attempt["authorization"]
    assert typed["domain"]["verifyingContract"] == dev_platform.usdc
    assert typed["message"]["to"] == deposit and typed["message"]["value"] == "3250000"

    wallet = Account.create()
    dev_platform.fund(key, wallet.address, "3.25")
    typed["message"]["from"] = wallet.address
    signature = bytes(Account.sign_typed_data(wallet.key, full_message=typed).signature)
    message = typed["message"]
    data = encode_transfer_with_authorization(
        from_=wallet.address,
        to=deposit,
        value=int(message["value"]),
        valid_after=int(message["validAfter"]),
        valid_before=int(message["validBefore"]),
        nonce=bytes.fromhex(message["nonce"][2:]),
        signature=signature,
    )
    tx = dev_platform.server.call(lambda p: dev_platform.chain.relayer.send(dev_platform.usdc, data))
    with _public(dev_platform) as checkout:
        reply = checkout.post(
            f"/payment-intents/pi_{order['id']}/sync", json={"txHash": tx, "network": attempt["network"]}
        )
    assert reply.status_code == 200, reply.text
    synced = reply.json()
    assert (synced["status"], synced["amountReceived"], synced["txHash"]) == ("succeeded", "3.25", tx)


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
def test_the_page_shows_the_amount_the_deposit_address_and_a_qr_code(dev_platform: PlatformHarness, page: Page) -> None:
    _, key, _ = dev_platform.merchant("Acme Books")
    order = _order(dev_platform, key, expiresAt="2099-01-01T00:00:00Z")
    origin = _origin(dev_platform)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    response = page.goto(order["checkoutUrl"])
    assert response is not None and response.status == 200
    assert order["checkoutUrl"] == f"{origin}/checkout/pi_{order['id']}"
    expect(page.locator("h1")).to_have_text("12.50 USDC")
    expect(page.locator(".merchant")).to_have_text("Acme Books")
    expect(page.locator("#status")).to_have_text("Awaiting payment")
    deposit = _attempt(dev_platform, order["id"]).json()["depositAddress"]
    expect(page.locator("#deposit-address")).to_have_text(deposit)
    # one format for a shown amount: the copy field reads as the header does, beside the coin
    expect(page.locator("#transfer-amount")).to_have_text("12.50")
    assert page.locator("#transfer-amount ~ button.copy").get_attribute("data-copy") == "12.50"
    assert page.locator("#transfer-amount").locator("xpath=..").inner_text().startswith("12.50 USDC")
    qr = page.locator("#qr svg.qr-code")
    expect(qr).to_be_visible()
    assert qr.locator("path").count() >= 1
    countdown = page.locator("#countdown")
    expect(countdown).to_contain_text("days")  # the script replaced the expiry time with a countdown
    expect(countdown).not_to_contain_text("until")
    expect(page.locator("#cancel-link")).to_have_attribute("href", "https://shop.example/cart")
    assert requested and all(url.startswith(origin + "/checkout/") for url in requested), requested


@pytest.mark.browser
def test_polling_turns_the_page_to_paid_without_a_reload(dev_platform: PlatformHarness, page: Page) -> None:
    _, key, _ = dev_platform.merchant("Acme Books")
    order = _order(dev_platform, key, amount="2")
    page.goto(order["checkoutUrl"])
    deposit = page.locator("#deposit-address").inner_text()
    assert is_address(deposit)
    page.evaluate("window.stillTheSamePage = true")
    tx = _buyer_pays(dev_platform, key, deposit, 2_000_000)
    expect(page.locator("#status")).to_have_text("Paid", timeout=WAIT_MS)
    expect(page.locator("[data-panel=paid]")).to_be_visible()
    expect(page.locator("[data-panel=pay]")).to_be_hidden()
    expect(page.locator("#tx-hash")).to_have_text(tx)
    expect(page.locator("#success-link")).to_have_attribute("href", "https://shop.example/thanks")
    assert page.evaluate("window.stillTheSamePage") is True


_WALLET_SCRIPT = """
window.ethereum = {
  request: async ({method, params}) => {
    const answer = await window.testWallet(method, params || []);
    if (answer && answer.rpcError) {
      throw Object.assign(new Error(answer.rpcError.message), {code: answer.rpcError.code});
    }
    return answer;
  },
};
"""


@pytest.mark.browser
def test_a_wallet_that_cannot_sign_typed_data_sends_the_transfer_and_the_page_syncs_it(
    dev_platform: PlatformHarness, page: Page
) -> None:
    """A stand-in for an EIP-1193 wallet (the browser's ``window.ethereum``) answers the page's requests
    from Python. It cannot sign typed data (4200, as EIP-1193 says for an unsupported method), so the
    page has it send the token transfer instead (the path USDT always takes): it moves the same coins
    from its funded account to the same address on the dev chain, as an EIP-3009 transfer (its account
    has no gas), and answers that transaction's hash. The gasless path is in tests/browser."""
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, amount="1.5", paymentMethods={"wallet": True, "transfer": False})
    buyer = new_private_key()
    dev_platform.fund(key, address_of(buyer), "1.5")
    asked: list[str] = []
    sent: list[str] = []

    def wallet(method: str, params: list[Any]) -> Any:
        asked.append(method)
        if method == "eth_requestAccounts":
            return [address_of(buyer)]
        if method == "eth_chainId":
            return hex(dev_platform.chain.chain_id)
        if method == "eth_signTypedData_v4":
            return {"rpcError": {"code": 4200, "message": "The wallet does not support this method"}}
        assert method == "eth_sendTransaction", method
        [tx] = params
        data = tx["data"]
        assert tx["to"] == dev_platform.usdc and data.startswith("0xa9059cbb")
        to, amount = to_checksum_address("0x" + data[34:74]), int(data[74:], 16)
        sent.append(_buyer_sends(dev_platform, buyer, to, amount))
        return sent[-1]

    page.expose_function("testWallet", wallet)
    page.add_init_script(_WALLET_SCRIPT)
    page.goto(order["checkoutUrl"])
    expect(page.locator("#transfer")).to_have_count(0)  # this order takes wallet payments only
    page.click("#wallet-pay")
    expect(page.locator("#status")).to_have_text("Paid", timeout=WAIT_MS)
    assert asked == ["eth_requestAccounts", "eth_chainId", "eth_signTypedData_v4", "eth_sendTransaction"]
    expect(page.locator("#tx-hash")).to_have_text(sent[0])
    assert dev_platform.balance(address_of(buyer)) == 0


@pytest.mark.browser
def test_with_a_wallet_the_transfer_panel_starts_as_the_merchant_asks(
    dev_platform: PlatformHarness, page: Page
) -> None:
    _, key, _ = dev_platform.merchant()
    page.add_init_script(_WALLET_SCRIPT)  # a wallet is present (never asked anything here)
    for default_open in [False, True]:
        methods = {"wallet": True, "transfer": True, "transferDefaultOpen": default_open}
        page.goto(_order(dev_platform, key, paymentMethods=methods)["checkoutUrl"])
        expect(page.locator("#wallet-pay")).to_be_visible()
        expect(page.locator("#transfer-title")).to_have_text("Or pay by transfer")
        assert page.eval_on_selector("#transfer", "details => details.open") is default_open
        address = page.locator("#deposit-address")
        if default_open:
            expect(address).to_be_visible()
        else:
            expect(address).to_be_hidden()


@pytest.mark.browser
def test_a_wallet_only_order_says_when_the_browser_has_no_wallet(dev_platform: PlatformHarness, page: Page) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, paymentMethods={"wallet": True, "transfer": False})
    page.goto(order["checkoutUrl"])
    expect(page.locator("#wallet-message")).to_contain_text("No browser wallet was found")
    expect(page.locator("#wallet-pay")).to_be_disabled()


@pytest.mark.browser
def test_the_coin_picker_shows_the_chosen_coin(dev_platform: PlatformHarness, page: Page) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key, acceptedCurrencies=["USDC", "EURC"])
    page.goto(order["checkoutUrl"])
    eurc = dev_platform.chain.network.assets["EURC"].address
    page.select_option("#option", f"{dev_platform.network}/EURC")
    expect(page.locator("#transfer")).to_contain_text(
        f"Send 12.50 EURC on {dev_platform.chain.network.name}", timeout=WAIT_MS
    )
    expect(page.locator("#transfer")).to_contain_text(eurc)
    assert page.url.startswith(order["checkoutUrl"] + "?option=")


@pytest.mark.browser
def test_legacy_links_render_the_same_page_without_a_redirect(dev_platform: PlatformHarness, page: Page) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key)
    base = _origin(dev_platform) + "/checkout"
    deposit = _attempt(dev_platform, order["id"]).json()["depositAddress"]
    legacy = [
        f"{base}/payment-intents/{order['id']}",
        f"{base}/paylink/pi_{order['id']}",
        f"{base}/paylink/{order['id']}",
    ]
    with httpx.Client(timeout=60, follow_redirects=False) as client:
        for url in [order["checkoutUrl"], *legacy]:
            reply = client.get(url)
            assert reply.status_code == 200, url
            assert reply.headers["content-type"].startswith("text/html")
            assert deposit in reply.text, url
    for url in legacy[:2]:
        response = page.goto(url)
        assert response is not None and response.status == 200 and response.request.redirected_from is None
        assert page.url == url
        expect(page.locator("#deposit-address")).to_have_text(deposit)
        expect(page.locator("#qr svg")).to_be_visible()
        # the stylesheet and script load from the deeper path too
        assert page.evaluate("getComputedStyle(document.querySelector('.card')).maxWidth") == "512px"
        expect(page.locator("#option-submit")).to_have_count(0)  # one coin: no picker


@pytest.mark.browser
def test_a_cancelled_order_is_no_longer_payable_on_the_page(dev_platform: PlatformHarness, page: Page) -> None:
    _, key, _ = dev_platform.merchant()
    order = _order(dev_platform, key)
    with _merchant_api(dev_platform, key) as api:
        assert api.post(f"/payment-intents/{order['id']}/cancel").status_code == 200
    response = page.goto(order["checkoutUrl"])
    assert response is not None and response.status == 200
    expect(page.locator("#status")).to_have_text("Cancelled")
    expect(page.locator("[data-panel=closed]")).to_contain_text("The merchant has cancelled this payment.")
    expect(page.locator("[data-panel=pay]")).to_be_hidden()
    expect(page.locator("#deposit-address")).to_have_count(0)


@pytest.mark.browser
def test_unknown_ids_show_the_not_found_page(dev_platform: PlatformHarness, page: Page) -> None:
    base = _origin(dev_platform) + "/checkout"
    unknown = uuid.uuid4()
    for path in [
        f"/pi_{unknown}",
        f"/payment-intents/{unknown}",
        f"/paylink/{unknown}",
        "/paylink/summer-sale",
        "/pi_x",
    ]:
        response = page.goto(base + path)
        assert response is not None and response.status == 404, path
        expect(page.locator("h1")).to_have_text("Payment not found")
        assert page.url == base + path


def test_the_page_shows_every_amount_in_one_format(dev_platform: PlatformHarness) -> None:
    """The API answers an order's amount at the scale it was sent (``"9.900"``); its page shows each
    amount one way: the header, the title, the transfer's amount and what Copy copies all read
    ``9.90`` beside the coin (``0.125`` keeps the decimals it has)."""
    _, key, _ = dev_platform.merchant()
    with httpx.Client(timeout=30) as client:
        for sent, shown in [("9.900", "9.90"), ("3.5", "3.50"), ("0.125", "0.125")]:
            order = _order(dev_platform, key, amount=sent)
            assert order["amount"] == sent
            html = client.get(order["checkoutUrl"]).text
            assert f'<span id="order-amount">{shown}</span> <span class="coin">USDC</span>' in html, sent
            assert f"<title>Pay {shown} USDC to " in html
            assert f'<code id="transfer-amount">{shown}</code> USDC' in html
            assert f'data-copy="{shown}"' in html
