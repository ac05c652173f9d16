"""The examples, run for real. First in-process against the platform fixtures (on
SQLite): the merchant quickstart (an order created through the typed client, paid in the sandbox,
reported by verified webhooks and refunded, with the balance back where it was), the same over plain
HTTP, payment links, an agent paying an order. Then each example as its docstring says to run it, a
subprocess started from the repository root and from another folder (by the file's path), against a
real ``x402mw platform serve`` and, for the scripts that have one, against their embedded platform:
the sellers answer a paid request made by ``examples/agent.py``, which names the coin by its symbol."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from tests.harness import PlatformHarness, Serve, serving
from tests.waiting import eventually
from x402mw.client import Wallet, X402Auth
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.devchain import DEV_CHAIN_ID
from x402mw.platform.server import free_port

EXAMPLES = Path(__file__).parents[2] / "examples"


def _example(name: str = "merchant_quickstart") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_quickstart_story(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("Quickstart shop")
    said: list[str] = []
    story = _example().run(dev_platform.url, key, say=said.append)
    paid, refund = story["paid"], story["refund"]
    assert paid.status == "succeeded" and paid.tx_hash and paid.paid_at is not None
    assert refund.status == "completed" and refund.tx_hash and refund.destination == paid.payer
    assert story["events"] == {"payment_intent.succeeded", "refund.completed"}
    before, after = story["balances"]
    assert before == after
    assert dev_platform.balance(paid.payer) == 12_500_000  # the refund reached the payer
    assert said[0].startswith("1. order ") and f"/checkout/pi_{paid.id}" in said[0]
    assert said[0].split(" the buyer pays at ")[1] == paid.checkout_url
    assert paid.checkout_url.startswith(dev_platform.platform.settings.checkout_url_base)
    assert dev_platform.url.removesuffix("/v1") in paid.checkout_url


def test_the_same_story_over_plain_http(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("HTTP shop")
    said: list[str] = []
    story = _example("merchant_http").run(dev_platform.url, key, say=said.append)
    paid, refund = story["paid"], story["refund"]
    assert paid["status"] == "succeeded" and paid["txHash"] and paid["paidAt"]
    assert refund["status"] == "completed" and refund["destination"] == paid["payer"]
    assert story["events"] == {"payment_intent.succeeded", "refund.completed"}  # verified by construct_event
    assert dev_platform.balance(paid["payer"]) == 8_000_000
    assert said[0].split(" the buyer pays at ")[1] == paid["checkoutUrl"]


def test_the_payment_links_example(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("Links shop")
    said: list[str] = []
    story = _example("payment_links").run(dev_platform.url, key, say=said.append)
    link, orders = story["link"], story["orders"]
    assert link.active is False and len({order.id for order in orders}) == 2
    assert all(order.status == "succeeded" and order.payment_link_id == link.id for order in orders)
    assert "reloading gave the same" in said[1] and "reloading gave the same" in said[2]


def test_the_agent_pays_an_order_example(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant("Agent shop")
    said: list[str] = []
    story = _example("agent_pays_order").run(dev_platform.url, key, say=said.append)
    assert story["order"].status == "succeeded" and story["paid"].status_code == 200
    assert story["again"].status_code == 409 and len(story["payments"]) == 1
    assert story["payments"][0].verified is True
    assert story["payments"][0].symbol == "USDC"  # the order's offer names its coin (extra.currency)


# -- each example as its docstring says, from the repository root and from another folder ----------

ROOT = EXAMPLES.parent
NETWORK = f"eip155:{DEV_CHAIN_ID}"


class Shop:
    """A ``serve`` with a merchant, its test key, an agent endpoint at 0.01 USDC and a funded agent."""

    def __init__(self, serve: Serve, elsewhere: Path) -> None:
        self.serve = serve
        self.elsewhere = elsewhere  # a folder that is not the repository's
        merchant = serve.cli("merchants", "create", "--name", "Examples Co")
        self.key = serve.cli("keys", "create", "--merchant", merchant["id"])["key"]
        self.agent_key = "0x" + new_private_key().hex()
        self.payout = address_of(new_private_key())
        with self.api() as api:
            reply = api.post(
                "/agent/endpoints",
                json={
                    "name": "Weather",
                    "resourceUrl": "http://127.0.0.1/weather",
                    "chainId": DEV_CHAIN_ID,
                    "currency": "USDC",
                    "payoutAddress": self.payout,
                    "pricingMode": "fixed",
                    "amountMinor": "10000",
                },
            )
            assert reply.status_code == 201, reply.text
            self.endpoint = reply.json()["endpoint"]["id"]
            body = {"network": NETWORK, "currency": "USDC", "address": address_of(bytes.fromhex(self.agent_key[2:]))}
            funded = api.post("/sandbox/faucet", json=body | {"amount": "1"})
            assert funded.status_code == 200, funded.text

    def new_endpoint(self, resource_url: str = "http://127.0.0.1/weather") -> str:
        """Another agent endpoint at 0.01 USDC, for a test that changes it or needs its payments alone."""
        with self.api() as api:
            reply = api.post(
                "/agent/endpoints",
                json={
                    "name": "Weather " + resource_url,
                    "resourceUrl": resource_url,
                    "chainId": DEV_CHAIN_ID,
                    "currency": "USDC",
                    "payoutAddress": self.payout,
                    "pricingMode": "fixed",
                    "amountMinor": "10000",
                },
            )
        assert reply.status_code == 201, reply.text
        return str(reply.json()["endpoint"]["id"])

    def new_agent(self) -> str:
        """A fresh agent key with 1 USDC: one that has paid nothing yet."""
        key = "0x" + new_private_key().hex()
        body = {"network": NETWORK, "currency": "USDC", "address": address_of(bytes.fromhex(key[2:])), "amount": "1"}
        with self.api() as api:
            funded = api.post("/sandbox/faucet", json=body)
        assert funded.status_code == 200, funded.text
        return key

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.serve.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=60)

    def env(self, **more: str) -> dict[str, str]:
        """The environment the docstrings name: one variable for the platform, one for the key."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("X402MW_") or k == "X402MW_ANVIL"}
        return base | {"X402MW_PLATFORM_URL": self.serve.url, "X402MW_API_KEY": self.key} | more

    def cwd(self, from_root: bool) -> Path:
        return ROOT if from_root else self.elsewhere


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    base = tmp_path_factory.mktemp("examples")
    metrics = str(free_port())
    with serving(base / "data", X402MW_METRICS_PORT=metrics) as serve:
        (base / "elsewhere").mkdir()
        yield Shop(serve, base / "elsewhere")


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 240) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command} in {cwd}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@contextlib.contextmanager
def _server(
    command: list[str], cwd: Path, env: dict[str, str], path: str = "/health", port: int | None = None
) -> Iterator[str]:
    """An example server started as its docstring says, on a free ``PORT`` (or ``port``); its URL once
    ``path`` answers (any status)."""
    port = port or free_port()
    with subprocess.Popen(
        command + (["127.0.0.1:" + str(port), "--noreload"] if "runserver" in command else []),
        cwd=cwd,
        env=env | {"PORT": str(port)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Django's runserver, say, may start children: all end with the group
    ) as process:
        try:
            url = f"http://127.0.0.1:{port}{path}"
            eventually(
                lambda: process.poll() is not None or httpx.get(url, timeout=2), what=f"{command} to answer {url}"
            )
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            yield f"http://127.0.0.1:{port}"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 15)
            process.wait(timeout=30)


def _agent_pays(shop: Shop, url: str, cwd: Path) -> str:
    """``examples/agent.py URL`` as its docstring says; what it printed."""
    env = shop.env(X402MW_PRIVATE_KEY=shop.agent_key, X402MW_RECEIPT_SIGNER=_receipt_signer(shop))
    said = _run([sys.executable, str(EXAMPLES / "agent.py"), url], cwd, env)
    assert "HTTP 200" in said, said
    assert re.search(rf"paid 0\.01 USDC on {NETWORK}, transaction 0x[0-9a-f]{{64}}", said), said
    assert "receipt verified: True" in said
    # and `x402mw pay`, which names the coin too
    paid = json.loads(_run([sys.executable, "-m", "x402mw", "pay", url, "--json"], cwd, env))
    assert paid["status"] == 200 and paid["payment"]["asset"] == "USDC", paid
    assert paid["payment"]["amount"] == "0.01" and paid["payment"]["receiptVerified"] is True
    return said


def _receipt_signer(shop: Shop) -> str:
    """The platform's receipt address, from the key serve keeps in its data dir."""
    return address_of(bytes.fromhex((shop.serve.data_dir / "receipt.key").read_text().strip().removeprefix("0x")))


SELLERS = [
    ("flask_seller", ["python", "examples/flask_seller.py"]),
    ("starlette_seller", ["python", "examples/starlette_seller.py"]),
    ("fastapi_seller", ["python", "examples/fastapi_seller.py"]),
    ("django_seller", ["python", "examples/django_seller.py", "runserver"]),
]


@pytest.mark.parametrize("from_root", [True, False], ids=["from-root", "from-elsewhere"])
@pytest.mark.parametrize(("name", "command"), SELLERS, ids=[name for name, _ in SELLERS])
def test_a_seller_example_is_paid_by_the_agent_example(
    shop: Shop, name: str, command: list[str], from_root: bool
) -> None:
    argv = [sys.executable, str(EXAMPLES / f"{name}.py"), *command[2:]]
    env = shop.env(X402MW_ENDPOINT_ID=shop.endpoint, X402MW_DYNAMIC_ENDPOINT_ID=shop.endpoint)
    with _server(argv, shop.cwd(from_root), env) as url:
        assert httpx.get(url + "/weather", timeout=30).status_code == 402
        _agent_pays(shop, url + "/weather", shop.cwd(not from_root))


@pytest.mark.parametrize("from_root", [True, False], ids=["from-root", "from-elsewhere"])
def test_the_x402_sdk_seller_example_names_the_token_on_the_dev_chain(shop: Shop, from_root: bool) -> None:
    env = shop.env(X402MW_PAY_TO=shop.payout, X402MW_TOKEN="USDC", X402MW_PRICE="0.01")
    with _server([sys.executable, str(EXAMPLES / "x402_sdk_seller.py")], shop.cwd(from_root), env, "/docs") as url:
        unpaid = httpx.get(url + "/weather", timeout=30)
        assert unpaid.status_code == 402, unpaid.text
        _agent_pays(shop, url + "/weather", shop.cwd(not from_root))
    # a token the platform does not have is refused at start, saying which it has
    refused = subprocess.run(
        [sys.executable, str(EXAMPLES / "x402_sdk_seller.py")],
        cwd=shop.cwd(from_root),
        env=env | {"X402MW_TOKEN": "DAI"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0 and "no DAI on" in refused.stderr and "USDC" in refused.stderr


SCRIPTS = ["merchant_quickstart", "merchant_http", "payment_links", "agent_pays_order", "reports"]


@pytest.mark.parametrize("embedded", [False, True], ids=["against-serve", "embedded"])
@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_example_runs_as_its_docstring_says(shop: Shop, name: str, embedded: bool) -> None:
    # against serve from the root, the embedded platform (no key) from another folder
    env = shop.env()
    if embedded:
        del env["X402MW_API_KEY"], env["X402MW_PLATFORM_URL"]
    said = _run([sys.executable, str(EXAMPLES / f"{name}.py")], shop.cwd(not embedded), env)
    assert said.strip(), said
    if not embedded:
        assert shop.serve.url.removesuffix("/v1") in said, said  # it used the platform it was given


def test_the_webhook_subscription_checkout_and_metrics_examples_start_anywhere(shop: Shop) -> None:
    for name, path in [("webhook_receiver", "/"), ("subscriptions_app", "/"), ("checkout_merchant", "/")]:
        for from_root in (True, False):
            with _server([sys.executable, str(EXAMPLES / f"{name}.py")], shop.cwd(from_root), shop.env(), path) as url:
                assert httpx.get(url + path, timeout=30).status_code < 500
    metrics = f"http://127.0.0.1:{shop.serve.environment['X402MW_METRICS_PORT']}/metrics"
    for from_root in (True, False):
        said = _run([sys.executable, str(EXAMPLES / "metrics_summary.py"), metrics], shop.cwd(from_root), shop.env())
        assert "settlement" in said.lower(), said


# -- the examples of sign-in-with-x, the paywall, discovery and payment identifiers -------------------


def test_the_sign_in_example_lets_a_payer_back_in_without_paying(shop: Shop) -> None:
    env = shop.env(X402MW_ENDPOINT_ID=shop.new_endpoint())
    with _server([sys.executable, str(EXAMPLES / "signin_seller.py")], shop.elsewhere, env) as url:
        unpaid = httpx.get(url + "/report", timeout=30)
        assert unpaid.status_code == 402 and "sign-in-with-x" in unpaid.json()["extensions"]
        auth = X402Auth(Wallet(shop.new_agent()), max_amount="0.10")
        with httpx.Client(auth=auth, timeout=60) as client:
            first, second = client.get(url + "/report"), client.get(url + "/report")
    assert first.status_code == 200 and first.json()["signedIn"] is False, first.text
    assert second.status_code == 200 and second.json()["signedIn"] is True, second.text
    assert len(auth.payments) == 1 and auth.signed_in == 1  # paid once, let back in once


def test_the_paywall_example_shows_its_brand_to_a_browser(shop: Shop) -> None:
    env = shop.env(X402MW_ENDPOINT_ID=shop.endpoint)
    with _server([sys.executable, str(EXAMPLES / "paywall_seller.py")], shop.elsewhere, env) as url:
        page = httpx.get(url + "/forecast", headers={"Accept": "text/html,*/*;q=0.8"}, timeout=30)
        assert page.status_code == 402 and page.headers["content-type"].startswith("text/html")
        assert "PAYMENT-REQUIRED" in page.headers
        for shown in ("Fjord Weather", "Forecasts by the fjord", "/static/logo.svg", "Pay with wallet"):
            assert shown in page.text, shown
        assert httpx.get(url + "/static/logo.svg", timeout=30).headers["content-type"].startswith("image/svg+xml")
        agents = httpx.get(url + "/forecast", timeout=30)
        assert agents.status_code == 402 and agents.headers["content-type"].startswith("application/json")
        _agent_pays(shop, url + "/forecast", shop.elsewhere)


def test_the_discovery_example_declares_its_routes_and_is_catalogued(shop: Shop) -> None:
    port = free_port()
    endpoint = shop.new_endpoint(f"http://127.0.0.1:{port}/weather")
    env = shop.env(X402MW_ENDPOINT_ID=endpoint)
    with _server([sys.executable, str(EXAMPLES / "discovery_seller.py")], shop.elsewhere, env, port=port) as url:
        unpaid = httpx.get(url + "/weather", params={"city": "Oslo"}, timeout=30)
        assert unpaid.status_code == 402
        bazaar = unpaid.json()["extensions"]["bazaar"]
        assert bazaar["info"]["input"]["queryParams"] == {"city": "Paris"}, bazaar
        listed = httpx.get(url + "/.well-known/x402", timeout=30).json()
        assert {item["input"]["routeTemplate"] for item in listed["items"]} == {"/weather", "/translate"}
        with shop.api() as api:
            assert api.patch(f"/agent/endpoints/{endpoint}", json={"discoverable": True}).status_code == 200
        _agent_pays(shop, url + "/weather?city=Oslo", shop.elsewhere)
    catalogue = f"{shop.serve.url}/x402/discovery/resources"
    found = eventually(
        lambda: [i for i in httpx.get(catalogue, timeout=30).json()["items"] if str(port) in i["resource"]],
        what="the discovery example's route in the platform's catalogue",
    )
    assert found[0]["resource"].startswith(f"http://127.0.0.1:{port}/weather"), found


def test_the_payment_identifier_example_is_answered_once_and_charged_once(shop: Shop) -> None:
    endpoint = shop.new_endpoint()
    env = shop.env(X402MW_ENDPOINT_ID=endpoint)
    with _server([sys.executable, str(EXAMPLES / "starlette_seller.py")], shop.elsewhere, env) as url:
        agent = shop.env(X402MW_PRIVATE_KEY=shop.new_agent())
        said = _run([sys.executable, str(EXAMPLES / "payment_identifier_replay.py"), url + "/weather"], ROOT, agent)
    assert "charged once: yes" in said and "409, payment_identifier_conflict" in said, said
    transactions = re.findall(r"transaction (0x[0-9a-f]{64})", said)
    assert len(transactions) == 2 and transactions[0] == transactions[1], said
    with shop.api() as api:
        payments = [p for p in api.get("/agent/payments").json()["data"] if p["endpointId"] == endpoint]
    assert [p["status"] for p in payments] == ["settled"]  # one payment, whatever was sent again


# -- the smaller defects: each example says what it does and works from any folder ------------------


def test_the_fastapi_example_without_a_dynamic_endpoint_sells_the_report_at_the_fixed_price(shop: Shop) -> None:
    env = shop.env(X402MW_ENDPOINT_ID=shop.endpoint)
    assert "X402MW_DYNAMIC_ENDPOINT_ID" not in env
    with _server([sys.executable, str(EXAMPLES / "fastapi_seller.py")], shop.elsewhere, env) as url:
        unpaid = httpx.get(url + "/report", params={"days": "3"}, timeout=30)
        assert unpaid.status_code == 402
        assert [offer["amount"] for offer in unpaid.json()["accepts"]] == ["10000"]  # the endpoint's, not 3 days'
        _agent_pays(shop, url + "/report?days=3", shop.elsewhere)


def test_the_fastapi_example_says_so_when_it_has_no_dynamic_endpoint(shop: Shop) -> None:
    env = shop.env(X402MW_ENDPOINT_ID=shop.endpoint, PORT=str(free_port()))
    with subprocess.Popen(
        [sys.executable, str(EXAMPLES / "fastapi_seller.py")],
        cwd=shop.elsewhere,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            assert process.stderr is not None
            first = process.stderr.readline()
        finally:
            os.killpg(process.pid, 15)
            process.wait(timeout=30)
    assert "X402MW_DYNAMIC_ENDPOINT_ID is not set" in first and "fixed price" in first, first


def test_the_webhook_receiver_s_docstring_names_the_route_it_serves(shop: Shop) -> None:
    source = (EXAMPLES / "webhook_receiver.py").read_text()
    module_doc = ast.get_docstring(ast.parse(source)) or ""
    routes = re.findall(r'Route\("([^"]+)"', source)
    assert routes and all(route in module_doc for route in routes), (routes, module_doc)
    with _server([sys.executable, str(EXAMPLES / "webhook_receiver.py")], shop.elsewhere, shop.env(), "/") as url:
        unsigned = httpx.post(url + routes[0], content=b"{}", timeout=30)
    assert unsigned.status_code == 400  # the route is there, and refuses what is not signed


def test_the_django_example_is_served_by_uvicorn_from_any_folder(shop: Shop) -> None:
    module_doc = ast.get_docstring(ast.parse((EXAMPLES / "django_seller.py").read_text())) or ""
    assert "python examples/django_seller.py asgi" in module_doc
    env = shop.env(X402MW_ENDPOINT_ID=shop.endpoint)
    with _server([sys.executable, str(EXAMPLES / "django_seller.py"), "asgi"], shop.elsewhere, env) as url:
        assert httpx.get(url + "/weather", timeout=30).status_code == 402
        _agent_pays(shop, url + "/weather", shop.elsewhere)


def test_the_agent_says_in_one_line_that_a_server_is_down_or_does_not_start(tmp_path: Path) -> None:
    env = {**os.environ, "X402MW_PRIVATE_KEY": "0x" + "11" * 32}
    down = _mcp_run(_agent(f"http://127.0.0.1:{free_port()}/mcp", "Lisbon"), tmp_path, env)
    assert down.returncode == 1 and down.stdout == ""
    assert len(down.stderr.strip().splitlines()) == 1 and "cannot reach the MCP server" in down.stderr, down.stderr
    for broken in [f"{sys.executable} {tmp_path / 'missing.py'}", "no-such-command --stdio"]:
        failed = _mcp_run(_agent(broken, "Lisbon", stdio=True), tmp_path, env)
        assert failed.returncode == 1 and failed.stdout == ""
        assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr
        assert "did not answer over stdio" in failed.stderr, failed.stderr


def _agent(server: str, tool_argument: str, *, stdio: bool = False) -> list[str]:
    call = [server, "forecast", json.dumps({"city": tool_argument})]
    return [sys.executable, str(EXAMPLES / "mcp_agent.py"), *(["--stdio"] if stdio else []), *call]


def _mcp_run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
