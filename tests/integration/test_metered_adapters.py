"""Every adapter reports usage the same way (``x402.charge(amount)`` on the object where the handler
finds its payment) and settles it after the handler: Flask, plain WSGI, Django (sync and async),
plain ASGI, FastAPI; our ``X402Auth`` pays, through the real platform on the dev chain."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.harness import PlatformHarness
from tests.metered_fixtures import metered_deployment
from tests.sellers import asgi_transport, fastapi_app, lifespan, plain_asgi_app
from tests.sync_sellers import SYNC_FRAMEWORKS, django_settings, sync_seller
from x402mw.client import X402Auth
from x402mw.protocol import decode_settlement_response

USE = 1_700


def _charge(payment: Any) -> dict[str, Any]:
    payment.charge(USE)
    return {"charged": payment.charged}


def _charge_a_price(payment: Any) -> dict[str, Any]:
    return {"charged": payment.charge("$0.0017")}  # a price works as well as atomic units


def _check(response: httpx.Response, auth: X402Auth) -> None:
    assert response.status_code == 200, response.text
    assert response.json() == {"charged": USE}
    settled = decode_settlement_response(response.headers["PAYMENT-RESPONSE"])
    assert settled.success and settled.amount == USE and settled.transaction
    assert [(p.amount, p.ceiling, p.verified) for p in auth.payments] == [(USE, 50_000, True)]


@pytest.mark.parametrize("framework", SYNC_FRAMEWORKS)
def test_sync_adapters_settle_the_usage_reported(framework: str, dev_platform: PlatformHarness) -> None:
    deployment = metered_deployment(dev_platform)
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=dev_platform.platform.receipt_address)
    with (
        sync_seller(framework, deployment, "/generate", _charge) as app,
        httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://testserver", auth=auth) as c,
    ):
        response = c.get("/generate")
    _check(response, auth)
    assert dev_platform.balance(deployment.payout) == USE


@pytest.mark.anyio
@pytest.mark.parametrize("framework", ["asgi", "fastapi", "django"])
async def test_async_adapters_settle_the_usage_reported(framework: str, dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(metered_deployment, dev_platform)
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=dev_platform.platform.receipt_address)
    if framework == "django":
        from django.core.handlers.asgi import ASGIHandler

        with django_settings(deployment, "/generate", _charge, asynchronous=True):
            transport = httpx.ASGITransport(app=ASGIHandler())
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver", auth=auth) as client:
                response = await client.get("/async/generate")
    else:
        seller, respond = (plain_asgi_app, _charge) if framework == "asgi" else (fastapi_app, _charge_a_price)
        app = seller(
            deployment.api_key, deployment.harness.url, deployment.endpoint_id, path="/generate", respond=respond
        )
        async with (
            lifespan(app),
            httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver", auth=auth) as client,
        ):
            response = await client.get("/generate")
    _check(response, auth)
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == USE
