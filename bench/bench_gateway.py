"""The gateway's cost: a free route through ``x402mw gateway`` against the upstream called directly,
and a paid route's unpaid 402 through the gateway against the in-process payment middleware's.

Three servers, each uvicorn in a process of its own on loopback:

- the upstream: a Starlette app answering ``GET /free`` and ``GET /paid`` with a small JSON body;
- the gateway (`GatewayApp`) in front of it, selling ``GET /paid`` (terms from an in-process fake
  of the platform: the unpaid path makes no platform call once warm);
- the baseline of the 402: the same Starlette app with `PaymentMiddleware` selling ``/paid`` itself,
  terms from the same fake.

One client (``httpx.Client``, kept-alive connection each) sends one request at a time, the four
kinds in a shuffled turn for ``requests`` rounds after a warm-up: median and p99 of each. Printed:
the free route's added latency (gateway minus direct, median and p99), the 402's median through the gateway
over the middleware app's (``ratio_402_http``: on 2 shared cores the process that serves more kinds
stays warmer, so this one moves with the scheduler), and the same 402 of both apps driven through
ASGI in this process, best round of 500 (``ratio_402``: what the gateway's paid path costs beside
the middleware's, without sockets).

    python -m bench.bench_gateway 2000
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ENDPOINT = {
    "id": "ep1",
    "name": "Weather",
    "resourceUrl": "http://bench/paid",
    "network": "eip155:84532",
    "chainId": 84532,
    "currency": "USDC",
    "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    "assetName": "USDC",
    "assetVersion": "2",
    "decimals": 6,
    "payoutAddress": "0x" + "bb" * 20,
    "pricingMode": "fixed",
    "amountMinor": "10000",
    "releasePolicy": "included",
    "maxTimeoutSeconds": 300,
}
ROOT = Path(__file__).resolve().parents[1]


def _platform(request: httpx.Request) -> httpx.Response:
    if request.url.path.endswith("/agent/endpoints/ep1"):
        return httpx.Response(200, json={"endpoint": ENDPOINT})
    return httpx.Response(200, json={})


def _upstream() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def answer(request: Request) -> JSONResponse:
        return JSONResponse({"forecast": "sunny", "path": request.url.path})

    return Starlette(routes=[Route("/free", answer), Route("/paid", answer)])


def _gateway(upstream: str) -> Any:
    from x402mw.gateway.app import GatewayApp
    from x402mw.gateway.config import parse_config

    config = parse_config(
        {"routes": [{"method": "GET", "path": "/paid", "price": "0.01", "coin": "USDC", "network": "eip155:84532"}]}
    )
    return GatewayApp(
        config,
        upstream_url=upstream,
        api_key="sk_test_bench",
        platform_url="http://platform.invalid/v1",
        endpoints={"GET /paid": "ep1"},
        transport=httpx.MockTransport(_platform),
    )


def _middleware() -> Any:
    from x402mw.adapters.asgi import PaymentMiddleware

    return PaymentMiddleware(
        _upstream(),
        api_key="sk_test_bench",
        platform_url="http://platform.invalid/v1",
        routes={"GET /paid": "ep1"},
        transport=httpx.MockTransport(_platform),
    )


def _serve(kind: str, port: int, upstream: str = "") -> None:
    import uvicorn

    app = {"upstream": _upstream, "middleware": _middleware}.get(kind)
    built = app() if app is not None else _gateway(upstream)
    uvicorn.run(built, host="127.0.0.1", port=port, log_level="warning", proxy_headers=False)


def _start(kind: str, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    from x402mw.platform.server import free_port

    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_gateway", "--serve", kind, str(port), *extra], env=env
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url + "/free", timeout=1)
            return process, url
        except httpx.HTTPError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError(f"the {kind} server did not start") from None
            time.sleep(0.05)


async def _in_process(rounds: int) -> dict[str, float]:
    """Seconds per unpaid 402 of each app driven through ASGI in this process (no sockets): the
    best of ``rounds`` rounds of 500, taking turns."""
    apps = {"gateway": _gateway("http://127.0.0.1:9"), "middleware": _middleware()}
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/paid",
        "raw_path": b"/paid",
        "query_string": b"",
        "headers": [(b"host", b"bench")],
        "scheme": "http",
        "server": ("bench", 80),
        "client": ("127.0.0.1", 1),
        "root_path": "",
    }
    statuses = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    best = {name: float("inf") for name in apps}
    for _ in range(rounds):
        for name, app in apps.items():
            started = time.perf_counter()
            for _ in range(500):
                await app(dict(scope), receive, send)
            best[name] = min(best[name], (time.perf_counter() - started) / 500)
    if set(statuses) != {402}:
        raise RuntimeError(f"in-process 402s answered {set(statuses)}")
    return best


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(requests: int = 2000) -> dict[str, float]:
    processes = []
    try:
        upstream_process, upstream = _start("upstream")
        processes.append(upstream_process)
        gateway_process, gateway = _start("gateway", upstream)
        processes.append(gateway_process)
        middleware_process, middleware = _start("middleware")
        processes.append(middleware_process)
        kinds = {
            "direct free": (upstream, "/free", 200),
            "gateway free": (gateway, "/free", 200),
            "gateway 402": (gateway, "/paid", 402),
            "middleware 402": (middleware, "/paid", 402),
        }
        clients = {name: httpx.Client(base_url=base, timeout=30) for name, (base, _, _) in kinds.items()}
        times: dict[str, list[float]] = {name: [] for name in kinds}
        order = list(kinds)
        shuffler = random.Random(402)
        for round_ in range(requests + 100):
            shuffler.shuffle(order)  # no kind always follows the same one (a server's work after its answer)
            for name in order:
                _, path, status = kinds[name]
                started = time.perf_counter()
                response = clients[name].get(path)
                elapsed = time.perf_counter() - started
                if response.status_code != status:
                    raise RuntimeError(f"{name}: {response.status_code}, expected {status}")
                if round_ >= 100:  # after the warm-up
                    times[name].append(elapsed)
        for client in clients.values():
            client.close()
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
    figures: dict[str, float] = {}
    print(f"one request at a time, {requests} of each kind, milliseconds")
    for name, values in times.items():
        median, p99 = statistics.median(values) * 1000, _p(values, 0.99) * 1000
        figures[f"{name} median"], figures[f"{name} p99"] = median, p99
        print(f"  {name:15} median {median:7.3f}   p99 {p99:7.3f}")
    added_median = figures["gateway free median"] - figures["direct free median"]
    added_p99 = figures["gateway free p99"] - figures["direct free p99"]
    ratio_free = figures["gateway free median"] / figures["direct free median"]
    ratio_402_http = figures["gateway 402 median"] / figures["middleware 402 median"]
    best = asyncio.run(_in_process(max(3, min(20, requests // 50))))
    ratio_402 = best["gateway"] / best["middleware"]
    figures |= {"added_median": added_median, "added_p99": added_p99, "ratio_free": ratio_free}
    figures |= {"ratio_402": ratio_402, "ratio_402_http": ratio_402_http}
    added = f"{added_median:.3f} ms at the median, {added_p99:.3f} ms at p99"
    print(f"free route: the gateway adds {added} (gateway / direct, ratio_free: {ratio_free:.2f}x)")
    print(f"402 over HTTP: the gateway's median / the middleware app's (ratio_402_http): {ratio_402_http:.2f}x")
    gateway_us, middleware_us = best["gateway"] * 1e6, best["middleware"] * 1e6
    print(f"402 in-process through ASGI, best round: gateway {gateway_us:.1f} us, middleware {middleware_us:.1f} us")
    print(f"402 of the gateway / 402 of the in-process middleware (ratio_402): {ratio_402:.2f}x")
    return figures


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        _serve(sys.argv[2], int(sys.argv[3]), *sys.argv[4:])
    else:
        run(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
