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
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
from sqlalchemy import create_engine, select

from x402mw.client import Wallet, X402Auth
from x402mw.evm.eip712 import TokenDomain, TransferAuthorization, random_nonce, sign_transfer
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.relayer import Relayer
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.chain.token import encode_transfer_with_authorization, mint
from x402mw.platform.db import tables
from x402mw.platform.db.engine import sync_url
from x402mw.platform.server import free_port

ROOT = Path(__file__).resolve().parent.parent
ANVIL_ARGS = os.environ.get("X402MW_BENCH_ANVIL_ARGS", "--block-time 0.05").split()  # see the docstring


def _cpu_seconds(pid: int | None) -> float:
    """User plus system CPU seconds a process has used so far (Linux ``/proc``); 0 when unknown."""
    if pid is None:
        return 0.0
    if pid == os.getpid():
        times = os.times()
        return times.user + times.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_http(url: str, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up; its log ends:\n{log.read_text()[-3000:]}")


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen(args, env=env, stdout=handle, stderr=subprocess.STDOUT)


def _cli(*args: str, env: dict[str, str]) -> str:
    return subprocess.run(
        [sys.executable, "-m", "x402mw", *args], env=env, check=True, capture_output=True, text=True
    ).stdout


async def _chain_baseline(url: str, token: str, payer_keys: list[bytes], count: int, concurrency: int) -> float:
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


async def _agents(clients: list[httpx.AsyncClient], seller_url: str, seconds: float) -> tuple[int, list[float]]:
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def agent(client: httpx.AsyncClient) -> None:
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            response = await client.get(seller_url)
            if response.status_code != 200:
                raise RuntimeError(f"paid request failed: {response.status_code} {response.text[:200]}")
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*[agent(client) for client in clients])
    return len(latencies), latencies


async def _warm_up_then_measure(
    wallets: list[Wallet], seller_url: str, seconds: float, pids: dict[str, int | None]
) -> tuple[int, list[float], float, dict[str, float], datetime]:
    """Each agent's client is made once (an ``AsyncClient`` loads the CA bundle: ~30 ms of CPU) and
    kept through a 2-second warm-up and the measured window; what the window took, the CPU each
    process spent in it and when it began are returned with the paid requests."""
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(auth=X402Auth(wallet, max_amount="0.01"), timeout=60))
            for wallet in wallets
        ]
        await _agents(clients, seller_url, 2.0)  # warm-up: connections, terms, caches
        began = datetime.now(UTC)
        cpu_before = {name: _cpu_seconds(pid) for name, pid in pids.items()}
        start = time.perf_counter()
        paid, latencies = await _agents(clients, seller_url, seconds)
        took = time.perf_counter() - start
        cpu = {name: _cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    return paid, latencies, took, cpu, began


def run(seconds: float = 15.0, database: str = "sqlite", agents: int = 32) -> dict[str, float]:
    """``database`` is ``sqlite`` (a file in a temporary directory) or ``postgresql`` (a fresh database
    on ``X402MW_TEST_POSTGRES_URL``, default the local server)."""
    workdir = Path(tempfile.mkdtemp(prefix="x402mw-bench-"))
    procs: list[subprocess.Popen[bytes]] = []
    with AnvilProcess(args=ANVIL_ARGS) as anvil, _database(database, workdir) as database_url:
        try:
            return _run(anvil, workdir, procs, seconds, database, database_url, agents)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=10)


@contextlib.contextmanager
def _database(kind: str, workdir: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{workdir / 'platform.sqlite3'}"
        return
    import psycopg
    from sqlalchemy.engine import make_url

    server = os.environ.get("X402MW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"x402mw_bench_{os.getpid()}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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

    async def deploy() -> dict[str, str]:
        rpc = HttpJsonRpc(anvil.url)
        try:
            return await deploy_test_tokens(rpc, deployer)
        finally:
            await rpc.aclose()

    tokens = asyncio.run(deploy())
    usdc = tokens["USDC"]
    env = dict(
        os.environ,
        X402MW_DATA_DIR=str(workdir),
        X402MW_DATABASE_URL=database_url,
        X402MW_RELAYER_KEY=ANVIL_DEV_KEYS[1].hex(),
        ETH_HASH_BACKEND="pysha3",
    )
    merchant = _cli("platform", "merchants", "create", "--name", "bench", "--json", env=env)
    import json

    merchant_id = json.loads(merchant)["id"]
    api_key = json.loads(_cli("platform", "keys", "create", "--merchant", merchant_id, "--json", env=env))["key"]
    port = free_port()
    platform_log = workdir / "platform.log"
    serve = ["platform", "serve", "--port", str(port), "--rpc-url", anvil.url, "--token", f"USDC={usdc}"]
    procs.append(_spawn([sys.executable, "-m", "x402mw", *serve, "--log-level", "warning"], env, platform_log))
    platform_url = f"http://127.0.0.1:{port}/v1"
    _wait_http(f"http://127.0.0.1:{port}/healthz", platform_log)
    payout = address_of(new_private_key())
    reply = httpx.post(
        f"{platform_url}/agent/endpoints",
        headers={"Authorization": f"Bearer {api_key}"},
        json={
            "name": "bench",
            "resourceUrl": "http://127.0.0.1/weather",
            "chainId": 31337,
            "currency": "USDC",
            "payoutAddress": payout,
            "pricingMode": "fixed",
            "amountMinor": "1000",
        },
    )
    reply.raise_for_status()
    endpoint_id = reply.json()["endpoint"]["id"]
    seller_port = free_port()
    seller_env = dict(env, X402MW_API_KEY=api_key, X402MW_PLATFORM_URL=platform_url, X402MW_ENDPOINT_ID=endpoint_id)
    seller_log = workdir / "seller.log"
    uvicorn_args = [
        "--app-dir",
        str(ROOT / "examples"),
        "starlette_seller:app",
        "--port",
        str(seller_port),
        "--log-level",
        "warning",
        "--no-access-log",
    ]
    procs.append(_spawn([sys.executable, "-m", "uvicorn", *uvicorn_args], seller_env, seller_log))
    _wait_http(f"http://127.0.0.1:{seller_port}/health", seller_log)
    keys = [new_private_key() for _ in range(agents)]

    async def fund() -> None:
        rpc = HttpJsonRpc(anvil.url)
        try:
            for key in keys:
                await mint(rpc, deployer, usdc, address_of(key), 1_000 * 10**6)
        finally:
            await rpc.aclose()

    asyncio.run(fund())
    wallets = [Wallet(k) for k in keys]
    seller_url = f"http://127.0.0.1:{seller_port}/weather"
    pids = {"anvil": anvil.pid, "platform": procs[0].pid, "seller": procs[1].pid, "agents": os.getpid()}
    paid, latencies, took, cpu, began = asyncio.run(_warm_up_then_measure(wallets, seller_url, seconds, pids))
    cpu_ms = {name: spent * 1000 / max(paid, 1) for name, spent in cpu.items()}
    throughput = paid / took
    engine = create_engine(sync_url(database_url))
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
    baseline = asyncio.run(_chain_baseline(anvil.url, usdc, keys, max(200, paid // 4), agents))
    median_overhead = statistics.median(overheads) if overheads else float("nan")
    p50 = statistics.median(latencies) * 1000
    p99 = sorted(latencies)[int(len(latencies) * 0.99) - 1] * 1000 if latencies else float("nan")
    print(
        f"end to end ({agents} agents, {seconds:.0f}s): {throughput:.0f} paid requests/s "
        f"(p50 {p50:.0f} ms, p99 {p99:.0f} ms); chain alone (relayer -> anvil, no HTTP/DB): {baseline:.0f} "
        f"transfers/s; ratio {throughput / baseline:.2f}x; platform time beyond inclusion: median "
        f"{median_overhead:.1f} ms over {len(overheads)} settlements (chain inclusion median {chain_ms:.1f} ms; "
        f"{database}) (targets: >= 200/s, <= 10 ms)"
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
