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
import json
import os
import statistics
import sys
import time

from eth_abi.abi import encode as abi_encode

from bench._e2e import Stack, agent_clients, cpu_seconds, paying
from x402mw.client import Wallet
from x402mw.evm.keccak import keccak256
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.admin import transact
from x402mw.platform.chain.anvil import deploy_test_tokens
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.chain.token import mint
from x402mw.protocol.networks import PERMIT2_ADDRESS

_APPROVE = keccak256(b"approve(address,uint256)")[:4]


async def _measure(
    wallets: list[Wallet],
    routes: dict[str, tuple[str, str, bytes | None]],
    seconds: float,
    pids: dict[str, dict[str, int | None]],
    rounds: int = 4,
) -> dict[str, tuple[float, float, float]]:
    """Paid requests/s, p50 ms and CPU ms per paid request (platform, seller and agents together)
    per route, after a warm-up; the routes take turns, ``rounds`` windows each of ``seconds /
    rounds``, so that a machine whose load varies weighs on both alike, in the order A B, B A, A B,
    B A: the chain grows as the run goes on, and anvil's work per transaction with it (on a 20 s run,
    a third more by the end), so that a route always measured second would pay for that growth."""
    counted = {name: [0, 0.0, 0.0] for name in routes}  # requests, seconds, CPU seconds
    by_process = {name: dict.fromkeys(pids[name], 0.0) for name in routes}
    latencies: dict[str, list[float]] = {name: [] for name in routes}
    async with agent_clients(wallets, "0.05") as clients:
        for method, url, body in routes.values():
            await paying(clients, method, url, body, 2.0)
        for turn in range(rounds):
            order = list(routes.items()) if turn % 2 == 0 else list(reversed(routes.items()))
            for name, (method, url, body) in order:
                before = {process: cpu_seconds(pid) for process, pid in pids[name].items()}
                started = time.perf_counter()
                window = await paying(clients, method, url, body, seconds / rounds)
                counted[name][1] += time.perf_counter() - started
                for process, pid in pids[name].items():
                    spent = cpu_seconds(pid) - before[process]
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
    with Stack(database, prefix="x402mw-bench-metered-") as stack:
        return _run(stack, seconds, agents)


def _run(stack: Stack, seconds: float, agents: int) -> dict[str, float]:
    keys = [new_private_key() for _ in range(agents)]

    async def prepare(rpc: HttpJsonRpc) -> str:
        usdc = (await deploy_test_tokens(rpc, stack.deployer))["USDC"]
        for key in keys:  # funds, gas, and a Permit2 allowance given once (as a wallet does)
            await mint(rpc, stack.deployer, usdc, address_of(key), 1_000 * 10**6)
            await transact(rpc, stack.deployer, address_of(key), b"", gas=21_000, value=10**17)
            approve = _APPROVE + abi_encode(["address", "uint256"], [PERMIT2_ADDRESS, 2**256 - 1])
            await transact(rpc, key, usdc, approve, gas=80_000)
        return usdc

    platform_pid = stack.start_platform(stack.on_chain(prepare))
    sellers, seller_pids = {}, {}
    for name, module, pricing in (
        ("exact", "starlette_seller", {"pricingMode": "fixed", "amountMinor": "1000"}),
        ("metered", "metered_seller", {"pricingMode": "metered", "maxAmountMinor": "50000"}),
    ):
        endpoint_id = stack.add_endpoint(name, f"/{name}", pricing)
        sellers[name], seller_pids[name] = stack.start_seller(module, endpoint_id, f"{name}-seller.log")
    routes = {
        "exact": ("GET", f"{sellers['exact']}/weather", None),
        # 10 tokens of 100 atomic units: a partial settlement of the 50,000 ceiling, every time
        "metered": ("POST", f"{sellers['metered']}/generate", json.dumps({"prompt": "x", "maxTokens": 10}).encode()),
    }
    shared = {"anvil": stack.anvil.pid, "platform": platform_pid, "agents": os.getpid()}
    pids = {name: {**shared, "seller": pid} for name, pid in seller_pids.items()}
    found = asyncio.run(_measure([Wallet(k) for k in keys], routes, seconds, pids))
    (exact, exact_p50, exact_cpu), (metered, metered_p50, metered_cpu) = found["exact"], found["metered"]
    print(
        f"metered vs exact ({agents} agents, {seconds:.0f}s each, windows A B B A A B B A, {stack.database}): exact "
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
