"""Flask, plain WSGI, and Django (sync through WSGI, async through ASGI) get paid by a real agent,
through the real platform, on the dev chain and on anvil."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.harness import Deployment, PlatformHarness, each_on_one_chain
from tests.sync_sellers import SYNC_FRAMEWORKS, django_settings, sync_seller
from x402mw.client import X402Auth
from x402mw.protocol import decode_settlement_response


def _body(settlement: Any) -> dict[str, Any]:
    return {"tx": settlement.transaction, "payer": settlement.payer, "amount": settlement.amount}


def _check(response: httpx.Response, deployment: Deployment) -> None:
    assert response.status_code == 200, response.text
    settlement = decode_settlement_response(response.headers["PAYMENT-RESPONSE"])
    body = response.json()
    assert settlement.success and body["tx"] == settlement.transaction
    assert body["payer"].lower() == deployment.agent.address.lower() and body["amount"] == 10_000


@each_on_one_chain("framework", SYNC_FRAMEWORKS)
def test_sync_sellers_get_paid(framework: str, any_chain_platform: PlatformHarness) -> None:
    deployment = any_chain_platform.deploy()
    auth = X402Auth(deployment.agent, max_amount="0.01", receipt_signer=any_chain_platform.platform.receipt_address)
    before = any_chain_platform.balance(deployment.payout)
    with (
        sync_seller(framework, deployment, "/weather", _body) as app,
        httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://testserver", auth=auth) as c,
    ):
        responses = [c.get("/weather") for _ in range(2)]
    for response in responses:
        _check(response, deployment)
    assert any_chain_platform.balance(deployment.payout) == before + 20_000
    assert all(p.verified for p in auth.payments)


@pytest.mark.anyio
async def test_django_async_seller_gets_paid(any_chain_platform: PlatformHarness) -> None:
    from django.core.handlers.asgi import ASGIHandler

    deployment = await asyncio.to_thread(any_chain_platform.deploy)
    auth = X402Auth(deployment.agent, max_amount="0.01", receipt_signer=any_chain_platform.platform.receipt_address)
    before = await asyncio.to_thread(any_chain_platform.balance, deployment.payout)
    with django_settings(deployment, "/weather", _body, asynchronous=True):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=ASGIHandler()), base_url="http://testserver", auth=auth, timeout=60
        ) as client:
            response = await client.get("/async/weather")
    _check(response, deployment)
    assert await asyncio.to_thread(any_chain_platform.balance, deployment.payout) == before + 10_000
