"""Browser fixtures: Debian's Chromium through playwright, with its popup blocker on (as a buyer's
browser has it), every request the pages make recorded, screenshots kept under
``build/screenshots/<test>/``, axe-core for accessibility, and a browser wallet (EIP-1193) whose
answers come from a Python function that signs with a test key.

The shop is ``examples/checkout_merchant.py`` served by uvicorn against the test platform.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import secrets
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from eth_account import Account
from eth_account.messages import encode_defunct
from playwright.sync_api import Browser, BrowserContext, Frame, Page, sync_playwright

from tests.harness import PlatformHarness, serve_app
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.services.deposits import authorization_call

ROOT = Path(__file__).parents[2]
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
# playwright turns Chromium's popup blocker off by default; a buyer's browser has it on.
KEEP_POPUP_BLOCKER = ["--disable-popup-blocking"]
AXE = Path(os.environ.get("X402MW_AXE") or ROOT / ".tools/node_modules/axe-core/axe.min.js")
SCREENSHOTS = ROOT / "build" / "screenshots"
WAIT_MS = 30_000  # for what pages do by themselves (polling, the chain): a bound, not a measurement


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium for one test module: a module's playwright stops before the next module's starts
    (one sync playwright per thread; tests/integration/test_checkout.py has its own)."""
    if not CHROMIUM.exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM}: `make test` installs it (apt-get install -y chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, ignore_default_args=KEEP_POPUP_BLOCKER
        )
        yield launched
        launched.close()


@dataclass
class Browsing:
    """One buyer's browser context: its pages, every request they made, and screenshots by name."""

    context: BrowserContext
    page: Page
    shots: Path
    requests: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)

    def shoot(self, name: str, page: Page | None = None) -> Path:
        """Keep a screenshot of ``page`` (default: the main page) as ``<test>/<name>.png``."""
        path = self.shots / f"{name}.png"
        (page or self.page).screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 0
        return path

    def origins(self) -> set[str]:
        return {origin_of(url) for url in self.requests if not url.startswith(("data:", "about:", "blob:"))}


@pytest.fixture
def browsing(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Browsing]:
    context = browser.new_context()
    context.set_default_timeout(WAIT_MS)
    shots = SCREENSHOTS / re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name)
    shots.mkdir(parents=True, exist_ok=True)
    page = context.new_page()
    seen = Browsing(context, page, shots)
    context.on("request", lambda r: seen.requests.append(r.url))
    context.on("page", lambda p: p.on("console", lambda m: seen.console.append(m.text)))
    page.on("console", lambda m: seen.console.append(m.text))
    yield seen
    context.close()


def platform_origin(harness: PlatformHarness) -> str:
    return harness.url.removesuffix("/v1")


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@dataclass
class Shop:
    """The example shop, served against the test platform for one merchant."""

    url: str
    api_key: str
    harness: PlatformHarness

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.harness.url, headers={"Authorization": f"Bearer {self.api_key}"}, timeout=60)

    def balance(self, currency: str = "USDC") -> str:
        with self.api() as api:
            reply = api.get("/balances")
        assert reply.status_code == 200, reply.text
        for row in reply.json()["data"]:
            if row["currency"] == currency:
                return str(row["available"])
        return "0"


@pytest.fixture
def shop(dev_platform: PlatformHarness) -> Iterator[Shop]:
    example = _example("checkout_merchant")
    _, key, _ = dev_platform.merchant("Corner Shop")
    app = example.create_app(dev_platform.url, key, example.checkout_js_url(dev_platform.url))
    with serve_app(app) as url:
        yield Shop(url, key, dev_platform)


def new_order(harness: PlatformHarness, api_key: str, **fields: Any) -> dict[str, Any]:
    body = {
        "orderId": f"o-{uuid.uuid4()}",
        "amount": "4.20",
        "currency": "USDC",
        "successUrl": "https://shop.example/thanks",
        "cancelUrl": "https://shop.example/cart",
        **fields,
    }
    with httpx.Client(base_url=harness.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=60) as api:
        reply = api.post("/payment-intents", json=body)
    assert reply.status_code == 201, reply.text
    order: dict[str, Any] = reply.json()["paymentIntent"]
    return order


def buyer_transfers(harness: PlatformHarness, api_key: str, to: str, amount_minor: int) -> str:
    """A buyer funded by the faucet sends ``amount_minor`` USDC to ``to`` (from any wallet or exchange,
    as the transfer panel says); answers the transaction hash once it is mined."""
    buyer = new_private_key()
    harness.fund(api_key, address_of(buyer), str(Decimal(amount_minor).scaleb(-6)))
    chain = harness.chain
    data, _, _ = authorization_call(chain, harness.usdc, buyer, to, amount_minor, secrets.token_bytes(32))

    async def send(platform: Any) -> str:
        tx = await chain.relayer.send(harness.usdc, data)
        await chain.wait_for(tx)
        return tx

    return harness.server.call(send)


_AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => n.target.join(" ")).slice(0, 5),
  }));
}"""


def axe_violations(target: Page | Frame) -> list[dict[str, Any]]:
    """Run axe-core (from npm, injected into the page or frame) and answer its serious and critical
    violations. Reusable for any page: the hosted checkout, the panel's frame, the subscribe page."""
    if not AXE.exists():
        pytest.fail(f"axe-core is missing at {AXE}: `make test` installs it (npm axe-core into .tools/)")
    # Through the DevTools protocol, which the page's Content-Security-Policy does not govern (a
    # <script> tag would be refused by script-src 'self', rightly).
    if not target.evaluate("typeof window.axe === 'object'"):
        target.evaluate(_axe_source())
    found: list[dict[str, Any]] = target.evaluate(_AXE_RUN)
    return [v for v in found if v["impact"] in ("serious", "critical")]


@functools.cache
def _axe_source() -> str:
    return AXE.read_text() + "\n;true"


def assert_accessible(target: Page | Frame) -> None:
    serious = axe_violations(target)
    assert not serious, json.dumps(serious, indent=1)


WALLET_SCRIPT = """
window.ethereum = {
  isBrowserWallet: true,
  request: async ({method, params}) => {
    const answer = await window.testWallet(method, params || []);
    if (answer && answer.rpcError) {
      throw Object.assign(new Error(answer.rpcError.message), {code: answer.rpcError.code});
    }
    return answer;
  },
};
"""


@dataclass
class BrowserWallet:
    """A browser wallet holding one test key: it signs typed data (``eth_signTypedData_v4``) and
    messages (``personal_sign``) with eth-account, and refuses to send transactions (its account
    has no gas)."""

    chain_id: int
    account: Any = field(default_factory=Account.create)
    asked: list[str] = field(default_factory=list)
    signed: list[dict[str, Any]] = field(default_factory=list)
    wallet_chain: int | None = None

    @property
    def address(self) -> str:
        return str(self.account.address)

    def __call__(self, method: str, params: list[Any]) -> Any:
        self.asked.append(method)
        if method in ("eth_requestAccounts", "eth_accounts"):
            return [self.address]
        if method == "eth_chainId":
            return hex(self.wallet_chain or self.chain_id)
        if method == "wallet_switchEthereumChain":
            wanted = int(params[0]["chainId"], 16)
            if wanted != self.chain_id:
                return {"rpcError": {"code": 4902, "message": "Unrecognized chain"}}
            self.wallet_chain = wanted
            return None
        if method == "personal_sign":  # EIP-191, as sign-in-with-x asks
            data, signer = params
            assert signer.lower() == self.address.lower()
            self.signed.append({"personal_sign": data})
            signature = Account.sign_message(encode_defunct(hexstr=data), self.account.key).signature
            return "0x" + bytes(signature).hex()
        if method == "eth_signTypedData_v4":
            signer, text = params
            assert signer == self.address
            typed = json.loads(text)
            self.signed.append(typed)
            signature = Account.sign_typed_data(self.account.key, full_message=typed).signature
            return "0x" + bytes(signature).hex()
        return {"rpcError": {"code": 4200, "message": f"{method} is not supported by this wallet"}}

    def install(self, page: Page) -> None:
        """Give ``page`` and every frame in it this wallet as ``window.ethereum``."""
        page.expose_function("testWallet", self)
        page.add_init_script(WALLET_SCRIPT)


@pytest.fixture
def wallet_factory(dev_platform: PlatformHarness) -> Callable[[], BrowserWallet]:
    return lambda: BrowserWallet(dev_platform.chain.chain_id)
