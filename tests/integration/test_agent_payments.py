"""Agent payments end to end: agent (X402Auth) -> seller app -> platform -> real chain."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.harness import Deployment, PlatformHarness, each_on_one_chain
from tests.sellers import ASYNC_SELLERS, asgi_transport, starlette_app
from tests.waiting import eventually_async
from x402mw.client import X402Auth
from x402mw.evm.receipts import verify_receipt
from x402mw.protocol import decode_payment_required, decode_settlement_response

pytestmark = pytest.mark.anyio


async def _pay(app: Any, agent_auth: X402Auth, path: str = "/weather") -> httpx.Response:
    async with httpx.AsyncClient(
        transport=asgi_transport(app), base_url="http://testserver", auth=agent_auth, timeout=60
    ) as client:
        return await client.get(path)


@each_on_one_chain("framework", sorted(ASYNC_SELLERS))
async def test_async_sellers_get_paid_on_every_chain(framework: str, any_chain_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(any_chain_platform.deploy)
    app = ASYNC_SELLERS[framework](deployment.api_key, any_chain_platform.url, deployment.endpoint_id)
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=any_chain_platform.platform.receipt_address)
    payout_before = await asyncio.to_thread(any_chain_platform.balance, deployment.payout)

    for _ in range(2):
        response = await _pay(app, auth)
        assert response.status_code == 200, response.text
        body = response.json()
        settlement = decode_settlement_response(response.headers["PAYMENT-RESPONSE"])
        assert settlement.success and settlement.transaction == body["tx"]
        assert body["payer"].lower() == deployment.agent.address.lower()
        assert body["amount"] == 10_000
        assert verify_receipt(settlement.receipt or {}, any_chain_platform.platform.receipt_address)

    assert await asyncio.to_thread(any_chain_platform.balance, deployment.payout) == payout_before + 20_000
    assert [p.verified for p in auth.payments] == [True, True]
    gas = await asyncio.to_thread(
        any_chain_platform.server.call,
        lambda p: any_chain_platform.chain.rpc.request("eth_getBalance", [deployment.agent.address, "latest"]),
    )
    assert int(gas, 16) == 0, "the agent holds no gas money and needs none"


async def test_unpaid_request_gets_a_402_challenge_without_calling_the_platform(
    deployment: Deployment,
) -> None:
    app = starlette_app(deployment.api_key, deployment.harness.url, deployment.endpoint_id)
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        first = await client.get("/weather")  # fetches the endpoint's terms once
        response = await client.get("/weather")
        free = await client.get("/free")
    assert first.status_code == response.status_code == 402
    assert response.headers["cache-control"] == "no-store"
    assert "PAYMENT-RESPONSE" in response.headers["access-control-expose-headers"]
    required = decode_payment_required(response.headers["PAYMENT-REQUIRED"])
    offer = required.accepts[0]
    assert required.x402_version == 2
    assert (offer.scheme, offer.network, offer.amount) == ("exact", deployment.harness.network, 10_000)
    assert offer.pay_to == deployment.payout and offer.asset == deployment.harness.usdc
    assert offer.extra["name"] == "USD Coin" and offer.extra["version"] == "2"
    assert required.resource is not None and required.resource.url == "http://testserver/weather"
    assert response.json()["accepts"][0]["amount"] == "10000"
    assert free.status_code == 200 and free.json() == {"free": True}


async def test_challenges_are_registered_and_report_their_payment(deployment: Deployment) -> None:
    app = starlette_app(deployment.api_key, deployment.harness.url, deployment.endpoint_id)
    auth = X402Auth(deployment.agent)
    response = await _pay(app, auth)
    assert response.status_code == 200
    challenge_id = decode_settlement_response(response.headers["PAYMENT-RESPONSE"]).receipt["challengeId"]  # type: ignore[index]
    with deployment.api() as api:
        found = api.get(f"/agent/challenges/{challenge_id}")
        legacy = httpx.get(
            deployment.harness.url.removesuffix("/v1") + f"/merchant/v1/agent/challenges/{challenge_id}",
            headers={"x-api-key": deployment.api_key},
        )
        missing = api.get("/agent/challenges/00000000-0000-0000-0000-000000000000")
    assert found.status_code == 200, found.text
    challenge = found.json()["challenge"]
    assert challenge["status"] == "settled"
    assert challenge["payment"]["transaction"] == response.json()["tx"]
    assert legacy.status_code == 200 and legacy.json() == found.json()
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "resource_missing"


async def test_reads_after_a_receipt_find_the_payment_settled(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The settlement's record commits before its receipt is answered, however slow the write: a
    # read of the agent API right after the receipt finds it (no reader waits for anything).
    writes = deployment.harness.platform.settlement.writes
    record = writes.settled

    async def slow_record(*args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(0.5)
        await record(*args, **kwargs)

    monkeypatch.setattr(writes, "settled", slow_record)
    app = starlette_app(deployment.api_key, deployment.harness.url, deployment.endpoint_id)
    response = await _pay(app, X402Auth(deployment.agent))
    assert response.status_code == 200
    receipt = decode_settlement_response(response.headers["PAYMENT-RESPONSE"]).receipt
    assert receipt is not None
    with deployment.api() as api:
        challenge = api.get(f"/agent/challenges/{receipt['challengeId']}")
        payments = api.get("/agent/payments").json()["data"]
        events = api.get("/events", params={"type": "agent_payment.settled"}).json()["data"]
    assert challenge.status_code == 200, challenge.text
    assert challenge.json()["challenge"]["status"] == "settled"
    assert [p["status"] for p in payments if p["transaction"] == receipt["transaction"]] == ["settled"]
    assert any(e["data"]["agentPayment"]["transaction"] == receipt["transaction"] for e in events)


async def test_unpaid_challenges_reach_the_platform_in_the_background(deployment: Deployment) -> None:
    app = starlette_app(deployment.api_key, deployment.harness.url, deployment.endpoint_id)
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        response = await client.get("/weather")
        challenge_id = decode_payment_required(response.headers["PAYMENT-REQUIRED"]).accepts[0].extra["challengeId"]
        with deployment.api() as api:
            found = await eventually_async(
                lambda: api.get(f"/agent/challenges/{challenge_id}"),
                until=lambda found: found.status_code == 200,
                what=f"challenge {challenge_id} on the platform",
            )
    assert found.json()["challenge"]["status"] == "open"


@pytest.mark.both_databases  # concurrent sends: each database's locking
async def test_fifty_concurrent_sends_of_one_signature_settle_once(
    any_chain_platform: PlatformHarness,
) -> None:
    deployment = await asyncio.to_thread(any_chain_platform.deploy)
    app = starlette_app(deployment.api_key, any_chain_platform.url, deployment.endpoint_id)
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver", timeout=120) as client:
        challenge = await client.get("/weather")
        offer = decode_payment_required(challenge.headers["PAYMENT-REQUIRED"]).accepts[0]
        from x402mw.protocol import encode_header

        header = encode_header(deployment.agent.sign_payment(offer))
        before = await asyncio.to_thread(any_chain_platform.balance, deployment.payout)
        responses = await asyncio.gather(
            *[client.get("/weather", headers={"PAYMENT-SIGNATURE": header}) for _ in range(50)]
        )
    assert [r.status_code for r in responses] == [200] * 50
    receipts = {r.headers["PAYMENT-RESPONSE"] for r in responses}
    assert len(receipts) == 1, [decode_settlement_response(r).model_dump() for r in receipts]
    assert len({r.json()["tx"] for r in responses}) == 1
    assert await asyncio.to_thread(any_chain_platform.balance, deployment.payout) == before + 10_000


async def test_streaming_and_repeated_headers_survive(deployment: Deployment) -> None:
    app = starlette_app(deployment.api_key, deployment.harness.url, deployment.endpoint_id)
    auth = X402Auth(deployment.agent)
    response = await _pay(app, auth)
    assert response.headers.get_list("set-cookie") == [
        "a=1; Path=/; SameSite=lax",
        "b=2; Path=/; SameSite=lax",
    ]
    streamed = await _pay(app, auth, "/stream")
    assert streamed.status_code == 200 and streamed.text == "chunk0\nchunk1\nchunk2\n"
    assert "PAYMENT-RESPONSE" in streamed.headers


async def test_dynamic_pricing_prices_the_challenge_and_the_paid_request(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, amount_minor=None, pricing="dynamic")
    calls: list[str] = []

    async def price(request: Any) -> str:
        calls.append(request.query_params.get("size", "s"))
        return "0.03" if request.query_params.get("size") == "l" else "$0.01"

    app = starlette_app(deployment.api_key, dev_platform.url, deployment.endpoint_id, amount=price)
    before = await asyncio.to_thread(dev_platform.balance, deployment.payout)
    response = await _pay(app, X402Auth(deployment.agent), "/weather?size=l")
    assert response.status_code == 200 and response.json()["amount"] == 30_000
    assert calls == ["l", "l"]  # the 402, then the paid retry (a challenge pays only for what it priced)
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == before + 30_000


async def test_an_agent_pays_the_new_price_when_it_rose_before_its_payment(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, amount_minor=None, pricing="dynamic")
    prices = ["0.01", "0.02", "0.02"]  # the 402, the paid retry (dearer now), the payment of the new challenge

    def price(request: Any) -> str:
        return prices.pop(0)

    app = starlette_app(deployment.api_key, dev_platform.url, deployment.endpoint_id, amount=price)
    receipts = dev_platform.platform.receipt_address
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=receipts)
    before = await asyncio.to_thread(dev_platform.balance, deployment.payout)
    response = await _pay(app, auth)
    assert response.status_code == 200, response.text
    assert response.json()["amount"] == 20_000 and prices == []
    assert [(p.amount, p.verified) for p in auth.payments] == [(20_000, True)]
    # the authorization of the old price was refused by the seller and never settled
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == before + 20_000


async def test_confirmed_release_waits_for_confirmations(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, release="confirmed")
    app = starlette_app(deployment.api_key, dev_platform.url, deployment.endpoint_id)
    response = await _pay(app, X402Auth(deployment.agent))
    assert response.status_code == 200
    tx = response.json()["tx"]

    async def depth(platform: Any) -> int:
        receipt = await dev_platform.chain.rpc.request("eth_getTransactionReceipt", [tx])
        head = int(await dev_platform.chain.rpc.request("eth_blockNumber", []), 16)
        return head - int(receipt["blockNumber"], 16)

    assert await asyncio.to_thread(dev_platform.server.call, depth) >= dev_platform.chain.confirmations


async def test_a_settlement_that_outlives_the_request_is_pending_then_served(anvil_platform: PlatformHarness) -> None:
    from x402mw.protocol import encode_header

    deployment = await asyncio.to_thread(anvil_platform.deploy)
    app = starlette_app(deployment.api_key, anvil_platform.url, deployment.endpoint_id, settle_timeout=3.0)
    rpc = anvil_platform.chain.rpc
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver", timeout=60) as client:
        offer = decode_payment_required((await client.get("/weather")).headers["PAYMENT-REQUIRED"]).accepts[0]
        header = encode_header(deployment.agent.sign_payment(offer))
        await asyncio.to_thread(anvil_platform.server.call, lambda p: rpc.request("evm_setAutomine", [False]))
        try:
            pending = await client.get("/weather", headers={"PAYMENT-SIGNATURE": header})
        finally:
            await asyncio.to_thread(anvil_platform.server.call, lambda p: rpc.request("evm_setAutomine", [True]))
            await asyncio.to_thread(anvil_platform.server.call, lambda p: rpc.request("evm_mine", []))
        assert pending.status_code == 402
        assert pending.headers["retry-after"] == "1"
        state = decode_settlement_response(pending.headers["PAYMENT-RESPONSE"])
        assert state.error_reason == "settlement_pending" and state.transaction.startswith("0x")
        served = await client.get("/weather", headers={"PAYMENT-SIGNATURE": header})
    assert served.status_code == 200, served.text
    assert served.json()["tx"] == state.transaction, "the pending transfer is the one that paid"
    assert await asyncio.to_thread(anvil_platform.balance, deployment.payout) == 10_000
