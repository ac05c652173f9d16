"""Metered routes (the ``upto`` scheme through Permit2) end to end, on the real platform and the
dev chain and anvil: the handler's usage is settled after it, 0 / part / all of the ceiling, the
first use of an agent without allowance or gas goes through its EIP-2612 permit, one authorization
has one outcome, and the facilitator API speaks upto to the Foundation's SDK."""

from __future__ import annotations

import asyncio
import base64
import json
from decimal import Decimal
from typing import Any

import httpx
import pytest

from examples.x402_sdk_seller import create_metered_app
from tests.harness import PlatformHarness
from tests.metered_fixtures import approve_permit2, metered_app, metered_deployment, sdk_upto_agent
from tests.sellers import asgi_transport, lifespan
from x402mw.client import X402Auth
from x402mw.evm.keys import address_of, new_private_key
from x402mw.evm.receipts import verify_receipt
from x402mw.platform.chain.token import allowance
from x402mw.protocol import decode_payment_required, decode_settlement_response
from x402mw.protocol.codec import encode_header
from x402mw.protocol.models import PaymentRequirements
from x402mw.protocol.networks import PERMIT2_ADDRESS
from x402mw.seller import PaidRoute, PaymentGate, RequestView, ServeMetered, run_async

pytestmark = pytest.mark.anyio


def _settled(response: httpx.Response) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(base64.b64decode(response.headers["PAYMENT-RESPONSE"]))
    return decoded


async def test_the_sdk_agent_pays_0_part_and_all_of_the_ceiling(any_chain_platform: PlatformHarness) -> None:
    harness = any_chain_platform
    deployment = await asyncio.to_thread(metered_deployment, harness, ceiling=50_000)
    payer = deployment.agent.address
    app = metered_app(deployment.api_key, harness.url, deployment.endpoint_id)
    async with lifespan(app), sdk_upto_agent(harness, deployment.agent_key, asgi_transport(app)) as agent:
        unpaid = await httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver").get("/generate")
        nothing = await agent.get("/generate", params={"use": "0"})
        part = await agent.get("/generate", params={"use": "12345"})
        beyond = await agent.get("/generate", params={"use": "999999"})

    assert unpaid.status_code == 402
    offer = json.loads(base64.b64decode(unpaid.headers["PAYMENT-REQUIRED"]))
    (accepts,) = offer["accepts"]
    assert accepts["scheme"] == "upto" and accepts["amount"] == "50000"
    assert accepts["extra"]["facilitatorAddress"] == harness.chain.relayer.address
    assert "eip2612GasSponsoring" in offer["extensions"]

    for response, charged in ((nothing, 0), (part, 12345), (beyond, 50_000)):
        assert response.status_code == 200, response.text
        settled = _settled(response)
        assert settled["success"] is True and settled["amount"] == str(charged)
        receipt = decode_settlement_response(response.headers["PAYMENT-RESPONSE"]).receipt or {}
        assert verify_receipt(receipt, harness.platform.receipt_address)
        assert (receipt["amount"], receipt["maxAmount"], receipt["scheme"]) == (str(charged), "50000", "upto")
    assert _settled(nothing)["transaction"] == ""  # a usage of 0 sends nothing
    assert _settled(part)["transaction"] and _settled(beyond)["transaction"]
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 12345 + 50_000
    # the agent had no gas and no allowance: each settlement carried its EIP-2612 permit for the
    # ceiling, which Permit2's transfers then spent down
    assert await asyncio.to_thread(harness.balance, payer) == 100_000_000 - 12345 - 50_000
    granted = harness.server.call(lambda _p: allowance(harness.chain.rpc, harness.usdc, payer, PERMIT2_ADDRESS))
    assert granted == 0


async def test_our_agent_pays_a_metered_route_and_reports_the_charge(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    deployment = await asyncio.to_thread(metered_deployment, harness, ceiling=40_000)
    app = metered_app(deployment.api_key, harness.url, deployment.endpoint_id)
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=harness.platform.receipt_address)
    async with (
        lifespan(app),
        httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver", auth=auth) as agent,
    ):
        first = await agent.get("/generate", params={"use": "1500"})  # no allowance: 412, then a permit
        second = await agent.get("/generate", params={"use": "0"})
    assert first.status_code == 200 and second.status_code == 200, (first.text, second.text)
    assert [(p.scheme, p.amount, p.ceiling, p.verified) for p in auth.payments] == [
        ("upto", 1500, 40_000, True),
        ("upto", 0, 40_000, True),
    ]
    assert auth.payments[0].transaction and not auth.payments[1].transaction
    # the refused first signature (412) still counts: whoever holds it could settle it; the second
    # request sent its permit at once (the nonce after the first's), and was charged nothing
    assert auth.spent["USDC"] == Decimal("0.0415")
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 1500


async def test_our_agent_pays_a_foundation_upto_seller_through_our_facilitator(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    deployment = await asyncio.to_thread(metered_deployment, harness)
    with deployment.api() as api:
        supported = api.get("/x402/supported").json()
    upto = [kind for kind in supported["kinds"] if kind["scheme"] == "upto"]
    assert upto and upto[0]["extra"]["facilitatorAddress"] == harness.chain.relayer.address
    pay_to = address_of(new_private_key())
    ceiling = {"amount": "30000", "asset": harness.usdc, "extra": {"name": "USD Coin", "version": "2"}}
    app = create_metered_app(deployment.api_key, harness.url, harness.network, pay_to, ceiling)
    # The SDK seller passes no permit nonce on: this agent approves Permit2 itself (with gas).
    await asyncio.to_thread(approve_permit2, harness, deployment.agent_key)
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=harness.platform.receipt_address)
    async with lifespan(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver", auth=auth) as agent:
            part = await agent.get("/generate", params={"use": "700"})
            nothing = await agent.get("/generate", params={"use": "0"})
    for response, charged in ((part, 700), (nothing, 0)):
        assert response.status_code == 200, response.text
        assert _settled(response)["amount"] == str(charged)
    # the SDK seller passes our facilitator's receipt on: our agent verifies amount and ceiling
    assert [(p.amount, p.ceiling, p.verified) for p in auth.payments] == [(700, 30_000, True), (0, 30_000, True)]
    assert await asyncio.to_thread(harness.balance, pay_to) == 700


def test_the_facilitator_verifies_and_settles_upto(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    deployment = metered_deployment(harness)
    pay_to = address_of(new_private_key())
    requirements = PaymentRequirements.model_validate(
        {
            "scheme": "upto",
            "network": harness.network,
            "amount": "20000",
            "asset": harness.usdc,
            "payTo": pay_to,
            "maxTimeoutSeconds": 300,
            "extra": {"name": "USD Coin", "version": "2", "facilitatorAddress": harness.chain.relayer.address},
        }
    )
    with deployment.api() as api:

        def call(path: str, payload: Any, amount: int | None = None) -> dict[str, Any]:
            terms = requirements.to_wire() | ({"amount": str(amount)} if amount is not None else {})
            reply = api.post(
                path, json={"x402Version": 2, "paymentPayload": payload.to_wire(), "paymentRequirements": terms}
            )
            assert reply.status_code == 200, reply.text
            answer: dict[str, Any] = reply.json()
            return answer

        unapproved = deployment.agent.sign_upto(requirements)
        assert call("/x402/verify", unapproved) == {
            "isValid": False,
            "invalidReason": "permit2_allowance_required",
            "payer": deployment.agent.address,
        }
        approve_permit2(harness, deployment.agent_key)
        payload = deployment.agent.sign_upto(requirements)
        assert call("/x402/verify", payload)["isValid"] is True
        over = call("/x402/settle", payload, amount=20_001)
        assert over["success"] is False and over["errorReason"] == "invalid_upto_evm_payload_settlement_exceeds_amount"
        settled = call("/x402/settle", payload, amount=777)
        assert settled["success"] is True and settled["amount"] == "777" and settled["transaction"]
        assert call("/x402/settle", payload, amount=999) == settled  # one authorization, one outcome
    assert harness.balance(pay_to) == 777


async def test_a_hold_its_seller_never_settles_lapses_into_a_failed_payment(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    deployment = await asyncio.to_thread(metered_deployment, harness, ceiling=30_000)
    await asyncio.to_thread(approve_permit2, harness, deployment.agent_key)
    gate = PaymentGate(api_key=deployment.api_key, platform_url=harness.url)
    route, url = PaidRoute(deployment.endpoint_id), "http://testserver/generate"
    recovery = harness.platform.settlement.recovery
    headers = {"Authorization": f"Bearer {deployment.api_key}"}
    async with httpx.AsyncClient(base_url=harness.url, headers=headers, timeout=60) as http:

        async def challenge(payment: str | None = None) -> Any:
            return await run_async(gate.process(route, RequestView("GET", url, payment)), http)

        async def recorded(challenge_id: str) -> dict[str, Any] | None:
            reply = await http.get(f"/agent/challenges/{challenge_id}")
            assert reply.status_code in (200, 404), reply.text
            return reply.json()["challenge"] if reply.status_code == 200 else None

        unpaid, paid = await challenge(), await challenge()
        offer = decode_payment_required(dict(paid.headers)["PAYMENT-REQUIRED"])
        payload = deployment.agent.sign_upto(offer.accepts[0], resource=offer.resource)
        held = await challenge(encode_header(payload))
        assert isinstance(held, ServeMetered)  # verified and held; the seller then stops, never settling it
        await run_async(gate.background(), http)  # registers the challenges issued and not paid
        unpaid_id = decode_payment_required(dict(unpaid.headers)["PAYMENT-REQUIRED"]).accepts[0].extra["challengeId"]
        held_id = held.payment.challenge_id
        holding = await recorded(held_id)  # a held payment's challenge is recorded with the hold
        assert holding is not None and holding["status"] == "processing" and holding["payment"] is not None
        statuses = [p["status"] for p in (await http.get("/agent/payments")).json()["data"]]
        assert statuses == ["authorized"]

        deadline = payload.payload.permit2_authorization.deadline
        assert await asyncio.to_thread(harness.server.call, lambda _p: recovery.close_lapsed_holds(deadline - 1)) == 0
        assert await asyncio.to_thread(harness.server.call, lambda _p: recovery.close_lapsed_holds(deadline)) == 1
        lapsed_payments = (await http.get("/agent/payments")).json()["data"]  # nothing was, nor can be, charged
        assert [(p["status"], p["errorReason"]) for p in lapsed_payments] == [("failed", "permit2_deadline_expired")]
        lapsed, other = await recorded(held_id), await recorded(unpaid_id)
        assert lapsed is not None and other is not None
        fields = ("endpointId", "network", "asset", "payTo", "amountMinor", "resource", "livemode")
        assert {k: lapsed[k] for k in fields} == {k: other[k] for k in fields}, (lapsed, other)
        assert lapsed["amountMinor"] == "30000" and other["status"] == "open"
        # the challenge reads as its payment does: failed, its permit expired
        assert lapsed["status"] == "failed" and lapsed["payment"]["errorReason"] == "permit2_deadline_expired"
        # done once: a second round finds nothing to close
        assert await asyncio.to_thread(harness.server.call, lambda _p: recovery.close_lapsed_holds(deadline)) == 0


@pytest.mark.both_databases  # captures of one payment: each database's locking
async def test_a_metered_payment_is_captured_by_its_id_once(dev_platform: PlatformHarness) -> None:
    harness = dev_platform
    deployment = await asyncio.to_thread(metered_deployment, harness, ceiling=30_000)
    await asyncio.to_thread(approve_permit2, harness, deployment.agent_key)
    other = await asyncio.to_thread(metered_deployment, harness, ceiling=30_000)  # another merchant
    gate = PaymentGate(api_key=deployment.api_key, platform_url=harness.url)
    route, url = PaidRoute(deployment.endpoint_id), "http://testserver/generate"
    headers = {"Authorization": f"Bearer {deployment.api_key}"}
    async with httpx.AsyncClient(base_url=harness.url, headers=headers, timeout=60) as http:
        unpaid = await run_async(gate.process(route, RequestView("GET", url, None)), http)
        offer = decode_payment_required(dict(unpaid.headers)["PAYMENT-REQUIRED"])
        payload = deployment.agent.sign_upto(offer.accepts[0], resource=offer.resource)
        held = await run_async(gate.process(route, RequestView("GET", url, encode_header(payload))), http)
        assert isinstance(held, ServeMetered) and held.payment.payment_id
        capture = f"/agent/settlements/{held.payment.payment_id}/capture"

        # what the payment cannot take is a 400, and nothing is taken
        for body, code in (
            ({}, "invalid_payload"),
            ({"amountMinor": "30001"}, "invalid_upto_evm_payload_settlement_exceeds_amount"),
        ):
            refused = await http.post(capture, json=body)
            assert refused.status_code == 400 and refused.json()["error"]["code"] == code, refused.text
        for bad in ({"amountMinor": "-1"}, {"amountMinor": "1.5"}, {"amountMinor": 7}, {"waitSeconds": 0}):
            assert (await http.post(capture, json=bad)).status_code == 400, bad
        elsewhere = await http.post(
            capture, json={"amountMinor": "1"}, headers={"Authorization": f"Bearer {other.api_key}"}
        )
        assert elsewhere.status_code == 404, elsewhere.text
        unknown = await http.post("/agent/settlements/00000000-0000-4000-8000-000000000000/capture", json={})
        assert unknown.status_code == 404, unknown.text
        assert (await http.get(f"/agent/payments/{held.payment.payment_id}")).json()["agentPayment"]["status"] == (
            "authorized"
        )

        first = await http.post(capture, json={"amountMinor": "1234"})
        again = await http.post(capture, json={"amountMinor": "5000"})  # one capture: the first stands
    assert first.status_code == 200 and first.json()["status"] == "settled", first.text
    assert first.json()["settlement"]["amount"] == "1234" and first.json()["settlement"]["transaction"]
    assert again.status_code == 200 and again.json()["settlement"] == first.json()["settlement"]
    assert await asyncio.to_thread(harness.balance, deployment.payout) == 1234
