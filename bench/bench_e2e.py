"""(c) Paid requests per second end to end: agents -> seller -> platform -> anvil.

Processes: anvil; the platform (``x402mw platform serve``, SQLite); a Starlette seller (uvicorn);
this process runs ``agents`` concurrent agents (32 by default), each an ``httpx.AsyncClient`` with `X402Auth`
(every paid request is two HTTP round trips: the 402, then the paid retry).

The chain is anvil mining a block every 50 ms (``X402MW_BENCH_ANVIL_ARGS`` changes it), as real
chains do on an interval. In its default automine mode anvil mines a block per transaction, and its
cost per block grows with the number of blocks (foundry-rs/foundry#6124): on this machine the chain
alone falls from ~1,100 to ~70 transfers/s within 6,000 blocks, so a 15-second run would measure
anvil's decline rather than the stack. ``X402MW_BENCH_ANVIL_ARGS=""`` runs it in automine anyway.

Baseline, in the same run: the chain alone — the same number of ``transferWithAuthorization``
transfers sent by our relayer straight to anvil, 32 at a time, with no HTTP, no database and no
signature checks. The ratio says how much of the chain's own throughput survives the whole stack.
Also reported: the platform's time beyond chain inclusion per settlement (median), read from the
platform's own records.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from datetime import UTC, datetime

from sqlalchemy import create_engine, select

from bench._e2e import Stack, agent_clients, cpu_seconds, paying
from x402mw.client import ChannelPolicy, Wallet
from x402mw.evm.eip712 import TokenDomain, TransferAuthorization, random_nonce, sign_transfer
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, deploy_test_tokens
from x402mw.platform.chain.relayer import Relayer
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.chain.token import encode_transfer_with_authorization, mint
from x402mw.platform.db import tables
from x402mw.platform.db.engine import sync_url


async def chain_baseline(url: str, token: str, payer_keys: list[bytes], count: int, concurrency: int) -> float:
    """Transfers/s through our relayer straight to anvil, ``concurrency`` in flight, no HTTP or database."""
    rpc = HttpJsonRpc(url)
    relayer = Relayer(rpc, ANVIL_DEV_KEYS[2], chain_id=31337)
    await relayer.start()
    domain = TokenDomain("USD Coin", "2", 31337, token)
    now = int(time.time())
    calls = []
    for index in range(count):
        key = payer_keys[index % len(payer_keys)]
        auth = TransferAuthorization(
            address_of(key), address_of(ANVIL_DEV_KEYS[3]), 1, now - 60, now + 600, random_nonce()
        )
        signature = sign_transfer(key, domain, auth)
        calls.append(
            encode_transfer_with_authorization(
                from_=auth.from_address,
                to=auth.to,
                value=1,
                valid_after=auth.valid_after,
                valid_before=auth.valid_before,
                nonce=auth.nonce,
                signature=signature,
            )
        )
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for call in calls:
        queue.put_nowait(call)

    async def worker() -> None:
        while not queue.empty():
            data = queue.get_nowait()
            tx = await relayer.send(token, data)
            receipt = await relayer.wait_for_receipt(tx)
            assert receipt.status == 1

    start = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    took = time.perf_counter() - start
    await relayer.aclose()
    await rpc.aclose()
    return count / took


async def warm_up_then_measure(
    wallets: list[Wallet],
    seller_url: str,
    seconds: float,
    pids: dict[str, int | None],
    channels: ChannelPolicy | None = None,
) -> tuple[int, list[float], float, dict[str, float], datetime]:
    """Each agent's client is made once (an ``AsyncClient`` loads the CA bundle: ~30 ms of CPU) and
    kept through a 2-second warm-up and the measured window; what the window took, the CPU each
    process spent in it and when it began are returned with the paid requests. With ``channels``
    the agents pay by channel: each one's first request of the warm-up opens its channel."""
    async with agent_clients(wallets, "0.01", channels) as clients:
        await paying(clients, "GET", seller_url, None, 2.0)  # warm-up: connections, terms, caches
        began = datetime.now(UTC)
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        start = time.perf_counter()
        latencies = await paying(clients, "GET", seller_url, None, seconds)
        took = time.perf_counter() - start
        cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    return len(latencies), latencies, took, cpu, began


def run(seconds: float = 15.0, database: str = "sqlite", agents: int = 32) -> dict[str, float]:
    """``database`` is ``sqlite`` (a file in a temporary directory) or ``postgresql`` (a fresh database
    on ``X402MW_TEST_POSTGRES_URL``, default the local server)."""
    with Stack(database) as stack:
        return _run(stack, seconds, agents)


def _run(stack: Stack, seconds: float, agents: int) -> dict[str, float]:
    usdc = stack.on_chain(lambda rpc: deploy_test_tokens(rpc, stack.deployer))["USDC"]
    platform_pid = stack.start_platform(usdc)
    endpoint_id = stack.add_endpoint("bench", "/weather", {"pricingMode": "fixed", "amountMinor": "1000"})
    seller, seller_pid = stack.start_seller("starlette_seller", endpoint_id, "seller.log")
    keys = [new_private_key() for _ in range(agents)]

    async def fund(rpc: HttpJsonRpc) -> None:
        for key in keys:
            await mint(rpc, stack.deployer, usdc, address_of(key), 1_000 * 10**6)

    stack.on_chain(fund)
    wallets = [Wallet(k) for k in keys]
    seller_url = f"{seller}/weather"
    pids = {"anvil": stack.anvil.pid, "platform": platform_pid, "seller": seller_pid, "agents": os.getpid()}
    paid, latencies, took, cpu, began = asyncio.run(warm_up_then_measure(wallets, seller_url, seconds, pids))
    cpu_ms = {name: spent * 1000 / max(paid, 1) for name, spent in cpu.items()}
    throughput = paid / took
    engine = create_engine(sync_url(stack.database_url))
    with engine.connect() as conn:  # the settlements of the measured window
        rows = conn.execute(
            select(tables.agent_payments.c.platform_micros, tables.agent_payments.c.chain_micros).where(
                tables.agent_payments.c.status == "settled",
                tables.agent_payments.c.platform_micros.is_not(None),
                tables.agent_payments.c.created_at >= began,
            )
        ).all()
    engine.dispose()
    overheads = [row[0] / 1000 for row in rows]
    chain_ms = statistics.median(row[1] / 1000 for row in rows) if rows else float("nan")
    baseline = asyncio.run(chain_baseline(stack.anvil.url, usdc, keys, max(200, paid // 4), agents))
    median_overhead = statistics.median(overheads) if overheads else float("nan")
    p50 = statistics.median(latencies) * 1000
    p99 = sorted(latencies)[int(len(latencies) * 0.99) - 1] * 1000 if latencies else float("nan")
    print(
        f"end to end ({agents} agents, {seconds:.0f}s): {throughput:.0f} paid requests/s "
        f"(p50 {p50:.0f} ms, p99 {p99:.0f} ms); chain alone (relayer -> anvil, no HTTP/DB): {baseline:.0f} "
        f"transfers/s; ratio {throughput / baseline:.2f}x; platform time beyond inclusion: median "
        f"{median_overhead:.1f} ms over {len(overheads)} settlements (chain inclusion median {chain_ms:.1f} ms; "
        f"{stack.database}) (targets: >= 200/s, <= 10 ms)"
    )
    print(
        "CPU per paid request: "
        + ", ".join(f"{name} {ms:.2f} ms" for name, ms in cpu_ms.items())
        + f"; total {sum(cpu_ms.values()):.2f} ms (2 cores give 10 ms per request at 200/s)"
    )
    return {
        "paid_per_second": throughput,
        "chain_per_second": baseline,
        "ratio": throughput / baseline,
        "platform_overhead_ms_median": median_overhead,
        "p50_ms": p50,
        "p99_ms": p99,
    }


if __name__ == "__main__":
    arguments = sys.argv[1:]
    run(
        float(arguments[0]) if arguments else 15.0,
        arguments[1] if len(arguments) > 1 else "sqlite",
        int(arguments[2]) if len(arguments) > 2 else 32,
    )
