"""The gateway (`x402mw gateway`) in front of a real upstream in another process, selling its routes
through the real platform on the dev chain: free routes pass through untouched, paid ones are held,
forwarded and settled only when the upstream answered successfully."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from tests.gateway_fixtures import ROOT, Gateway, running_gateway, upstream_process
from tests.harness import PlatformHarness, sqlite_only
from tests.waiting import eventually
from x402mw.client import X402Auth
from x402mw.platform.server import free_port

pytestmark = sqlite_only


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with upstream_process() as url:
        yield url


@pytest.fixture(scope="module")
def gateway(dev_platform: PlatformHarness, upstream: str) -> Iterator[Gateway]:
    deployment = dev_platform.deploy()
    with running_gateway(dev_platform, upstream, deployment) as running:
        yield running


def _agent(gateway: Gateway, **options: object) -> httpx.Client:
    auth = X402Auth(gateway.deployment.agent, max_amount="0.10", **options)  # type: ignore[arg-type]
    return httpx.Client(base_url=gateway.url, auth=auth, timeout=60)


def _balance(platform: PlatformHarness, gateway: Gateway) -> int:
    return platform.balance(gateway.deployment.payout)


def _settlement(response: httpx.Response) -> dict[str, object]:
    decoded: dict[str, object] = json.loads(base64.b64decode(response.headers["PAYMENT-RESPONSE"]))
    return decoded


def test_a_free_route_passes_through_with_forwarding_headers_set(gateway: Gateway) -> None:
    response = httpx.get(
        gateway.url + "/echo?x=1&y=%2F",
        headers={
            "X-Forwarded-For": "6.6.6.6",
            "X-Forwarded-Host": "evil.example",
            "Forwarded": "for=6.6.6.6",
            "Connection": "keep-alive, X-Hop",
            "X-Hop": "dropped",
            "X-Custom": "kept",
            "PAYMENT-SIGNATURE": "never-forwarded",
        },
    )
    assert response.status_code == 200
    assert response.headers["X-Upstream"] == "yes"
    seen = response.json()
    headers = dict(seen["headers"])
    assert seen["query"] == "x=1&y=%2F"
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert headers["x-forwarded-host"] == gateway.url.removeprefix("http://")
    assert headers["x-forwarded-proto"] == "http"
    assert headers["x-custom"] == "kept"
    for absent in ("forwarded", "x-hop", "payment-signature"):
        assert absent not in headers
    assert [v for k, v in seen["headers"] if k == "x-forwarded-for"] == ["127.0.0.1"]  # replaced, not added to


def test_an_unpaid_request_gets_the_402_and_never_reaches_the_upstream(gateway: Gateway) -> None:
    before = gateway.calls().get("/weather/oslo", 0)
    response = httpx.get(gateway.url + "/weather/oslo")
    assert response.status_code == 402
    offer = json.loads(base64.b64decode(response.headers["PAYMENT-REQUIRED"]))
    assert offer["x402Version"] == 2
    assert offer["accepts"][0]["amount"] == "10000"
    assert offer["resource"]["url"] == gateway.url + "/weather/oslo"
    assert gateway.calls().get("/weather/oslo", 0) == before
    page = httpx.get(gateway.url + "/weather/oslo", headers={"Accept": "text/html"})
    assert page.status_code == 402 and page.headers["content-type"].startswith("text/html")
    listed = httpx.get(gateway.url + "/.well-known/x402").json()
    urls = {item["resource"]["url"] for item in listed["items"]}
    assert gateway.url + "/weather/:city" in urls and len(urls) == 9


def test_a_paid_request_is_forwarded_without_its_payment_and_settled(
    dev_platform: PlatformHarness, gateway: Gateway
) -> None:
    before = _balance(dev_platform, gateway)
    with _agent(gateway) as agent:
        response = agent.get("/weather/paris")
    assert response.status_code == 200, response.text
    seen = response.json()
    assert seen["path"] == "/weather/paris"
    assert "payment-signature" not in dict(seen["headers"])
    settlement = _settlement(response)
    assert settlement["success"] is True and settlement["transaction"]
    eventually(lambda: _balance(dev_platform, gateway) == before + 10_000, what="the payout to be paid")


def test_a_metered_route_charges_the_usage_the_upstream_reports(
    dev_platform: PlatformHarness, gateway: Gateway
) -> None:
    before = _balance(dev_platform, gateway)
    with _agent(gateway) as agent:
        response = agent.post("/usage?units=7", json={})
    assert response.status_code == 200, response.text
    assert response.headers.get_list("set-cookie") == ["a=1; Path=/; SameSite=lax", "b=2; Path=/; SameSite=lax"]
    settlement = _settlement(response)
    assert settlement["success"] is True
    assert int(str(settlement["amount"])) == 7_000  # 7 units of 0.001 USDC
    eventually(lambda: _balance(dev_platform, gateway) == before + 7_000, what="the usage to be paid")


def test_streamed_and_sse_responses_pass_through_in_pieces(gateway: Gateway) -> None:
    with _agent(gateway) as agent:
        streamed = agent.get("/stream")
        assert streamed.status_code == 200 and streamed.text == "piece0\npiece1\npiece2\n"
        with agent.stream("GET", "/events") as events:
            assert events.status_code == 200
            assert events.headers["content-type"].startswith("text/event-stream")
            assert "PAYMENT-RESPONSE" in events.headers
            pieces = [chunk for chunk in events.iter_raw() if chunk]
    assert b"".join(pieces).count(b"event: tick") == 3
    assert len(pieces) >= 2  # sent on as they came, not gathered into one body


def test_a_failing_upstream_charges_nothing(dev_platform: PlatformHarness, gateway: Gateway) -> None:
    before = _balance(dev_platform, gateway)
    with _agent(gateway, pending_retries=0) as agent:
        failed = agent.get("/fail")
        assert failed.status_code == 502
        assert failed.json()["error"]["code"] == "upstream_error"
        slow = agent.get("/slow?seconds=5")
        assert slow.status_code == 504
        assert slow.json()["error"]["code"] == "upstream_timeout"
        gone = agent.get("/gone")
        assert gone.status_code == 404 and gone.json() == {"error": "no such thing"}  # its answer, uncharged
        assert "PAYMENT-RESPONSE" not in gone.headers
        # the payments were released: a route that succeeds is then paid once, as usual
        assert agent.get("/weather/rome").status_code == 200
    assert _balance(dev_platform, gateway) == before + 10_000


def test_unauthorized_to_402_lets_the_upstreams_customers_through_and_agents_pay(
    dev_platform: PlatformHarness, gateway: Gateway
) -> None:
    customer = httpx.get(gateway.url + "/private", headers={"Authorization": "Bearer upstream-secret"})
    assert customer.status_code == 200 and customer.json() == {"private": True}
    assert "PAYMENT-RESPONSE" not in customer.headers
    stranger = httpx.get(gateway.url + "/private")
    assert stranger.status_code == 402
    assert json.loads(base64.b64decode(stranger.headers["PAYMENT-REQUIRED"]))["accepts"][0]["amount"] == "20000"
    before = _balance(dev_platform, gateway)
    with _agent(gateway) as agent:
        paid = agent.get("/private")
    assert paid.status_code == 200 and paid.json() == {"private": True}
    eventually(lambda: _balance(dev_platform, gateway) == before + 20_000, what="the payout to be paid")


def test_request_bodies_stream_and_an_oversized_one_is_refused(gateway: Gateway) -> None:
    def pieces() -> Iterator[bytes]:
        for _ in range(9):
            yield b"x" * 100

    with _agent(gateway) as agent:
        uploaded = agent.post("/upload", content=b"y" * 900)
        assert uploaded.status_code == 200 and uploaded.json()["size"] == 900
    assert httpx.post(gateway.url + "/upload", content=b"z" * 1001).status_code == 413
    assert httpx.post(gateway.url + "/free/big", content=b"z" * 1001).status_code == 413
    chunked = httpx.post(gateway.url + "/free/chunked", content=pieces())
    assert chunked.status_code == 200 and len(chunked.json()["body"]) == 900
    too_many = httpx.post(gateway.url + "/free/chunked", content=iter([b"x" * 600, b"x" * 600]))
    assert too_many.status_code == 413


def test_an_upstream_that_is_down_charges_nothing(dev_platform: PlatformHarness) -> None:
    deployment = dev_platform.deploy()
    dead = f"http://127.0.0.1:{free_port()}"
    with running_gateway(dev_platform, dead, deployment) as gateway:
        free = httpx.get(gateway.url + "/echo")
        assert free.status_code == 502 and free.json()["error"]["code"] == "upstream_unavailable"
        with _agent(gateway, pending_retries=0) as agent:
            paid = agent.get("/weather/paris")
        assert paid.status_code == 502
    assert dev_platform.balance(deployment.payout) == 0


def _command(tmp_path: Path, platform: PlatformHarness, api_key: str, text: str, upstream: str, port: int) -> list[str]:
    config = tmp_path / "gateway.toml"
    config.write_text(text)
    return [
        sys.executable,
        "-m",
        "x402mw",
        "gateway",
        "--config",
        str(config),
        "--upstream",
        upstream,
        "--port",
        str(port),
    ]


def _env(platform: PlatformHarness, api_key: str, payout: str) -> dict[str, str]:
    return dict(
        os.environ,
        X402MW_API_KEY=api_key,
        X402MW_PLATFORM_URL=platform.url,
        X402MW_PAYOUT_ADDRESS=payout,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )


@pytest.mark.parametrize(
    ("text", "upstream_up", "said"),
    [
        (
            '[[routes]]\npath = "/a"\nprice = "0.01"\ncoin = "DOGE"\nnetwork = "{network}"\n',
            True,
            "unknown coin 'DOGE'",
        ),
        ('[[routes]]\npath = "/a"\nprice = "0.01"\ncoin = "USDC"\nnetwork = "eip155:1"\n', True, "not settled by"),
        ('[[routes]]\npath = "/a"\nprice = "0.0000001"\ncoin = "USDC"\nnetwork = "{network}"\n', True, "smallest unit"),
        (
            'coin = "USDC"\nnetwork = "{network}"\n[[routes]]\npath = "/a/{{x}}"\nprice = "0.01"\n'
            '[[routes]]\npath = "/a/b"\nprice = "0.01"\n',
            True,
            "overlap",
        ),
        ('[[routes]]\npath = "/a"\nprice = "0.01"\ncoin = "USDC"\nnetwork = "{network}"\n', False, "does not answer"),
    ],
)
def test_the_command_refuses_a_bad_start_in_one_line(
    tmp_path: Path, dev_platform: PlatformHarness, upstream: str, text: str, upstream_up: bool, said: str
) -> None:
    deployment = dev_platform.deploy(fund="")
    target = upstream if upstream_up else f"http://127.0.0.1:{free_port()}"
    command = _command(
        tmp_path, dev_platform, deployment.api_key, text.format(network=dev_platform.network), target, free_port()
    )
    done = subprocess.run(
        command,
        env=_env(dev_platform, deployment.api_key, deployment.payout),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("x402mw gateway: ") and said in lines[0], done.stderr


def test_the_command_sells_the_upstream(tmp_path: Path, dev_platform: PlatformHarness, upstream: str) -> None:
    deployment = dev_platform.deploy()
    port = free_port()
    text = (
        f'coin = "USDC"\nnetwork = "{dev_platform.network}"\n'
        '[[routes]]\nmethod = "GET"\npath = "/weather/{city}"\nprice = "0.03"\n'
    )
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            _command(tmp_path, dev_platform, deployment.api_key, text, upstream, port),
            env=_env(dev_platform, deployment.api_key, deployment.payout),
            stdout=out,
            stderr=out,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        eventually(
            lambda: process.poll() is not None or httpx.get(url + "/echo", timeout=2).status_code == 200,
            what=lambda: f"the gateway to answer:\n{log.read_text()}",
        )
        assert process.poll() is None, log.read_text()
        assert httpx.get(url + "/weather/lima").status_code == 402
        with httpx.Client(base_url=url, auth=X402Auth(deployment.agent, max_amount="0.05"), timeout=60) as agent:
            paid = agent.get("/weather/lima")
        assert paid.status_code == 200 and paid.json()["path"] == "/weather/lima"
    finally:
        process.terminate()
        process.wait(timeout=10)
    eventually(lambda: dev_platform.balance(deployment.payout) == 30_000, what="the payout to be paid")


@pytest.mark.anyio
async def test_the_x402_foundation_sdk_agent_pays_through_the_gateway(
    dev_platform: PlatformHarness, gateway: Gateway
) -> None:
    from eth_account import Account
    from x402 import x402Client
    from x402.http.clients.httpx import x402AsyncTransport
    from x402.mechanisms.evm.exact import ExactEvmScheme
    from x402.mechanisms.evm.signers import EthAccountSigner

    client = x402Client()
    signer = EthAccountSigner(Account.from_key(gateway.deployment.agent_key))
    client.register("eip155:*", ExactEvmScheme(signer=signer))
    allowed = {"network": dev_platform.network, "asset": dev_platform.usdc, "max_amount_per_payment": "50000"}
    client.set_spend_controls({"allowed_assets": [allowed]})
    before = await anyio.to_thread.run_sync(_balance, dev_platform, gateway)
    transport = x402AsyncTransport(client, httpx.AsyncHTTPTransport())
    async with httpx.AsyncClient(transport=transport, base_url=gateway.url, timeout=60) as agent:
        response = await agent.get("/weather/berlin")
    assert response.status_code == 200, response.text
    assert response.json()["path"] == "/weather/berlin"
    assert _settlement(response)["success"] is True
    after = await anyio.to_thread.run_sync(_balance, dev_platform, gateway)
    assert after == before + 10_000


NODE_ROUTES = """
[[routes]]
method = "GET"
path = "/reset"
price = "0.01"

[[routes]]
method = "GET"
path = "/weather/{city}"
price = "0.01"

[[routes]]
method = "GET"
path = "/events"
price = "0.01"

[[routes]]
method = "GET"
path = "/usage"
scheme = "upto"
price = "0.05"
usage_header = "X-Usage"
"""


@pytest.fixture
def node_upstream() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        ["node", str(ROOT / "tests" / "interop" / "gateway_upstream.mjs"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        eventually(
            lambda: process.poll() is not None or httpx.get(url + "/echo", timeout=2).status_code == 200,
            what="the node upstream to answer",
        )
        assert process.poll() is None
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_a_node_upstream_is_sold_the_same_way(dev_platform: PlatformHarness, node_upstream: str) -> None:
    deployment = dev_platform.deploy()
    with running_gateway(dev_platform, node_upstream, deployment, NODE_ROUTES) as gateway:
        free = httpx.get(gateway.url + "/echo", headers={"X-Forwarded-For": "6.6.6.6"})
        assert free.status_code == 200 and free.headers["X-Upstream"] == "node"
        assert free.json()["headers"]["x-forwarded-for"] == "127.0.0.1"
        with _agent(gateway) as agent:
            weather = agent.get("/weather/quito")
            assert weather.status_code == 200 and weather.json() == {"city": "quito", "forecast": "sunny"}
            assert weather.headers.get_list("set-cookie") == ["a=1", "b=2"]
            with agent.stream("GET", "/events") as events:
                pieces = [chunk for chunk in events.iter_raw() if chunk]
            assert b"".join(pieces) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n" and len(pieces) >= 2
            metered = agent.get("/usage?units=0.0042")
            assert metered.status_code == 200 and int(str(_settlement(metered)["amount"])) == 4_200
        with _agent(gateway, pending_retries=0) as agent:
            reset = agent.get("/reset")  # the upstream hangs up: nothing charged
            assert reset.status_code == 502 and reset.json()["error"]["code"] == "upstream_unavailable"
    eventually(lambda: dev_platform.balance(deployment.payout) == 20_000 + 4_200, what="the three payments to be paid")


DECLARED_ROUTES = """
[[routes]]
method = "GET"
path = "/weather/{city}"
price = "0.01"
sign_in = 3600

[routes.discovery]
query = {units = "metric"}
output = {forecast = "sunny"}
"""


def test_discovery_and_sign_in_work_as_in_process(dev_platform: PlatformHarness, upstream: str) -> None:
    deployment = dev_platform.deploy()
    with running_gateway(dev_platform, upstream, deployment, DECLARED_ROUTES, origin="self") as gateway:
        offer = json.loads(base64.b64decode(httpx.get(gateway.url + "/weather/nice").headers["PAYMENT-REQUIRED"]))
        assert offer["extensions"]["bazaar"]["info"]["input"]["queryParams"] == {"units": "metric"}
        assert "sign-in-with-x" in offer["extensions"]
        (item,) = httpx.get(gateway.url + "/.well-known/x402").json()["items"]
        assert item["requires"] == ["sign-in-with-x"] and item["output"]["example"] == {"forecast": "sunny"}
        with _agent(gateway) as agent:
            assert agent.get("/weather/nice").status_code == 200
        with _agent(gateway) as again:  # the same wallet, a new client: signed in, not charged again
            back = again.get("/weather/nice")
            assert back.status_code == 200 and back.json()["path"] == "/weather/nice"
            assert again.auth.payments == []  # type: ignore[union-attr]
    eventually(lambda: dev_platform.balance(deployment.payout) == 10_000, what="the one payment to be paid")


def test_prices_come_from_the_upstreams_openapi_document_and_are_published(
    tmp_path: Path, dev_platform: PlatformHarness, upstream: str
) -> None:
    deployment = dev_platform.deploy(fund="")
    port = free_port()
    text = f'network = "{dev_platform.network}"\ncoin = "USDC"\nopenapi = "/openapi.json"\npublish = true\n'
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            _command(tmp_path, dev_platform, deployment.api_key, text, upstream, port),
            env=_env(dev_platform, deployment.api_key, deployment.payout),
            stdout=out,
            stderr=out,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        eventually(
            lambda: process.poll() is not None or httpx.get(url + "/echo", timeout=2).status_code == 200,
            what=lambda: f"the gateway to answer:\n{log.read_text()}",
        )
        assert process.poll() is None, log.read_text()
        challenge = httpx.get(url + "/weather/lima")
        assert challenge.status_code == 402
        offer = json.loads(base64.b64decode(challenge.headers["PAYMENT-REQUIRED"]))
        assert offer["accepts"][0]["amount"] == "40000"
        assert offer["resource"]["description"] == "Today's weather"
        document = httpx.get(url + "/openapi.json").json()
        info = document["paths"]["/weather/{city}"]["get"]["x-payment-info"]
        assert info["price"] == {"mode": "fixed", "currency": "USDC", "amount": "0.04"}
        assert "402" in document["paths"]["/weather/{city}"]["get"]["responses"]
        assert "x-payment-info" not in document["paths"]["/echo"]["get"]
        llms = httpx.get(url + "/llms.txt")
        assert llms.headers["content-type"].startswith("text/markdown")
        assert f"- [GET /weather/{{city}}]({url}/weather/{{city}}): 0.04 USDC on {dev_platform.network}" in llms.text
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_upstreams_cookies_are_never_kept_for_other_clients(gateway: Gateway) -> None:
    first = httpx.get(gateway.url + "/usage?units=1")  # GET /usage is free (only POST is sold)
    assert first.status_code == 200 and len(first.headers.get_list("set-cookie")) == 2
    later = httpx.get(gateway.url + "/echo").json()
    assert "cookie" not in dict(later["headers"])
    own = httpx.get(gateway.url + "/echo", headers={"Cookie": "mine=1"}).json()
    assert dict(own["headers"])["cookie"] == "mine=1"


@pytest.mark.parametrize("path", ["/echo/%2e%2e/weather/paris", "//weather/paris", "/echo/%2E/x", "/free/a%5C..%5Cb"])
def test_a_path_spelled_two_ways_is_refused(gateway: Gateway, path: str) -> None:
    before = gateway.calls()
    refused = httpx.get(gateway.url + path)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_path"
    assert gateway.calls() == before  # the upstream was not asked: no paid route reached by a free spelling


def test_a_payment_sent_again_gets_its_first_answer_and_is_not_charged_twice(
    dev_platform: PlatformHarness, gateway: Gateway
) -> None:
    before = _balance(dev_platform, gateway)
    with _agent(gateway) as agent:
        first = agent.get("/weather/kyiv")
    assert first.status_code == 200
    signature = first.request.headers["PAYMENT-SIGNATURE"]
    again = httpx.get(gateway.url + "/weather/kyiv", headers={"PAYMENT-SIGNATURE": signature}, timeout=60)
    assert again.status_code == 200 and again.json()["path"] == "/weather/kyiv"
    assert _settlement(again)["transaction"] == _settlement(first)["transaction"]
    eventually(lambda: _balance(dev_platform, gateway) == before + 10_000, what="the one payment to be paid")
    assert _balance(dev_platform, gateway) == before + 10_000
