"""Interoperability with the x402 Foundation's own SDKs: Python (the ``x402`` package, v2) and
TypeScript (``@x402/fetch``, ``@x402/express`` and ``@x402/evm``, run by node from ``.tools``).

Both directions run on the real platform and the dev chain: the SDKs' agents pay our seller
middleware, and the SDK's FastAPI seller middleware (``examples/x402_sdk_seller.py``) verifies and
settles through our facilitator API (``/v1/x402``) while our ``X402Auth`` and the SDK's agent pay
it. What each side sends and reads is the other implementation's, so a difference in the wire
format fails here."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account
from werkzeug.serving import make_server
from x402 import x402Client
from x402.http.clients.httpx import PaymentError, x402AsyncTransport
from x402.mechanisms.evm.exact import ExactEvmScheme
from x402.mechanisms.evm.signers import EthAccountSigner

from examples.x402_sdk_seller import create_app, create_flask_app
from tests.harness import Deployment, PlatformHarness, serve_app
from tests.sellers import asgi_transport, lifespan, starlette_app
from x402mw.client import X402Auth
from x402mw.evm.keys import address_of, new_private_key
from x402mw.evm.receipts import verify_receipt
from x402mw.protocol import decode_settlement_response

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools"  # where `make test` installs the TypeScript SDK
PAY_SCRIPT = ROOT / "tests" / "interop" / "pay_with_x402_fetch.mjs"
EXPRESS_SELLER = ROOT / "tests" / "interop" / "express_seller.mjs"


def _sdk_agent(harness: PlatformHarness, private_key: bytes, inner: httpx.AsyncBaseTransport) -> httpx.AsyncClient:
    """An httpx client paying with the SDK: its exact EVM scheme, capped at 0.05 of our USDC."""
    client = x402Client()
    client.register("eip155:*", ExactEvmScheme(signer=EthAccountSigner(Account.from_key(private_key))))
    client.set_spend_controls(
        {"allowed_assets": [{"network": harness.network, "asset": harness.usdc, "max_amount_per_payment": "50000"}]}
    )
    return httpx.AsyncClient(transport=x402AsyncTransport(client, inner), base_url="http://testserver", timeout=60)


def _settlement_header(response: httpx.Response) -> dict[str, Any]:
    """The PAYMENT-RESPONSE header decoded as plain JSON (neither side's decoder)."""
    decoded: dict[str, Any] = json.loads(base64.b64decode(response.headers["PAYMENT-RESPONSE"]))
    return decoded


async def test_the_sdk_agent_pays_our_seller(deployment: Deployment) -> None:
    harness = deployment.harness
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    payout_before = await asyncio.to_thread(harness.balance, deployment.payout)
    # The SDK's transport does not open the one it wraps: the app's lifespan is run around it here.
    async with lifespan(app), _sdk_agent(harness, deployment.agent_key, asgi_transport(app)) as agent:
        responses = [await agent.get("/weather") for _ in range(2)]
    for response in responses:
        assert response.status_code == 200, response.text
        settled = _settlement_header(response)
        assert settled["success"] is True and settled["network"] == harness.network
        assert settled["transaction"] == response.json()["tx"]
        assert settled["payer"].lower() == deployment.agent.address.lower()
        # the header also carries our signed receipt (under extensions), which the SDK reads past
        assert verify_receipt(
            decode_settlement_response(response.headers["PAYMENT-RESPONSE"]).receipt or {},
            harness.platform.receipt_address,
        )
    assert len({_settlement_header(r)["transaction"] for r in responses}) == 2
    assert await asyncio.to_thread(harness.balance, deployment.payout) == payout_before + 20_000


async def test_the_sdk_agent_refuses_an_offer_above_its_cap(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, amount_minor="60000")
    app = starlette_app(deployment.api_key, dev_platform.url, deployment.endpoint_id)
    balance_before = await asyncio.to_thread(dev_platform.balance, deployment.agent.address)
    async with lifespan(app), _sdk_agent(dev_platform, deployment.agent_key, asgi_transport(app)) as agent:
        with pytest.raises(PaymentError, match="max_amount_per_payment"):
            await agent.get("/weather")
    assert await asyncio.to_thread(dev_platform.balance, deployment.agent.address) == balance_before


async def test_the_sdk_seller_settles_through_our_facilitator(deployment: Deployment) -> None:
    harness = deployment.harness
    pay_to = address_of(new_private_key())
    price = {"amount": "10000", "asset": harness.usdc, "extra": {"name": "USD Coin", "version": "2"}}
    app = create_app(deployment.api_key, harness.url, harness.network, pay_to, price)
    transport = httpx.ASGITransport(app=app)

    async with lifespan(app):  # whose end closes the SDK's facilitator client
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver", timeout=60) as anonymous:
            unpaid = await anonymous.get("/weather")
        assert unpaid.status_code == 402, unpaid.text
        assert "PAYMENT-REQUIRED" in unpaid.headers

        ours = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=harness.platform.receipt_address)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver", auth=ours, timeout=60) as agent:
            paid_by_ours = await agent.get("/weather")
        async with _sdk_agent(harness, deployment.agent_key, transport) as agent:
            paid_by_sdk = await agent.get("/weather")

    transactions = []
    for response in (paid_by_ours, paid_by_sdk):
        assert response.status_code == 200, response.text
        assert response.json() == {"forecast": "sunny"}
        settled = _settlement_header(response)
        assert settled["success"] is True and settled["payer"].lower() == deployment.agent.address.lower()
        transactions.append(settled["transaction"])
    # the SDK seller passes our facilitator's signed receipt on, so our agent verifies it there too
    assert [(p.transaction, p.verified) for p in ours.payments] == [(transactions[0], True)]
    assert len(set(transactions)) == 2
    assert await asyncio.to_thread(harness.balance, pay_to) == 20_000
    with deployment.api() as api:
        usage = api.get("/agent/usage").json()["usage"]
    assert usage["settlements"] == 2  # facilitator settlements are metered like the middleware's


def _pay_sdk_seller(url: str, deployment: Deployment, pay_to: str) -> None:
    """Our sync ``X402Auth`` pays the SDK seller at ``url`` twice, after an unpaid 402; each answer
    carries a settlement, our receipt passes through the seller and verifies, the money arrives."""
    harness = deployment.harness
    ours = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=harness.platform.receipt_address)
    with httpx.Client(base_url=url, timeout=60) as anonymous:
        unpaid = anonymous.get("/weather")
    with httpx.Client(base_url=url, auth=ours, timeout=60) as agent:
        paid = [agent.get("/weather") for _ in range(2)]
    assert unpaid.status_code == 402 and "PAYMENT-REQUIRED" in unpaid.headers
    for response in paid:
        assert response.status_code == 200, response.text
        assert response.json() == {"forecast": "sunny"}
        assert _settlement_header(response)["success"] is True
    assert [p.verified for p in ours.payments] == [True, True]
    assert harness.balance(pay_to) == 20_000


def test_the_sdk_flask_seller_settles_through_our_facilitator(deployment: Deployment) -> None:
    # the SDK's synchronous side: Flask middleware, x402ResourceServerSync, HTTPFacilitatorClientSync.
    # Served by a real WSGI server: the SDK's middleware sends the body through WSGI's write(), which
    # httpx's in-process WSGITransport drops.
    harness = deployment.harness
    pay_to = address_of(new_private_key())
    price = {"amount": "10000", "asset": harness.usdc, "extra": {"name": "USD Coin", "version": "2"}}
    app = create_flask_app(deployment.api_key, harness.url, harness.network, pay_to, price)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _pay_sdk_seller(f"http://127.0.0.1:{server.server_port}", deployment, pay_to)
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
        app.extensions["x402_facilitator"].close()


def _node_agent(url: str, key: bytes, harness: PlatformHarness, *, cap: str, times: int) -> list[dict[str, Any]]:
    """Pay ``url`` ``times`` with the TypeScript SDK (node, from ``.tools``); one answer per request."""
    assert (TOOLS / "node_modules" / "@x402" / "fetch").is_dir(), "run `make test`: it installs the TypeScript SDK"
    env = dict(
        os.environ,
        PAY_URL=url,
        PAY_KEY="0x" + key.hex(),
        PAY_NETWORK=harness.network,
        PAY_ASSET=harness.usdc,
        PAY_MAX=cap,
        PAY_TIMES=str(times),
    )
    done = subprocess.run(
        ["node", "--input-type=module"],
        input=PAY_SCRIPT.read_text(),
        cwd=TOOLS,  # where node resolves the SDK's packages from
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_typescript_sdk_agent_pays_our_seller(deployment: Deployment) -> None:
    harness = deployment.harness
    app = starlette_app(deployment.api_key, harness.url, deployment.endpoint_id)
    payout_before = harness.balance(deployment.payout)
    with serve_app(app) as url:
        answers = _node_agent(url + "/weather", deployment.agent_key, harness, cap="50000", times=2)
    assert len(answers) == 2, answers
    for answer in answers:
        assert answer.get("status") == 200, answer
        settled = answer["settlement"]
        assert settled["success"] is True and settled["network"] == harness.network
        assert settled["transaction"] == json.loads(answer["body"])["tx"]
        assert settled["payer"].lower() == deployment.agent.address.lower()
        assert verify_receipt(settled["extensions"]["receipt"], harness.platform.receipt_address)
    assert harness.balance(deployment.payout) == payout_before + 20_000


def test_the_typescript_sdk_agent_keeps_to_its_cap(dev_platform: PlatformHarness) -> None:
    deployment = dev_platform.deploy(amount_minor="60000")
    app = starlette_app(deployment.api_key, dev_platform.url, deployment.endpoint_id)
    balance_before = dev_platform.balance(deployment.agent.address)
    with serve_app(app) as url:
        [answer] = _node_agent(url + "/weather", deployment.agent_key, dev_platform, cap="50000", times=1)
    assert "maxAmountPerPayment" in answer.get("error", ""), answer
    assert dev_platform.balance(deployment.agent.address) == balance_before


def test_the_typescript_sdk_express_seller_settles_through_our_facilitator(deployment: Deployment) -> None:
    harness = deployment.harness
    assert (TOOLS / "node_modules" / "@x402" / "express").is_dir(), "run `make test`: it installs the TypeScript SDK"
    pay_to = address_of(new_private_key())
    env = dict(
        os.environ,
        FACILITATOR_URL=harness.url + "/x402",
        API_KEY=deployment.api_key,
        NETWORK=harness.network,
        ASSET=harness.usdc,
        PAY_TO=pay_to,
    )
    with subprocess.Popen(  # leaving the block closes its pipes
        ["node", "--input-type=module"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=TOOLS,
        env=env,
        text=True,
    ) as seller:
        try:
            assert seller.stdin is not None and seller.stdout is not None
            seller.stdin.write(EXPRESS_SELLER.read_text())
            seller.stdin.close()
            started = seller.stdout.readline()
            assert started, seller.stderr.read() if seller.stderr else ""
            _pay_sdk_seller(f"http://127.0.0.1:{json.loads(started)['port']}", deployment, pay_to)
        finally:
            seller.terminate()
            seller.wait(timeout=30)
