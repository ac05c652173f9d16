"""A paid MCP tool call's overhead over an unpaid one, beside a paid HTTP route's over an unpaid route.

One run, one platform (``PlatformServer``: the in-process dev chain, SQLite in a temporary folder),
each side served by uvicorn on loopback in a thread of this process:

- MCP: an ``MCPServer`` with `PaidTools` over streamable HTTP; one ``mcp`` ``Client`` calls a free
  tool, then a paid one through `PayingSession` (the unpaid call answered ``PaymentRequired``, the
  signature, the paid call: verified and held, the tool, settled);
- HTTP: a Starlette app with the payment middleware; one ``httpx.AsyncClient`` gets a free route,
  then a paid one through `X402Auth` (the 402, the signature, the paid retry: settled, the handler).

Calls are made one at a time (latency, not throughput), the four kinds in turn: the median of
``calls`` each, after a warm-up. The overhead is the paid call's median minus the free call's, on
each side; the ratio says what the MCP order (hold before the tool, settle after: two platform
calls) costs beside the HTTP one (settle, then serve: one). Both include the chain's inclusion of
the transfer, which dominates on the dev chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from mcp import Client
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from x402mw.adapters.mcp import PaidTools
from x402mw.adapters.starlette import PaymentMiddleware, paid
from x402mw.client import Wallet, X402Auth
from x402mw.client.mcp import PayingSession
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.server import PlatformServer, free_port
from x402mw.platform.services.merchants import create_api_key, create_merchant
from x402mw.platform.settings import PlatformSettings


@contextlib.contextmanager
def _served(app: Any) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def _endpoint(api: httpx.Client, chain_id: int, payout: str, resource: str) -> str:
    body = {
        "name": resource,
        "resourceUrl": resource,
        "chainId": chain_id,
        "currency": "USDC",
        "payoutAddress": payout,
        "amountMinor": "1000",
    }
    reply = api.post("/agent/endpoints", json=body)
    reply.raise_for_status()
    return str(reply.json()["endpoint"]["id"])


async def _measure(mcp_url: str, http_url: str, auth: X402Auth, calls: int, warmup: int = 3) -> dict[str, float]:
    """Median seconds of each kind of call; the four kinds take turns, so that whatever else the
    machine does weighs on each alike."""
    async with (
        Client(mcp_url) as client,
        httpx.AsyncClient(base_url=http_url, timeout=60) as anonymous,
        httpx.AsyncClient(base_url=http_url, auth=auth, timeout=60) as agent,
    ):
        paying = PayingSession(client, auth)

        async def mcp_free() -> None:
            assert not (await client.call_tool("ping", {})).is_error

        async def mcp_paid() -> None:
            result = await paying.call_tool("forecast", {"city": "Lisbon"})
            assert not result.is_error, result

        async def http_free() -> None:
            assert (await anonymous.get("/free")).status_code == 200

        async def http_paid() -> None:
            response = await agent.get("/weather")
            assert response.status_code == 200, response.text

        kinds: dict[str, Callable[[], Awaitable[None]]] = {
            "mcp_free": mcp_free,
            "mcp_paid": mcp_paid,
            "http_free": http_free,
            "http_paid": http_paid,
        }
        times: dict[str, list[float]] = {name: [] for name in kinds}
        for round_ in range(warmup + calls):
            for name, call in kinds.items():
                started = time.perf_counter()
                await call()
                if round_ >= warmup:
                    times[name].append(time.perf_counter() - started)
        return {name: statistics.median(values) for name, values in times.items()}


def run(calls: int = 40) -> None:
    with tempfile.TemporaryDirectory() as folder:
        settings = PlatformSettings(database_url=f"sqlite:///{Path(folder) / 'bench.sqlite3'}", data_dir=Path(folder))
        with PlatformServer(settings) as platform_server:
            platform = platform_server.platform
            assert platform is not None
            chain = next(iter(platform.chains))
            merchant = platform_server.call(lambda p: create_merchant(p.engine, "Bench"))
            _, api_key = platform_server.call(lambda p: create_api_key(p.engine, merchant.id))
            agent_key = new_private_key()
            payout = address_of(new_private_key())
            with httpx.Client(
                base_url=platform_server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=60
            ) as api:
                tool_endpoint = _endpoint(api, chain.chain_id, payout, "mcp://tool/forecast")
                route_endpoint = _endpoint(api, chain.chain_id, payout, "http://127.0.0.1/weather")
                faucet = {"network": chain.network.caip2, "currency": "USDC", "address": address_of(agent_key)}
                api.post("/sandbox/faucet", json=faucet | {"amount": "1000"}).raise_for_status()

            server = MCPServer("bench", log_level="WARNING")

            @server.tool()
            def forecast(city: str) -> str:
                return f"sunny in {city}"

            @server.tool()
            def ping() -> str:
                return "pong"

            tools = PaidTools(api_key=api_key, platform_url=platform_server.url, tools={"forecast": tool_endpoint})
            tools.install(server)

            @paid(route_endpoint)
            async def weather(request: Request) -> JSONResponse:
                return JSONResponse({"forecast": "sunny"})

            async def free(request: Request) -> JSONResponse:
                return JSONResponse({"free": True})

            http_app = Starlette(
                routes=[Route("/weather", weather), Route("/free", free)],
                middleware=[Middleware(PaymentMiddleware, api_key=api_key, platform_url=platform_server.url)],
            )
            auth = X402Auth(Wallet(agent_key), max_amount="0.01")
            # (the sellers' own background work runs in their lifespans)
            with _served(tools.asgi(server.streamable_http_app())) as mcp_url, _served(http_app) as http_url:
                found = asyncio.run(_measure(f"{mcp_url}/mcp", http_url, auth, calls))
    mcp_free, mcp_paid, http_free, http_paid = (found[k] for k in ("mcp_free", "mcp_paid", "http_free", "http_paid"))
    mcp_overhead = mcp_paid - mcp_free
    http_overhead = http_paid - http_free
    print(f"bench_mcp: {calls} calls each, one at a time, medians (dev chain, SQLite)")
    for name, free, paid_, overhead in (
        ("MCP tool:  ", mcp_free, mcp_paid, mcp_overhead),
        ("HTTP route:", http_free, http_paid, http_overhead),
    ):
        print(f"  {name} unpaid {free * 1e3:7.2f} ms  paid {paid_ * 1e3:7.2f} ms  overhead {overhead * 1e3:7.2f} ms")
    print(f"  MCP overhead / HTTP overhead: {mcp_overhead / http_overhead:.2f}x")


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
