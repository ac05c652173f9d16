"""Sellers built on the x402 Foundation's Python SDK (``pip install "x402[fastapi,flask,evm]"``)
that verify and settle through x402mw's facilitator API: the platform relays each transfer and pays
its gas, so the seller needs no wallet and no node. ``app`` is a FastAPI app (``create_app``);
``create_flask_app`` makes the same seller with Flask and the SDK's synchronous server.

    X402MW_API_KEY=sk_test_... X402MW_PAY_TO=0x... python examples/x402_sdk_seller.py

sells ``GET /weather`` on http://127.0.0.1:8000 (``PORT`` changes it) for ``X402MW_PRICE`` (0.01)
of ``X402MW_TOKEN`` (USDC) on ``X402MW_NETWORK`` (by default the platform's first network: the dev
chain of a local ``x402mw platform serve``), paid to ``X402MW_PAY_TO``. The platform is at
``X402MW_PLATFORM_URL`` (http://127.0.0.1:4402/v1). The token's address and EIP-712 domain come from
the platform's ``GET /x402/supported`` (``extra.tokens``), so it works on chains the SDK does not
know; on the networks it knows, the SDK also takes a price such as ``"$0.01"`` (``create_app``'s
``price``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import flask
import httpx
from fastapi import FastAPI
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


def priced(api_key: str, platform_url: str, network: str, token: str, price: str) -> tuple[str, dict[str, Any]]:
    """The network (``network``, or the platform's first when empty) and the SDK's price for ``price``
    of ``token`` there: the token's address, the amount in its smallest unit and its EIP-712 domain,
    as the platform's facilitator names them (``GET /x402/supported``). ValueError when the platform
    settles no such network or token."""
    reply = httpx.get(
        platform_url.rstrip("/") + "/x402/supported", headers={"Authorization": f"Bearer {api_key}"}, timeout=30
    )
    reply.raise_for_status()
    kinds = [kind for kind in reply.json()["kinds"] if kind["scheme"] == "exact"]
    kind = next((k for k in kinds if k["network"] == network or not network), None)
    if kind is None:
        raise ValueError(f"the platform settles no network {network!r}: it has {[k['network'] for k in kinds]}")
    found = next((t for t in kind["extra"]["tokens"] if t["symbol"] == token.upper()), None)
    if found is None:
        raise ValueError(f"no {token} on {kind['network']}: there are {[t['symbol'] for t in kind['extra']['tokens']]}")
    atomic = Decimal(price).scaleb(found["decimals"])
    if atomic != atomic.to_integral_value() or atomic <= 0:
        raise ValueError(f"{price} {token} is not a positive amount of {found['decimals']} decimals")
    # the token's EIP-712 domain, and its symbol for agents that do not know this chain's tokens
    extra = {"name": found["name"], "version": found["version"], "currency": found["symbol"]}
    return kind["network"], {"amount": str(int(atomic)), "asset": found["address"], "extra": extra}


def create_app_from_env() -> FastAPI:
    """The seller the ``X402MW_*`` variables describe (see the module's docstring); for
    ``uvicorn --factory``."""
    api_key = os.environ.get("X402MW_API_KEY", "")
    pay_to = os.environ.get("X402MW_PAY_TO", "")
    if not api_key or not pay_to:
        raise SystemExit("set X402MW_API_KEY (a test key) and X402MW_PAY_TO (the address the coins go to)")
    url = os.environ.get("X402MW_PLATFORM_URL") or os.environ.get("X402MW_BASE_URL") or "http://127.0.0.1:4402/v1"
    try:
        network, price = priced(
            api_key,
            url,
            os.environ.get("X402MW_NETWORK", ""),
            os.environ.get("X402MW_TOKEN", "USDC"),
            os.environ.get("X402MW_PRICE", "0.01"),
        )
    except (ValueError, httpx.HTTPError) as exc:
        raise SystemExit(f"cannot price the seller at {url}: {exc}") from None
    print(
        f"selling GET /weather for {os.environ.get('X402MW_PRICE', '0.01')} {os.environ.get('X402MW_TOKEN', 'USDC')}"
        f" on {network} ({price['asset']}), paid to {pay_to}",
        file=sys.stderr,
        flush=True,
    )
    return create_app(api_key, url, network, pay_to, price)


if __name__ == "__main__":
    import uvicorn

    uvicorn.run(create_app_from_env(), host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
