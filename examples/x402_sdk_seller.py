"""A seller built on the x402 Foundation's Python SDK (``pip install "x402[fastapi,evm]"``) that
verifies and settles through x402mw's facilitator API: the platform relays each transfer and pays
its gas, so the seller needs no wallet and no node.

    X402MW_API_KEY=sk_test_... X402MW_PAY_TO=0x... X402MW_NETWORK=eip155:84532 \\
        uvicorn examples.x402_sdk_seller:app --port 8000

``X402MW_PLATFORM_URL`` defaults to a local ``x402mw platform serve``. A price such as ``"$0.01"``
is resolved by the SDK to USDC on the networks it knows (Base, Base Sepolia, ...); on a chain it
does not know, give the token yourself: ``{"amount": "10000", "asset": "0x...", "extra": {"name":
"USD Coin", "version": "2"}}``.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI
from x402 import x402ResourceServer
from x402.http import HTTPFacilitatorClient
from x402.http.middleware.fastapi import PaymentMiddlewareASGI
from x402.http.types import PaymentOption, RouteConfig
from x402.mechanisms.evm.exact import ExactEvmServerScheme


def create_app(api_key: str, platform_url: str, network: str, pay_to: str, price: Any = "$0.01") -> FastAPI:
    """FastAPI app selling ``GET /weather`` for ``price``, paid to ``pay_to`` on ``network``."""
    headers = {"Authorization": f"Bearer {api_key}"}
    facilitator = HTTPFacilitatorClient(
        {
            "url": platform_url.rstrip("/") + "/x402",
            # the SDK asks for headers per facilitator call; every one takes the same API key
            "create_headers": lambda: {"verify": headers, "settle": headers, "supported": headers},
        }
    )
    server = x402ResourceServer(facilitator)
    server.register("eip155:*", ExactEvmServerScheme())
    routes = {
        "GET /weather": RouteConfig(
            accepts=PaymentOption(scheme="exact", pay_to=pay_to, price=price, network=network),
            description="Today's weather",
        )
    }
    app = FastAPI(title="Weather, paid per request (x402 SDK seller)")
    app.add_middleware(PaymentMiddlewareASGI, routes=routes, server=server)

    @app.get("/weather")
    async def weather() -> dict[str, str]:
        return {"forecast": "sunny"}

    return app


app = create_app(
    api_key=os.environ.get("X402MW_API_KEY", ""),
    platform_url=os.environ.get("X402MW_PLATFORM_URL", "http://127.0.0.1:4402/v1"),
    network=os.environ.get("X402MW_NETWORK", "eip155:84532"),
    pay_to=os.environ.get("X402MW_PAY_TO", "0x" + "0" * 39 + "1"),
)
