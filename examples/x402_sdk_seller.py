"""Sellers built on the x402 Foundation's Python SDK (``pip install "x402[fastapi,flask,evm]"``)
that verify and settle through x402mw's facilitator API: the platform relays each transfer and pays
its gas, so the seller needs no wallet and no node. ``app`` is a FastAPI app (``create_app``);
``create_flask_app`` makes the same seller with Flask and the SDK's synchronous server.

    X402MW_API_KEY=sk_test_... X402MW_PAY_TO=0x... X402MW_NETWORK=eip155:84532 \\
        uvicorn examples.x402_sdk_seller:app --port 8000

``X402MW_PLATFORM_URL`` defaults to a local ``x402mw platform serve``. A price such as ``"$0.01"``
is resolved by the SDK to USDC on the networks it knows (Base, Base Sepolia, ...); on a chain it
does not know, give the token yourself: ``{"amount": "10000", "asset": "0x...", "extra": {"name":
"USD Coin", "version": "2"}}``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import flask
from fastapi import FastAPI, Response
from x402 import x402ResourceServer, x402ResourceServerSync
from x402.http import HTTPFacilitatorClient, HTTPFacilitatorClientSync
from x402.http.middleware.fastapi import PaymentMiddlewareASGI
from x402.http.middleware.flask import PaymentMiddleware as FlaskPaymentMiddleware
from x402.http.types import PaymentOption, RouteConfig
from x402.mechanisms.evm.exact import ExactEvmServerScheme


def _facilitator(api_key: str, platform_url: str) -> dict[str, Any]:
    """The SDK's facilitator settings for x402mw: its URL, and the API key on every call."""
    headers = {"Authorization": f"Bearer {api_key}"}
    return {
        "url": platform_url.rstrip("/") + "/x402",
        "create_headers": lambda: {"verify": headers, "settle": headers, "supported": headers},
    }


def _routes(network: str, pay_to: str, price: Any) -> dict[str, RouteConfig]:
    accepts = PaymentOption(scheme="exact", pay_to=pay_to, price=price, network=network)
    return {"GET /weather": RouteConfig(accepts=accepts, description="Today's weather")}


def create_app(api_key: str, platform_url: str, network: str, pay_to: str, price: Any = "$0.01") -> FastAPI:
    """FastAPI app selling ``GET /weather`` for ``price``, paid to ``pay_to`` on ``network``."""
    facilitator = HTTPFacilitatorClient(_facilitator(api_key, platform_url))
    server = x402ResourceServer(facilitator)
    server.register("eip155:*", ExactEvmServerScheme())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await facilitator.aclose()  # its connections to the platform

    app = FastAPI(title="Weather, paid per request (x402 SDK seller)", lifespan=lifespan)
    app.add_middleware(PaymentMiddlewareASGI, routes=_routes(network, pay_to, price), server=server)

    @app.get("/weather")
    async def weather() -> dict[str, str]:
        return {"forecast": "sunny"}

    return app


def create_metered_app(api_key: str, platform_url: str, network: str, pay_to: str, ceiling: Any) -> FastAPI:
    """FastAPI app selling ``GET /generate?use=N`` by use with the SDK's ``upto`` scheme: the agent
    signs ``ceiling``, the route charges N atomic units (``Settlement-Overrides``), and x402mw's
    facilitator settles that through Permit2 (it names itself in ``/supported`` as the
    ``facilitatorAddress`` the agent's signature binds)."""
    from x402.http.middleware.fastapi import set_settlement_overrides
    from x402.mechanisms.evm.upto import UptoEvmServerScheme

    facilitator = HTTPFacilitatorClient(_facilitator(api_key, platform_url))
    server = x402ResourceServer(facilitator)
    server.register("eip155:*", UptoEvmServerScheme())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await facilitator.aclose()

    accepts = PaymentOption(scheme="upto", pay_to=pay_to, price=ceiling, network=network)
    routes = {"GET /generate": RouteConfig(accepts=accepts, description="Text, charged per token")}
    app = FastAPI(title="Text generation, charged by use (x402 SDK seller)", lifespan=lifespan)
    app.add_middleware(PaymentMiddlewareASGI, routes=routes, server=server)

    @app.get("/generate")
    async def generate(use: int, response: Response) -> dict[str, int]:
        set_settlement_overrides(response, {"amount": str(use)})
        return {"charged": use}

    return app


def create_flask_app(api_key: str, platform_url: str, network: str, pay_to: str, price: Any = "$0.01") -> flask.Flask:
    """The same seller on Flask, with the SDK's synchronous server and facilitator client. Flask has
    no shutdown hook: whoever stops the app closes ``app.extensions["x402_facilitator"]``."""
    facilitator = HTTPFacilitatorClientSync(_facilitator(api_key, platform_url))
    server = x402ResourceServerSync(facilitator)
    server.register("eip155:*", ExactEvmServerScheme())
    app = flask.Flask(__name__)
    app.extensions["x402_facilitator"] = facilitator

    @app.get("/weather")
    def weather() -> dict[str, str]:
        return {"forecast": "sunny"}

    FlaskPaymentMiddleware(app, _routes(network, pay_to, price), server)
    return app


app = create_app(
    api_key=os.environ.get("X402MW_API_KEY", ""),
    platform_url=os.environ.get("X402MW_PLATFORM_URL", "http://127.0.0.1:4402/v1"),
    network=os.environ.get("X402MW_NETWORK", "eip155:84532"),
    pay_to=os.environ.get("X402MW_PAY_TO", "0x" + "0" * 39 + "1"),
)
