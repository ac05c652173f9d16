"""Every adapter reports usage the same way (``x402.charge(amount)`` on the object where the handler
finds its payment) and settles it after the handler: Flask, plain WSGI, Django (sync and async),
plain ASGI, FastAPI; our ``X402Auth`` pays, through the real platform on the dev chain."""

from __future__ import annotations

import asyncio
import json
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
from starlette.requests import Request

from tests.harness import Deployment, PlatformHarness
from tests.metered_fixtures import metered_deployment
from tests.sellers import asgi_transport, lifespan
from x402mw.adapters import asgi as asgi_adapter
from x402mw.adapters.flask import X402
from x402mw.adapters.starlette import PaymentMiddleware, paid
from x402mw.adapters.wsgi import SETTLEMENT_KEY
from x402mw.adapters.wsgi import PaymentMiddleware as WSGIPaymentMiddleware
from x402mw.client import X402Auth
from x402mw.protocol import decode_settlement_response

USE = 1_700


def django_view(request: HttpRequest) -> JsonResponse:
    request.x402.charge(USE)  # type: ignore[attr-defined]
    return JsonResponse({"charged": request.x402.charged})  # type: ignore[attr-defined]


async def django_async_view(request: HttpRequest) -> JsonResponse:
    request.x402.charge(USE)  # type: ignore[attr-defined]
    return JsonResponse({"charged": request.x402.charged})  # type: ignore[attr-defined]


urlpatterns = [path("generate", django_view), path("async/generate", django_async_view)]


def _django(deployment: Deployment, route: str) -> override_settings:
    return override_settings(
        ROOT_URLCONF=__name__,
        MIDDLEWARE=["x402mw.adapters.django.PaymentMiddleware"],
        X402={
            "API_KEY": deployment.api_key,
            "PLATFORM_URL": deployment.harness.url,
            "ROUTES": {f"GET {route}": deployment.endpoint_id},
        },
    )


def _flask(deployment: Deployment) -> flask.Flask:
    app = flask.Flask(__name__)
    x402 = X402(app, api_key=deployment.api_key, platform_url=deployment.harness.url)

    @app.get("/generate")
    @x402.require_payment(deployment.endpoint_id)
    def generate() -> Any:
        flask.g.x402.charge(USE)
        return flask.jsonify({"charged": flask.g.x402.charged})

    return app


def _wsgi(deployment: Deployment) -> WSGIPaymentMiddleware:
    def inner(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        environ[SETTLEMENT_KEY].charge(USE)
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"charged": environ[SETTLEMENT_KEY].charged}).encode()]

    return WSGIPaymentMiddleware(
        inner,
        api_key=deployment.api_key,
        platform_url=deployment.harness.url,
        routes={"GET /generate": deployment.endpoint_id},
    )


def _plain_asgi(deployment: Deployment) -> Any:
    async def inner(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        payment = scope["state"]["x402"]
        payment.charge(USE)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps({"charged": payment.charged}).encode()})

    return asgi_adapter.PaymentMiddleware(
        inner,
        api_key=deployment.api_key,
        platform_url=deployment.harness.url,
        routes={"GET /generate": deployment.endpoint_id},
    )


def _fastapi(deployment: Deployment) -> Any:
    from fastapi import FastAPI

    app = FastAPI()
    app.add_middleware(PaymentMiddleware, api_key=deployment.api_key, platform_url=deployment.harness.url)

    @app.get("/generate")
    @paid(deployment.endpoint_id)
    async def generate(request: Request) -> dict[str, int]:
        return {"charged": request.state.x402.charge("$0.0017")}  # a price works as well as atomic units

    return app


def _check(response: httpx.Response, auth: X402Auth) -> None:
    assert response.status_code == 200, response.text
    assert response.json() == {"charged": USE}
    settled = decode_settlement_response(response.headers["PAYMENT-RESPONSE"])
    assert settled.success and settled.amount == USE and settled.transaction
    assert [(p.amount, p.ceiling, p.verified) for p in auth.payments] == [(USE, 50_000, True)]


@pytest.mark.parametrize("framework", ["flask", "wsgi", "django"])
def test_sync_adapters_settle_the_usage_reported(framework: str, dev_platform: PlatformHarness) -> None:
    deployment = metered_deployment(dev_platform)
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=dev_platform.platform.receipt_address)
    if framework == "django":
        with (
            _django(deployment, "/generate"),
            httpx.Client(
                transport=httpx.WSGITransport(app=WSGIHandler()), base_url="http://testserver", auth=auth
            ) as c,
        ):
            response = c.get("/generate")
    else:
        app = _flask(deployment) if framework == "flask" else _wsgi(deployment)
        with httpx.Client(transport=httpx.WSGITransport(app=app), base_url="http://testserver", auth=auth) as c:
            response = c.get("/generate")
    _check(response, auth)
    assert dev_platform.balance(deployment.payout) == USE


@pytest.mark.anyio
@pytest.mark.parametrize("framework", ["asgi", "fastapi", "django"])
async def test_async_adapters_settle_the_usage_reported(framework: str, dev_platform: PlatformHarness) -> None:
    deployment = await asyncio.to_thread(metered_deployment, dev_platform)
    auth = X402Auth(deployment.agent, max_amount="0.05", receipt_signer=dev_platform.platform.receipt_address)
    if framework == "django":
        with _django(deployment, "/async/generate"):
            transport = httpx.ASGITransport(app=ASGIHandler())
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver", auth=auth) as client:
                response = await client.get("/async/generate")
    else:
        app = _plain_asgi(deployment) if framework == "asgi" else _fastapi(deployment)
        async with (
            lifespan(app),
            httpx.AsyncClient(transport=asgi_transport(app), base_url="http://testserver", auth=auth) as client,
        ):
            response = await client.get("/generate")
    _check(response, auth)
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == USE
