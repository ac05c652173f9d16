"""(a) The unpaid 402 path through the Starlette payment middleware, against the same route without it.

Both apps are driven in-process through ASGI (no sockets), interleaved, best of several rounds, so
the difference is the middleware's own cost per request: route resolution, issuing and sealing a
challenge, encoding ``PAYMENT-REQUIRED`` and answering. Target: overhead <= 30 µs per request.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.adapters.starlette import PaymentMiddleware, paid

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


def _platform(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/agent/endpoints/ep1"):
        return httpx.Response(200, json={"endpoint": ENDPOINT})
    return httpx.Response(200, json={})


def _apps() -> tuple[Starlette, Starlette]:
    async def weather(request: Request) -> JSONResponse:
        return JSONResponse({"forecast": "sunny"})

    plain = Starlette(routes=[Route("/weather", weather)])
    guarded = Starlette(
        routes=[Route("/weather", paid("ep1")(weather))],
        middleware=[Middleware(PaymentMiddleware, api_key="sk_test_bench", transport=httpx.MockTransport(_platform))],
    )
    return plain, guarded


async def _drive(app: Any, n: int) -> tuple[float, int]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/weather",
        "raw_path": b"/weather",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"bench"), (b"user-agent", b"bench")],
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

    start = time.perf_counter()
    for _ in range(n):
        await app(dict(scope), receive, send)
    return (time.perf_counter() - start) / n, status


async def _run(n: int, rounds: int) -> dict[str, float]:
    plain, guarded = _apps()
    await _drive(plain, 200)
    await _drive(guarded, 200)  # fetches the endpoint's terms once, like a warm server
    best_plain = best_guarded = float("inf")
    for _ in range(rounds):
        took, status = await _drive(plain, n)
        assert status == 200
        best_plain = min(best_plain, took)
        took, status = await _drive(guarded, n)
        assert status == 402
        best_guarded = min(best_guarded, took)
    overhead = best_guarded - best_plain
    return {
        "plain_us": best_plain * 1e6,
        "guarded_us": best_guarded * 1e6,
        "overhead_us": overhead * 1e6,
        "ratio": best_guarded / best_plain,
    }


def run(n: int = 5000, rounds: int = 5) -> dict[str, float]:
    result = asyncio.run(_run(n, rounds))
    print(
        f"402 path: without middleware {result['plain_us']:.1f} µs/req (200), with middleware "
        f"{result['guarded_us']:.1f} µs/req (402): overhead {result['overhead_us']:.1f} µs/req, "
        f"ratio {result['ratio']:.2f}x (target overhead <= 30 µs)"
    )
    return result


if __name__ == "__main__":
    run()
