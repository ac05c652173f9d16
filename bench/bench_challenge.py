"""(a) The unpaid 402 path: our Starlette/FastAPI payment middleware against the same route without
it, against the x402 Foundation SDK's FastAPI middleware (``x402.http.middleware.fastapi``) on the
same unpaid request, and with a route that declares discovery and sign-in-with-x.

Every app is a FastAPI app with the same route, driven in-process through ASGI (no sockets),
interleaved in many short rounds (the garbage collector paused in each, as timeit does), best of
them: on a shared machine whose speed varies from second to second, each app's best round is its
cost. The floor is the same app whose middleware answers a fixed 402
at once (FastAPI's own cost in front of any middleware); each middleware's overhead is its time
above that floor: route resolution, issuing (and sealing) a challenge, encoding
``PAYMENT-REQUIRED`` and answering. The plain route (200, through FastAPI's router and its
serialisation) is shown for scale.
Neither middleware makes a network call on this path once warm (ours fetched the endpoint's terms,
the SDK its facilitator's supported kinds, both from in-process fakes). Targets: our overhead at
least 10x below the SDK's; a route declaring discovery and sign-in within 1.1x of a plain one.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import httpx
from fastapi import FastAPI

from x402mw.adapters.starlette import PaymentMiddleware, paid
from x402mw.seller import Discovery, SignIn
from x402mw.seller.drivers import AsyncSeller

ENDPOINT = {
    "id": "ep1",
    "name": "Weather",
    "resourceUrl": "http://bench/weather",
    "network": "eip155:31337",
    "chainId": 31337,
    "currency": "USDC",
    "asset": "0x" + "aa" * 20,
    "assetName": "USD Coin",
    "assetVersion": "2",
    "decimals": 6,
    "payoutAddress": "0x" + "bb" * 20,
    "pricingMode": "fixed",
    "amountMinor": "10000",
    "releasePolicy": "included",
    "maxTimeoutSeconds": 300,
}
SUPPORTED = {"kinds": [{"x402Version": 2, "scheme": "exact", "network": "eip155:31337"}], "extensions": []}


def _platform(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/agent/endpoints/ep1"):
        return httpx.Response(200, json={"endpoint": ENDPOINT})
    if request.url.path.endswith("/supported"):
        return httpx.Response(200, json=SUPPORTED | {"signers": {}})
    return httpx.Response(200, json={})


async def weather() -> dict[str, str]:
    return {"forecast": "sunny"}


def _ours() -> FastAPI:
    """Our middleware on one app with two paid routes of the same endpoint: ``/weather``, plain,
    and ``/declare``, declaring discovery and sign-in-with-x (one app, so that what differs
    between their times is the declarations alone)."""

    async def sold() -> dict[str, str]:  # functions of their own: each route's mark is set on it
        return {"forecast": "sunny"}

    async def declared() -> dict[str, str]:
        return {"forecast": "sunny"}

    app = FastAPI()
    app.get("/weather")(paid("ep1")(sold))
    discovery = Discovery(query={"city": "Paris"}, output={"forecast": "sunny"})
    sign_in = SignIn(origin="https://bench.example", duration=86_400)
    app.get("/declare")(paid("ep1", discovery=discovery, sign_in=sign_in)(declared))
    app.add_middleware(PaymentMiddleware, api_key="sk_test_bench", transport=httpx.MockTransport(_platform))
    return app


class _Fixed402:
    """A pure ASGI middleware that answers every request with the same small 402: the floor."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = [(b"content-type", b"application/json"), (b"payment-required", b"e30=")]
        await send({"type": "http.response.start", "status": 402, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})


def _apps() -> dict[str, tuple[Any, str]]:
    """Each app measured, and the path it is driven with."""
    plain = FastAPI()
    plain.get("/weather")(weather)
    floor = FastAPI()
    floor.get("/weather")(weather)
    floor.add_middleware(_Fixed402)
    ours = _ours()
    return {
        "plain": (plain, "/weather"),
        "floor": (floor, "/weather"),
        "ours": (ours, "/weather"),
        "ours_declared": (ours, "/declare"),
        "theirs": (_theirs(), "/weather"),
    }


def _theirs() -> Any:
    """The Foundation SDK's FastAPI seller (examples/x402_sdk_seller.py's shape) on a fake facilitator."""
    from x402 import x402ResourceServer
    from x402.http import HTTPFacilitatorClient
    from x402.http.middleware.fastapi import PaymentMiddlewareASGI
    from x402.http.types import PaymentOption, RouteConfig
    from x402.mechanisms.evm.exact import ExactEvmServerScheme

    class FakeFacilitator(HTTPFacilitatorClient):  # its supported kinds from the in-process fake
        def _get_sync_client(self) -> httpx.Client:
            return httpx.Client(transport=httpx.MockTransport(_platform))

    facilitator = FakeFacilitator(
        {"url": "http://bench/v1/x402", "http_client": httpx.AsyncClient(transport=httpx.MockTransport(_platform))}
    )
    server = x402ResourceServer(facilitator)
    server.register("eip155:*", ExactEvmServerScheme())
    price = {"amount": "10000", "asset": ENDPOINT["asset"], "extra": {"name": "USD Coin", "version": "2"}}
    option = PaymentOption(scheme="exact", pay_to=str(ENDPOINT["payoutAddress"]), price=price, network="eip155:31337")
    app = FastAPI()
    app.get("/weather")(weather)
    routes = {"GET /weather": RouteConfig(accepts=option, description="Weather")}
    app.add_middleware(PaymentMiddlewareASGI, routes=routes, server=server)
    return app


async def _drive(app: Any, path: str, n: int) -> tuple[float, int]:
    """Seconds per request over ``n`` requests to ``path``, and the last status. Our middleware's
    registration of the challenges it issued (a batched call to the platform, each 402's due) is
    done at the end of the round, inside it, so that every round pays for its own."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"bench"), (b"user-agent", b"bench"), (b"accept", b"*/*")],
        "server": ("bench", 80),
        "client": ("127.0.0.1", 1234),
    }
    status = 0

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    gc.disable()  # (as timeit does: a collection falls in one app's round or another's by chance)
    try:
        start = time.perf_counter()
        for _ in range(n):
            await app(dict(scope), receive, send)
        seller = _our_seller(app)
        if seller is not None:
            await seller.flush()
        return (time.perf_counter() - start) / n, status
    finally:
        gc.enable()


def _our_seller(app: Any) -> AsyncSeller | None:
    """Our middleware's seller in ``app``'s middleware stack (built by its first request), if any."""
    layer = getattr(app, "middleware_stack", None)
    while layer is not None and not isinstance(layer, PaymentMiddleware):
        layer = getattr(layer, "app", None)
    return layer.seller if layer is not None else None


async def _run(n: int, rounds: int) -> dict[str, float]:
    apps = _apps()
    wanted = {"plain": 200, "floor": 402, "ours": 402, "ours_declared": 402, "theirs": 402}
    for name, (app, path) in apps.items():  # warm: terms fetched, supported kinds loaded
        _, status = await _drive(app, path, 200)
        assert status == wanted[name], (name, status)
    best = dict.fromkeys(apps, float("inf"))
    for _ in range(rounds):
        for name, (app, path) in apps.items():
            took, status = await _drive(app, path, n)
            assert status == wanted[name], (name, status)
            best[name] = min(best[name], took)
    floor = best["floor"]
    ours, declared, theirs = best["ours"] - floor, best["ours_declared"] - floor, best["theirs"] - floor
    return {
        "plain_us": best["plain"] * 1e6,
        "floor_us": floor * 1e6,
        "ours_us": best["ours"] * 1e6,
        "ours_declared_us": best["ours_declared"] * 1e6,
        "theirs_us": best["theirs"] * 1e6,
        "overhead_us": ours * 1e6,
        "declared_overhead_us": declared * 1e6,
        "theirs_overhead_us": theirs * 1e6,
        "ratio_vs_sdk": theirs / ours,
        "declared_ratio": declared / ours,
    }


def run(n: int = 1000, rounds: int = 40) -> dict[str, float]:
    result = asyncio.run(_run(n, rounds))
    print(
        f"402 path (FastAPI, in-process ASGI): plain route {result['plain_us']:.1f} µs/req (200); fixed-402 floor "
        f"{result['floor_us']:.1f} µs/req; ours {result['ours_us']:.1f} µs/req (402), "
        f"overhead {result['overhead_us']:.1f} µs; "
        f"x402 SDK {result['theirs_us']:.1f} µs/req (402), overhead {result['theirs_overhead_us']:.1f} µs: "
        f"ours {result['ratio_vs_sdk']:.1f}x less overhead (target >= 10x)"
    )
    print(
        f"402 path with discovery and sign-in-with-x declared: {result['ours_declared_us']:.1f} µs/req, "
        f"overhead {result['declared_overhead_us']:.1f} µs; {result['declared_ratio']:.2f}x a plain paid route's "
        f"(target <= 1.1x)"
    )
    return result


if __name__ == "__main__":
    run()
