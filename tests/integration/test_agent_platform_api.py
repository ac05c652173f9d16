"""The platform's agent API beyond the paid request: facilitator endpoints, payout snapshots, usage
metering, the agent_payment.settled event, and the `x402mw pay` command."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.harness import Deployment, PlatformHarness, serve_app
from tests.sellers import asgi_transport, starlette_app
from x402mw.client import X402Auth
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.db import tables
from x402mw.platform.services.metering import settlement_fee
from x402mw.protocol import decode_payment_required, encode_header

pytestmark = pytest.mark.anyio


def _requirements(harness: PlatformHarness, pay_to: str, amount: int = 5_000) -> dict[str, Any]:
    return {
        "scheme": "exact",
        "network": harness.network,
        "amount": str(amount),
        "asset": harness.usdc,
        "payTo": pay_to,
        "maxTimeoutSeconds": 120,
        "extra": {"name": "USD Coin", "version": "2"},
    }


def test_facilitator_verifies_and_settles_for_third_party_sellers(dev_platform: PlatformHarness) -> None:
    deployment = dev_platform.deploy()
    pay_to = address_of(new_private_key())
    requirements = _requirements(dev_platform, pay_to)
    from x402mw.protocol import PaymentRequirements

    payload = deployment.agent.sign_payment(PaymentRequirements.model_validate(requirements)).to_wire()
    body = {"x402Version": 2, "paymentPayload": payload, "paymentRequirements": requirements}
    with deployment.api() as api:
        supported = httpx.get(f"{dev_platform.url}/x402/supported").json()
        verified = api.post("/x402/verify", json=body).json()
        settled = api.post("/x402/settle", json=body).json()
        again = api.post("/x402/settle", json=body).json()
        tampered = api.post("/x402/verify", json=body | {"paymentRequirements": requirements | {"amount": "1"}}).json()
        unauthenticated = httpx.post(f"{dev_platform.url}/x402/verify", json=body)
    kinds = {(kind["scheme"], kind["network"]): kind for kind in supported["kinds"]}
    exact, upto = kinds["exact", dev_platform.network], kinds["upto", dev_platform.network]
    assert exact["x402Version"] == upto["x402Version"] == 2
    assert {token["symbol"] for token in exact["extra"]["tokens"]} == {"USDC", "EURC"}
    assert "facilitatorAddress" not in exact["extra"]  # only what upto payers sign names the facilitator
    assert upto["extra"]["facilitatorAddress"] == dev_platform.chain.relayer.address
    assert dev_platform.chain.relayer.address in supported["signers"]["eip155:*"]
    assert verified == {"isValid": True, "payer": deployment.agent.address}
    assert settled["success"] is True and settled["transaction"].startswith("0x")
    assert again == settled, "settling the same payload again returns the original settlement"
    assert tampered["isValid"] is False and tampered["invalidReason"] == "invalid_exact_evm_payload_authorization_value"
    assert unauthenticated.status_code == 401
    assert dev_platform.balance(pay_to) == 5_000


def test_facilitator_refuses_an_unfunded_payer_without_charging(dev_platform: PlatformHarness) -> None:
    deployment = dev_platform.deploy(fund="")
    pay_to = address_of(new_private_key())
    requirements = _requirements(dev_platform, pay_to)
    from x402mw.protocol import PaymentRequirements

    payload = deployment.agent.sign_payment(PaymentRequirements.model_validate(requirements)).to_wire()
    body = {"x402Version": 2, "paymentPayload": payload, "paymentRequirements": requirements}
    with deployment.api() as api:
        verified = api.post("/x402/verify", json=body).json()
        settled = api.post("/x402/settle", json=body).json()
    assert verified["isValid"] is False and verified["invalidReason"] == "insufficient_funds"
    assert settled["success"] is False and settled["errorReason"] == "insufficient_funds"
    assert dev_platform.balance(pay_to) == 0


async def test_a_payout_change_affects_only_later_challenges(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy)
    app = starlette_app(deployment.api_key, dev_platform.url, deployment.endpoint_id)
    new_payout = address_of(new_private_key())
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver", timeout=60) as client:
        old_offer = decode_payment_required((await client.get("/weather")).headers["PAYMENT-REQUIRED"]).accepts[0]
        with deployment.api() as api:
            patched = await asyncio.to_thread(
                api.patch, f"/agent/endpoints/{deployment.endpoint_id}", json={"payoutAddress": new_payout}
            )
        assert patched.status_code == 200 and patched.json()["endpoint"]["payoutAddress"] == new_payout
        old = await client.get(
            "/weather", headers={"PAYMENT-SIGNATURE": encode_header(deployment.agent.sign_payment(old_offer))}
        )
    assert old.status_code == 200, old.text
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 10_000
    # A fresh seller learns the new terms; its challenges pay the new address.
    fresh = starlette_app(deployment.api_key, dev_platform.url, deployment.endpoint_id)
    async with httpx.AsyncClient(
        transport=asgi_transport(fresh), base_url="http://testserver", auth=X402Auth(deployment.agent), timeout=60
    ) as client:
        assert (await client.get("/weather")).status_code == 200
    assert await asyncio.to_thread(dev_platform.balance, new_payout) == 10_000


async def test_usage_is_metered_and_settlements_are_recorded_as_events(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy)
    app = starlette_app(deployment.api_key, dev_platform.url, deployment.endpoint_id)
    auth = X402Auth(deployment.agent)
    async with httpx.AsyncClient(
        transport=asgi_transport(app), base_url="http://testserver", auth=auth, timeout=60
    ) as client:
        for _ in range(3):
            assert (await client.get("/weather")).status_code == 200
    with deployment.api() as api:
        usage = (await asyncio.to_thread(api.get, "/agent/usage")).json()["usage"]
        payments = (await asyncio.to_thread(api.get, "/agent/payments", params={"limit": 2})).json()
        bad_months = [
            await asyncio.to_thread(api.get, "/agent/usage", params={"month": month})
            for month in ("2026-13", "2026-1", "0000-01", "", "2026-11 ")
        ]
        early = (await asyncio.to_thread(api.get, "/agent/usage", params={"month": "0434-06"})).json()["usage"]
    assert usage["settlements"] == 3 and usage["volume"] == {"USDC": "0.03"} and usage["billed"] is False
    assert usage["plannedFee"] == {} and usage["freeSettlements"] == 3
    assert len(payments["data"]) == 2 and payments["hasMore"] is True
    for bad_month in bad_months:
        assert bad_month.status_code == 400 and bad_month.json()["error"]["param"] == "month"
    assert early["month"] == "0434-06" and early["settlements"] == 0  # the year keeps its leading zero

    async def events(platform: Any) -> list[Any]:
        async with platform.engine.connect() as conn:
            found = await conn.execute(
                select(tables.events).where(tables.events.c.merchant_id == deployment.merchant_id)
            )
            return list(found.mappings())

    recorded = await asyncio.to_thread(dev_platform.server.call, events)
    assert [e["type"] for e in recorded] == ["agent_payment.settled"] * 3
    transactions = {e["data"]["agentPayment"]["transaction"] for e in recorded}
    assert transactions == {p.transaction for p in auth.payments}


def test_the_faucet_takes_amounts_in_the_api_grammar(dev_platform: PlatformHarness) -> None:
    # The faucet read " 1 ", a full-width digit, "1.", ".5" and "+1" as amounts and minted them.
    _, key, _ = dev_platform.merchant()
    address = address_of(new_private_key())
    with httpx.Client(base_url=dev_platform.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:

        def faucet(amount: object) -> httpx.Response:
            body = {"network": dev_platform.network, "currency": "USDC", "address": address, "amount": amount}
            return api.post("/sandbox/faucet", json=body)

        for bad in [" 1 ", "１", "1.", ".5", "+1", "01", "0", "1e3", "1.0000000", "1000000.000001", "", True, None]:
            reply = faucet(bad)
            assert reply.status_code == 400, (bad, reply.text)
            assert reply.json()["error"]["param"] == "amount", bad
        assert dev_platform.balance(address) == 0
        assert faucet("25.00").json()["amount"] == "25.00"  # answered as sent
        assert faucet(0.5).json()["amount"] == "0.5"  # a JSON number, read by its value
        assert faucet(1000000).json()["amount"] == "1000000"
    assert dev_platform.balance(address) == 1_000_025_500_000


def test_planned_fee_is_the_larger_of_the_minimum_and_three_per_mille() -> None:
    assert settlement_fee(10_000) == 5_000  # 0.01 -> the 0.005 minimum
    assert settlement_fee(10_000_000) == 30_000  # 10.00 -> 0.3 % = 0.03
    assert settlement_fee(1_666_667) == 5_001  # rounded up, never down


def test_the_pay_command_pays_a_real_seller(deployment: Deployment, tmp_path: Any) -> None:
    app = starlette_app(deployment.api_key, deployment.harness.url, deployment.endpoint_id)
    with serve_app(app) as url:
        key_file = tmp_path / "agent.key"
        key_file.write_text(deployment.agent_key.hex())
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "x402mw",
                "pay",
                f"{url}/weather",
                "--private-key-file",
                str(key_file),
                "--max-amount",
                "0.02",
                "--receipt-signer",
                deployment.harness.platform.receipt_address,
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        over_cap = subprocess.run(
            [
                sys.executable,
                "-m",
                "x402mw",
                "pay",
                f"{url}/weather",
                "--private-key-file",
                str(key_file),
                "--max-amount",
                "0.001",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == 200
    assert over_cap.returncode != 0 and "Traceback" not in over_cap.stderr
    assert deployment.harness.balance(deployment.payout) == 10_000


@pytest.mark.parametrize("registered", [False, True])
async def test_another_merchants_challenge_is_refused_by_the_facilitator(
    dev_platform: PlatformHarness, registered: bool
) -> None:
    # Merchant A's middleware issues a sealed challenge; the agent pays it. Merchant B, holding the
    # payload, tries to settle it through the facilitator with its own key: 404, nothing moves, and A
    # settles it as its own payment afterwards.
    owner = await asyncio.to_thread(dev_platform.deploy)
    other = await asyncio.to_thread(dev_platform.deploy)
    app = starlette_app(owner.api_key, dev_platform.url, owner.endpoint_id)
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver", timeout=60) as client:
        challenge = await client.get("/weather")
    accepted = decode_payment_required(challenge.headers["PAYMENT-REQUIRED"]).accepts[0]
    if registered:
        with owner.api() as api:
            row = accepted.to_wire()
            batch = {
                "challenges": [
                    {
                        "challengeId": row["extra"]["challengeId"],
                        "endpointId": owner.endpoint_id,
                        "network": row["network"],
                        "asset": row["asset"],
                        "payTo": row["payTo"],
                        "amount": row["amount"],
                        "resource": "http://testserver/weather",
                        "expiresAt": row["extra"]["expiresAt"],
                    }
                ]
            }
            assert api.post("/agent/challenges/batch", json=batch).status_code == 200
    payload = owner.agent.sign_payment(accepted).to_wire()
    body = {"x402Version": 2, "paymentPayload": payload, "paymentRequirements": accepted.to_wire()}
    with other.api() as api:
        for operation in ("/x402/verify", "/x402/settle"):
            refused = api.post(operation, json=body)
            assert refused.status_code == 404, refused.text
            error = refused.json()["error"]
            assert (error["code"], error["param"]) == ("resource_missing", "paymentRequirements.extra.challengeId")
    assert await asyncio.to_thread(dev_platform.balance, owner.payout) == 0

    async def payments_of(merchant_id: str) -> int:
        async with dev_platform.platform.engine.connect() as conn:
            table = tables.agent_payments
            rows = await conn.execute(select(table.c.id).where(table.c.merchant_id == merchant_id))
            return len(rows.all())

    assert await asyncio.to_thread(dev_platform.server.call, lambda p: payments_of(other.merchant_id)) == 0
    with owner.api() as api, other.api() as other_api:
        settled = api.post("/x402/settle", json=body).json()
        again = other_api.post("/x402/settle", json=body)
    assert settled["success"] is True, settled
    assert again.status_code == 404  # the settled payment is none of B's business either
    assert await asyncio.to_thread(dev_platform.balance, owner.payout) == 10_000
    assert await asyncio.to_thread(dev_platform.server.call, lambda p: payments_of(owner.merchant_id)) == 1
