"""Metered paid requests per second beside exact ones, in the same run: agents -> seller -> platform -> anvil.

One anvil (a block every 50 ms, as `bench_e2e`), one platform (``x402mw platform serve``), two
Starlette sellers: ``examples/starlette_seller.py`` (a fixed price, the ``exact`` scheme: one
settlement call, before the handler) and ``examples/metered_seller.py`` (a ceiling, the ``upto``
scheme: the payment verified and held before the handler, the usage it reports settled after it
through Permit2: two calls). The same agents (``httpx.AsyncClient`` with `X402Auth`, their Permit2
allowance given beforehand) pay each for the same time, exact first; the ratio metered / exact is
the number to watch (target >= 0.8).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from eth_abi.abi import encode as abi_encode

from bench.bench_e2e import ANVIL_ARGS, ROOT, _cli, _cpu_seconds, _database, _spawn, _wait_http
from x402mw.client import Wallet, X402Auth
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.relayer import transact
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.chain.token import mint
from x402mw.platform.server import free_port
from x402mw.protocol.networks import PERMIT2_ADDRESS

_APPROVE = keccak256(b"approve(address,uint256)")[:4]


async def _paying(
    clients: list[httpx.AsyncClient], method: str, url: str, body: bytes | None, seconds: float
) -> list[float]:
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def agent(client: httpx.AsyncClient) -> None:
        while time.monotonic() < stop:
            started = time.perf_counter()
            response = await client.request(method, url, content=body)
            if response.status_code != 200:
                raise RuntimeError(f"paid request failed: {response.status_code} {response.text[:200]}")
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*[agent(client) for client in clients])
    return latencies


async def _measure(
    wallets: list[Wallet],
    routes: dict[str, tuple[str, str, bytes | None]],
    seconds: float,
    pids: dict[str, dict[str, int | None]],
    rounds: int = 3,
) -> dict[str, tuple[float, float, float]]:
    """Paid requests/s, p50 ms and CPU ms per paid request (platform, seller and agents together)
    per route, after a warm-up; the routes take turns, ``rounds`` windows each of ``seconds /
    rounds``, so that a machine whose load varies weighs on both alike."""
    counted = {name: [0, 0.0, 0.0] for name in routes}  # requests, seconds, CPU seconds
    by_process = {name: dict.fromkeys(pids[name], 0.0) for name in routes}
    latencies: dict[str, list[float]] = {name: [] for name in routes}
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(auth=X402Auth(wallet, max_amount="0.05"), timeout=60))
            for wallet in wallets
        ]
        for method, url, body in routes.values():
            await _paying(clients, method, url, body, 2.0)
        for _ in range(rounds):
            for name, (method, url, body) in routes.items():
                before = {process: _cpu_seconds(pid) for process, pid in pids[name].items()}
                started = time.perf_counter()
                window = await _paying(clients, method, url, body, seconds / rounds)
                counted[name][1] += time.perf_counter() - started
                for process, pid in pids[name].items():
                    spent = _cpu_seconds(pid) - before[process]
                    by_process[name][process] += spent
                    counted[name][2] += spent
                counted[name][0] += len(window)
                latencies[name] += window
    for name, processes in by_process.items():
        paid = max(int(counted[name][0]), 1)
        shares = ", ".join(f"{process} {cpu * 1000 / paid:.2f} ms" for process, cpu in processes.items())
        print(f"  {name} CPU per paid request: {shares}")
    return {
        name: (paid / took, statistics.median(latencies[name]) * 1000, cpu * 1000 / max(paid, 1))
        for name, (paid, took, cpu) in ((n, counted[n]) for n in routes)
    }


def run(seconds: float = 10.0, database: str = "sqlite", agents: int = 32) -> dict[str, float]:
    workdir = Path(tempfile.mkdtemp(prefix="x402mw-bench-metered-"))
    procs: list[subprocess.Popen[bytes]] = []
    with AnvilProcess(args=ANVIL_ARGS) as anvil, _database(database, workdir) as database_url:
        try:
            return _run(anvil, workdir, procs, seconds, database, database_url, agents)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=10)


def _run(
    anvil: AnvilProcess,
    workdir: Path,
    procs: list[subprocess.Popen[bytes]],
    seconds: float,
    database: str,
    database_url: str,
    agents: int,
) -> dict[str, float]:
    deployer = ANVIL_DEV_KEYS[0]
    keys = [new_private_key() for _ in range(agents)]

    async def prepare() -> str:
        rpc = HttpJsonRpc(anvil.url)
        try:
            usdc = (await deploy_test_tokens(rpc, deployer))["USDC"]
            for key in keys:  # funds, gas, and a Permit2 allowance given once (as a wallet does)
                await mint(rpc, deployer, usdc, address_of(key), 1_000 * 10**6)
                await transact(rpc, deployer, address_of(key), b"", gas=21_000, value=10**17)
                approve = _APPROVE + abi_encode(["address", "uint256"], [PERMIT2_ADDRESS, 2**256 - 1])
                await transact(rpc, key, usdc, approve, gas=80_000)
            return usdc
        finally:
            await rpc.aclose()

    usdc = asyncio.run(prepare())
    env = dict(
        os.environ,
        X402MW_DATA_DIR=str(workdir),
        X402MW_DATABASE_URL=database_url,
        X402MW_RELAYER_KEY=ANVIL_DEV_KEYS[1].hex(),
        ETH_HASH_BACKEND="pysha3",
    )
    merchant_id = json.loads(_cli("platform", "merchants", "create", "--name", "bench", "--json", env=env))["id"]
    api_key = json.loads(_cli("platform", "keys", "create", "--merchant", merchant_id, "--json", env=env))["key"]
    port = free_port()
    serve = ["platform", "serve", "--port", str(port), "--rpc-url", anvil.url, "--token", f"USDC={usdc}"]
    platform_log = workdir / "platform.log"
    procs.append(_spawn([sys.executable, "-m", "x402mw", *serve, "--log-level", "warning"], env, platform_log))
    platform_url = f"http://127.0.0.1:{port}/v1"
    _wait_http(f"http://127.0.0.1:{port}/healthz", platform_log)
    payout = address_of(new_private_key())
    common = {"chainId": 31337, "currency": "USDC", "payoutAddress": payout}
    endpoints = {}
    for name, pricing in (
        ("exact", {"pricingMode": "fixed", "amountMinor": "1000"}),
        ("metered", {"pricingMode": "metered", "maxAmountMinor": "50000"}),
    ):
        reply = httpx.post(
            f"{platform_url}/agent/endpoints",
            headers={"Authorization": f"Bearer {api_key}"},
            json={"name": name, "resourceUrl": f"http://127.0.0.1/{name}", **common, **pricing},
        )
        reply.raise_for_status()
        endpoints[name] = reply.json()["endpoint"]["id"]
    sellers = {}
    for name, module in (("exact", "starlette_seller"), ("metered", "metered_seller")):
        seller_port = free_port()
        seller_env = dict(
            env, X402MW_API_KEY=api_key, X402MW_PLATFORM_URL=platform_url, X402MW_ENDPOINT_ID=endpoints[name]
        )
        log = workdir / f"{name}-seller.log"
        uvicorn = ["--app-dir", str(ROOT / "examples"), f"{module}:app", "--port", str(seller_port)]
        procs.append(
            _spawn(
                [sys.executable, "-m", "uvicorn", *uvicorn, "--log-level", "warning", "--no-access-log"],
                seller_env,
                log,
            )
        )
        _wait_http(f"http://127.0.0.1:{seller_port}/health", log)
        sellers[name] = f"http://127.0.0.1:{seller_port}"
    routes = {
        "exact": ("GET", f"{sellers['exact']}/weather", None),
        # 10 tokens of 100 atomic units: a partial settlement of the 50,000 ceiling, every time
        "metered": ("POST", f"{sellers['metered']}/generate", json.dumps({"prompt": "x", "maxTokens": 10}).encode()),
    }
    shared = {"anvil": anvil.pid, "platform": procs[0].pid, "agents": os.getpid()}
    pids = {"exact": {**shared, "seller": procs[1].pid}, "metered": {**shared, "seller": procs[2].pid}}
    found = asyncio.run(_measure([Wallet(k) for k in keys], routes, seconds, pids))
    (exact, exact_p50, exact_cpu), (metered, metered_p50, metered_cpu) = found["exact"], found["metered"]
    print(
        f"metered vs exact ({agents} agents, {seconds:.0f}s each in 3 alternating windows, {database}): exact "
        f"{exact:.0f} paid requests/s (p50 {exact_p50:.0f} ms, CPU {exact_cpu:.1f} ms/request); metered (upto, "
        f"usage settled after the handler) {metered:.0f} paid requests/s (p50 {metered_p50:.0f} ms, CPU "
        f"{metered_cpu:.1f} ms/request); ratio {metered / exact:.2f}x (target >= 0.8x)"
    )
    return {"exact_per_second": exact, "metered_per_second": metered, "ratio": metered / exact}


if __name__ == "__main__":
    arguments = sys.argv[1:]
    run(
        seconds=float(arguments[0]) if arguments else 10.0,
        database=arguments[1] if len(arguments) > 1 else "sqlite",
        agents=int(arguments[2]) if len(arguments) > 2 else 32,
    )
