"""Flask, plain WSGI, and Django (sync through WSGI, async through ASGI) get paid by a real agent,
through the real platform, on the dev chain and on anvil."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

import django
import flask
import httpx
import pytest
from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="x402mw-tests",
        ALLOWED_HOSTS=["testserver"],
        INSTALLED_APPS=[],
        USE_TZ=True,
        ROOT_URLCONF=__name__,
    )
    django.setup()

from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, JsonResponse
from django.test import override_settings
from django.urls import path

from tests.harness import Deployment, PlatformHarness
from x402mw.adapters.flask import X402
from x402mw.adapters.wsgi import SETTLEMENT_KEY
from x402mw.adapters.wsgi import PaymentMiddleware as WSGIPaymentMiddleware
from x402mw.client import X402Auth
from x402mw.protocol import decode_settlement_response


def _body(settlement: Any) -> dict[str, Any]:
    return {"tx": settlement.transaction, "payer": settlement.payer, "amount": settlement.amount}


def django_weather(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_body(request.x402))  # type: ignore[attr-defined]


async def django_async_weather(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_body(request.x402))  # type: ignore[attr-defined]


urlpatterns = [path("weather", django_weather), path("async/weather", django_async_weather)]


def flask_app(deployment: Deployment) -> flask.Flask:
    app = flask.Flask(__name__)
    x402 = X402(app, api_key=deployment.api_key, platform_url=deployment.harness.url)

    @app.get("/weather")
    @x402.require_payment(deployment.endpoint_id)
    def weather() -> Any:
        return flask.jsonify(_body(flask.g.x402))

    return app


def wsgi_app(deployment: Deployment) -> WSGIPaymentMiddleware:
    def inner(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        import json

        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(_body(environ[SETTLEMENT_KEY])).encode()]

    return WSGIPaymentMiddleware(
        inner,
        api_key=deployment.api_key,
        platform_url=deployment.harness.url,
        routes={"GET /weather": deployment.endpoint_id},
    )


def _django_settings(deployment: Deployment, route: str) -> override_settings:
    return override_settings(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=["x402mw.adapters.django.PaymentMiddleware"],
        X402={
            "API_KEY": deployment.api_key,
            "PLATFORM_URL": deployment.harness.url,
            "ROUTES": {f"GET {route}": deployment.endpoint_id},
        },
    )


def _check(response: httpx.Response, deployment: Deployment) -> None:
    assert response.status_code == 200, response.text
    settlement = decode_settlement_response(response.headers["PAYMENT-RESPONSE"])
    body = response.json()
    assert settlement.success and body["tx"] == settlement.transaction
    assert body["payer"].lower() == deployment.agent.address.lower() and body["amount"] == 10_000


@pytest.mark.parametrize("framework", ["flask", "wsgi", "django"])
def test_sync_sellers_get_paid(framework: str, any_chain_platform: PlatformHarness) -> None:
    deployment = any_chain_platform.deploy()
    auth = X402Auth(deployment.agent, max_amount="0.01", receipt_signer=any_chain_platform.platform.receipt_address)
    before = any_chain_platform.balance(deployment.payout)
    if framework == "django":
        with _django_settings(deployment, "/weather"):
            app: Any = WSGIHandler()
            with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://testserver", auth=auth) as c:
                responses = [c.get("/weather") for _ in range(2)]
    else:
        app = flask_app(deployment) if framework == "flask" else wsgi_app(deployment)
        with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://testserver", auth=auth) as c:
            responses = [c.get("/weather") for _ in range(2)]
    for response in responses:
        _check(response, deployment)
    assert any_chain_platform.balance(deployment.payout) == before + 20_000
    assert all(p.verified for p in auth.payments)


@pytest.mark.anyio
async def test_django_async_seller_gets_paid(any_chain_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(any_chain_platform.deploy)
    auth = X402Auth(deployment.agent, max_amount="0.01", receipt_signer=any_chain_platform.platform.receipt_address)
    before = await asyncio.to_thread(any_chain_platform.balance, deployment.payout)
    with _django_settings(deployment, "/async/weather"):
        app = ASGIHandler()
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://testserver", auth=auth, timeout=60
        ) as client:
            response = await client.get("/async/weather")
    _check(response, deployment)
    assert await asyncio.to_thread(any_chain_platform.balance, deployment.payout) == before + 10_000
