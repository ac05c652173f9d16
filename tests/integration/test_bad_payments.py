"""Every bad payment gets a clear, documented answer; nothing is charged and nothing is lost."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import httpx
import pytest

from tests.harness import Deployment, PlatformHarness, sqlite_only
from tests.sellers import asgi_transport, starlette_app
from x402mw.evm.eip712 import TokenDomain, TransferAuthorization, random_nonce, sign_transfer
from x402mw.evm.keys import address_of, new_private_key
from x402mw.protocol import (
    PaymentRequirements,
    decode_payment_required,
    decode_settlement_response,
    encode_header,
    reasons,
)

pytestmark = pytest.mark.anyio


class Seller:
    def __init__(self, deployment: Deployment, **options: Any) -> None:
        self.deployment = deployment
        self.app = starlette_app(deployment.api_key, deployment.harness.url, deployment.endpoint_id, **options)

    async def get(self, headers: dict[str, str] | None = None, path: str = "/weather") -> httpx.Response:
        async with httpx.AsyncClient(
            transport=asgi_transport(self.app), base_url="http://testserver", timeout=60
        ) as client:
            return await client.get(path, headers=headers or {})

    async def offer(self, path: str = "/weather") -> PaymentRequirements:
        return decode_payment_required((await self.get(path=path)).headers["PAYMENT-REQUIRED"]).accepts[0]


def forge(
    offer: PaymentRequirements,
    key: bytes,
    *,
    accepted: dict[str, Any] | None = None,
    signer: bytes | None = None,
    signature: str | None = None,
    **auth: Any,
) -> str:
    """A PAYMENT-SIGNATURE for ``offer`` with authorization fields or the echoed terms overridden."""
    now = int(time.time())
    fields = {
        "from_address": address_of(key),
        "to": offer.pay_to,
        "value": offer.amount,
        "valid_after": now - 60,
        "valid_before": now + 300,
        "nonce": random_nonce(),
    } | auth
    authorization = TransferAuthorization(**fields)
    chain_id = int(offer.network.split(":")[1])
    domain = TokenDomain(offer.extra["name"], offer.extra["version"], chain_id, offer.asset)
    signed = sign_transfer(signer or key, domain, authorization)
    payload = {
        "x402Version": 2,
        "accepted": offer.to_wire() | (accepted or {}),
        "payload": {
            "signature": signature or "0x" + signed.hex(),
            "authorization": {
                "from": authorization.from_address,
                "to": authorization.to,
                "value": str(authorization.value),
                "validAfter": str(authorization.valid_after),
                "validBefore": str(authorization.valid_before),
                "nonce": "0x" + authorization.nonce.hex(),
            },
        },
    }
    return encode_header(payload)


async def _refused(seller: Seller, header: str, reason: str, path: str = "/weather") -> httpx.Response:
    response = await seller.get({"PAYMENT-SIGNATURE": header}, path)
    assert response.status_code == 402, response.text
    required = decode_payment_required(response.headers["PAYMENT-REQUIRED"])
    assert required.error == reason, (required.error, response.json().get("message"))
    assert response.json()["message"], "a human-readable message accompanies the reason"
    assert required.accepts, "a fresh challenge comes with the refusal"
    return response


@pytest.mark.parametrize(
    "header",
    [
        "%%%garbled%%%",
        "A" * 9000,
        "not base64 !",
        base64.b64encode(b"hello, not json").decode(),
        base64.b64encode(b"[1, 2, 3]").decode(),
        base64.b64encode(json.dumps({"x402Version": 2, "payload": {}}).encode()).decode(),
        base64.b64encode(b"\xff\xfe\x00").decode(),
    ],
)
async def test_malformed_headers_are_refused_as_invalid_payload(deployment: Deployment, header: str) -> None:
    seller = Seller(deployment)
    await _refused(seller, header, reasons.INVALID_PAYLOAD)


@pytest.mark.parametrize(
    "change",
    [
        {"network": "eip155:1"},
        {"asset": "0x" + "1" * 40},
        {"payTo": "0x" + "2" * 40},
        {"amount": "1"},
        {"maxTimeoutSeconds": 99999},
        {
            "extra": {
                "name": "USD Coin",
                "version": "2",
                "challengeId": "forged",
                "expiresAt": 9999999999,
                "seal": "x",
            }
        },
    ],
)
async def test_tampered_terms_are_refused_before_settlement(deployment: Deployment, change: dict[str, Any]) -> None:
    seller = Seller(deployment)
    offer = await seller.offer()
    await _refused(seller, forge(offer, deployment.agent_key, accepted=change), reasons.INVALID_REQUIREMENTS)


@pytest.mark.parametrize(
    "seal", ["é" * 32, "ｆ" * 32, "\u2028" * 43, "é" * 43], ids=["latin", "fullwidth", "legacy", "legacy-latin"]
)
async def test_a_seal_in_other_characters_is_an_altered_seal(deployment: Deployment, seal: str) -> None:
    seller = Seller(deployment)
    offer = await seller.offer()
    accepted = {"extra": offer.extra | {"seal": seal}}  # the challenge's own id and expiry
    await _refused(seller, forge(offer, deployment.agent_key, accepted=accepted), reasons.INVALID_REQUIREMENTS)


async def test_wrong_scheme_is_refused(deployment: Deployment) -> None:
    seller = Seller(deployment)
    offer = await seller.offer()
    await _refused(seller, forge(offer, deployment.agent_key, accepted={"scheme": "upto"}), reasons.INVALID_SCHEME)


async def test_authorization_that_disagrees_with_the_terms_is_refused(deployment: Deployment) -> None:
    seller = Seller(deployment)
    offer = await seller.offer()
    key = deployment.agent_key
    await _refused(seller, forge(offer, key, to=address_of(new_private_key())), reasons.INVALID_RECIPIENT)
    await _refused(seller, forge(offer, key, value=offer.amount - 1), reasons.INVALID_VALUE)


async def test_time_window_is_enforced(deployment: Deployment) -> None:
    seller = Seller(deployment)
    offer = await seller.offer()
    now = int(time.time())
    key = deployment.agent_key
    await _refused(seller, forge(offer, key, valid_before=now - 10), reasons.INVALID_VALID_BEFORE)
    await _refused(seller, forge(offer, key, valid_before=now + 2), reasons.INVALID_VALID_BEFORE)
    await _refused(seller, forge(offer, key, valid_after=now + 3600), reasons.INVALID_VALID_AFTER)


async def test_bad_signatures_are_refused(deployment: Deployment) -> None:
    seller = Seller(deployment)
    offer = await seller.offer()
    key = deployment.agent_key
    await _refused(seller, forge(offer, key, signer=new_private_key()), reasons.INVALID_SIGNATURE)
    await _refused(seller, forge(offer, key, signature="0x" + "11" * 65), reasons.INVALID_SIGNATURE)
    await _refused(seller, forge(offer, key, signature="0x1234"), reasons.INVALID_SIGNATURE)


async def test_insufficient_balance_charges_nothing(dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, fund="")
    seller = Seller(deployment)
    offer = await seller.offer()
    header = forge(offer, deployment.agent_key)
    response = await _refused(seller, header, reasons.INSUFFICIENT_FUNDS)
    assert decode_settlement_response(response.headers["PAYMENT-RESPONSE"]).success is False
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 0
    # Once funded, the very same signature goes through: the refusal did not burn it.
    await asyncio.to_thread(dev_platform.fund, deployment.api_key, deployment.agent.address, "1")
    paid = await seller.get({"PAYMENT-SIGNATURE": header})
    assert paid.status_code == 200
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == offer.amount


async def test_the_challenge_of_a_cheap_request_cannot_pay_for_a_dear_one(dev_platform: PlatformHarness) -> None:
    # a challenge's seal binds it to its route, not to the request it priced: the paid request is priced again
    deployment = await asyncio.to_thread(dev_platform.deploy, amount_minor=None, pricing="dynamic")

    def price(request: Any) -> str:
        return "0.25" if request.query_params.get("size") == "l" else "0.01"

    seller = Seller(deployment, amount=price)
    cheap = await seller.offer("/weather?size=s")
    assert cheap.amount == 10_000
    refused = await _refused(
        seller, forge(cheap, deployment.agent_key), reasons.INVALID_REQUIREMENTS, "/weather?size=l"
    )
    assert decode_payment_required(refused.headers["PAYMENT-REQUIRED"]).accepts[0].amount == 250_000
    assert "250000" in refused.json()["message"]
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 0
    # paying a dear challenge for a cheap request is the agent's choice: it pays what it accepted
    dear = await seller.offer("/weather?size=l")
    paid = await seller.get({"PAYMENT-SIGNATURE": forge(dear, deployment.agent_key)}, "/weather?size=s")
    assert paid.status_code == 200, paid.text
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 250_000


async def test_a_used_nonce_cannot_pay_again(deployment: Deployment) -> None:
    seller = Seller(deployment)
    offer = await seller.offer()
    nonce = random_nonce()
    first = await seller.get({"PAYMENT-SIGNATURE": forge(offer, deployment.agent_key, nonce=nonce)})
    assert first.status_code == 200
    second_offer = await seller.offer()
    # Another authorization (a different validity window) under the same nonce:
    reused = forge(second_offer, deployment.agent_key, nonce=nonce, valid_before=int(time.time()) + 500)
    await _refused(seller, reused, reasons.NONCE_USED)
    assert await asyncio.to_thread(deployment.harness.balance, deployment.payout) == offer.amount


async def test_the_same_signature_again_returns_the_original_receipt(deployment: Deployment) -> None:
    seller = Seller(deployment)
    header = forge(await seller.offer(), deployment.agent_key)
    first = await seller.get({"PAYMENT-SIGNATURE": header})
    again = await seller.get({"PAYMENT-SIGNATURE": header})
    assert first.status_code == again.status_code == 200
    assert first.headers["PAYMENT-RESPONSE"] == again.headers["PAYMENT-RESPONSE"]
    assert await asyncio.to_thread(deployment.harness.balance, deployment.payout) == 10_000


def test_usdt_endpoints_are_refused(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with httpx.Client(base_url=dev_platform.url, headers={"x-api-key": key}) as api:
        reply = api.post(
            "/agent/endpoints",
            json={
                "name": "x",
                "resourceUrl": "https://example.com/x",
                "chainId": dev_platform.chain.chain_id,
                "currency": "USDT",
                "payoutAddress": address_of(new_private_key()),
                "pricingMode": "fixed",
                "amountMinor": "10000",
            },
        )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (
        "unsupported_currency",
        "currency",
        "invalid_request_error",
    )
    assert error["requestId"] == reply.headers["request-id"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"chainId": "1"}, "chainId"),
        ({"amountMinor": 0.01}, "amountMinor"),
        ({"amountMinor": "0"}, "amountMinor"),
        ({"amountMinor": "-5"}, "amountMinor"),
        ({"payoutAddress": "0x123"}, "payoutAddress"),
        ({"resourceUrl": "ftp://x"}, "resourceUrl"),
        ({"pricingMode": "auction"}, "pricingMode"),
        ({"releasePolicy": "never"}, "releasePolicy"),
        ({"currency": "DOGE"}, "currency"),
        ({"chainId": 999999}, "chainId"),
        ({"surprise": True}, "surprise"),
    ],
)
def test_endpoint_creation_validates_every_field(
    dev_platform: PlatformHarness, body: dict[str, Any], param: str
) -> None:
    _, key, _ = dev_platform.merchant()
    good = {
        "name": "x",
        "resourceUrl": "https://example.com/x",
        "chainId": dev_platform.chain.chain_id,
        "currency": "USDC",
        "payoutAddress": address_of(new_private_key()),
        "pricingMode": "fixed",
        "amountMinor": "10000",
    }
    with httpx.Client(base_url=dev_platform.url, headers={"Authorization": f"Bearer {key}"}) as api:
        reply = api.post("/agent/endpoints", json=good | body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


def test_malformed_json_bodies_get_400(dev_platform: PlatformHarness) -> None:
    _, key, _ = dev_platform.merchant()
    with httpx.Client(base_url=dev_platform.url, headers={"Authorization": f"Bearer {key}"}) as api:
        for content in (b"{", b"[]", b"", b"null", b'{"a": NaN'):
            reply = api.post("/agent/endpoints", content=content, headers={"content-type": "application/json"})
            assert reply.status_code == 400 and reply.json()["error"]["code"] in (
                "invalid_json",
                "body_missing",
            )


def test_unknown_and_foreign_ids_are_404(dev_platform: PlatformHarness) -> None:
    mine = dev_platform.deploy(fund="")
    other = dev_platform.deploy(fund="")
    with mine.api() as api:
        for path in (
            f"/agent/endpoints/{other.endpoint_id}",
            "/agent/endpoints/nope",
            "/agent/challenges/nope",
            "/agent/payments/nope",
        ):
            reply = api.get(path)
            assert reply.status_code == 404 and reply.json()["error"]["code"] == "resource_missing", path
        patch = api.patch(f"/agent/endpoints/{other.endpoint_id}", json={"name": "stolen"})
        assert patch.status_code == 404


def test_bad_and_revoked_keys_get_401(dev_platform: PlatformHarness) -> None:
    deployment = dev_platform.deploy(fund="")
    url = f"{dev_platform.url}/agent/endpoints"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer sk_test_wrong"}).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Basic abc"}).status_code == 401
    assert httpx.get(url, headers={"x-api-key": deployment.api_key}).status_code == 200
    dev_platform.server.call(lambda p: p.keys.revoke(deployment.key_id))
    reply = httpx.get(url, headers={"x-api-key": deployment.api_key})
    assert reply.status_code == 401
    assert reply.json()["error"]["type"] == "authentication_error"


async def test_a_seller_with_a_revoked_key_answers_500_not_a_silent_402(
    dev_platform: PlatformHarness,
) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy, fund="")
    await asyncio.to_thread(dev_platform.server.call, lambda p: p.keys.revoke(deployment.key_id))
    response = await Seller(deployment).get()
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "payment_configuration_error"


@sqlite_only  # never reaches the database
async def test_an_unreachable_platform_is_a_503(deployment: Deployment) -> None:
    app = starlette_app(deployment.api_key, "http://127.0.0.1:9/v1", deployment.endpoint_id)
    async with httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver") as client:
        response = await client.get("/weather")
    assert response.status_code == 503 and response.headers["retry-after"]


async def test_a_transfer_the_chain_reverts_is_reported_failed(dev_platform: PlatformHarness) -> None:
    from x402mw.platform.services.settlement.outcomes import SettleRequest
    from x402mw.platform.services.settlement.service import SettlementService
    from x402mw.protocol import decode_payment_payload

    deployment = await asyncio.to_thread(dev_platform.deploy, fund="")
    offer = await Seller(deployment).offer()
    payload = decode_payment_payload(forge(offer, deployment.agent_key))

    async def settle_without_simulation(platform: Any) -> Any:
        unsimulated = SettlementService(
            platform.engine, platform.chains, new_private_key(), platform.clock, simulate=False
        )
        try:
            return await unsimulated.settle(SettleRequest(accepted=offer, payload=payload))
        finally:
            await unsimulated.aclose()

    outcome = await asyncio.to_thread(dev_platform.server.call, settle_without_simulation)
    assert outcome.status == "failed"
    assert outcome.response.error_reason in (reasons.TRANSACTION_REVERTED, reasons.INSUFFICIENT_FUNDS)
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 0
