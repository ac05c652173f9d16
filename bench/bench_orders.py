"""(d) Payment-order creation on PostgreSQL through uvicorn: requests/s and latency at concurrency 64.

Ours: ``x402mw platform serve`` (uvicorn with uvloop and httptools) on a fresh PostgreSQL database, with
a merchant and a test key made through the CLI. `bench.http_load` drives ``POST /v1/payment-intents``
from a separate process over keep-alive connections: a realistic body with a unique ``orderId``
and an ``Idempotency-Key`` per request, like a real client. Every response must be 201.

Baseline, in the same run and served the same way: a minimal Starlette app whose handler parses the
body and INSERTs one comparable row (into ``payment_intents``, on its own fresh database) through the
same engine (`create_engine_for`: SQLAlchemy async + asyncpg, the same pool). The ratio says how much
of a bare insert's throughput survives authentication, validation, idempotency and the outbox event.

Target: >= 1,000 requests/s with p99 <= 50 ms. PostgreSQL is the server at
``X402MW_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``)::

    python -m bench.bench_orders [SECONDS] [CONCURRENCY] [WORKERS] [DATABASE]    # defaults: 10 64 2 postgresql

``DATABASE`` ``sqlite`` runs both apps on fresh SQLite files instead.

``WORKERS`` server processes serve each app: ours with ``platform serve --workers`` (a listening
socket per process, which the kernel balances), the baseline with uvicorn's ``--workers`` (one
shared socket). On this 2-core machine 2 beat 1 for both apps. Above 1, ours runs on anvil, as the in-process dev chain
cannot be shared between processes. With ``X402MW_BENCH_PROFILE=DIR`` py-spy
records each server process during the measured window into ``DIR`` (collapsed stacks).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bench.http_load import percentile
from x402mw.platform.db import tables
from x402mw.platform.db.engine import create_engine_for
from x402mw.platform.db.models import new_id
from x402mw.platform.server import free_port

TARGET_PER_SECOND, TARGET_P99_MS = 1000, 50
WARMUP_SECONDS = 3.0
POSTGRES_URL = os.environ.get("X402MW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BODY = (
    '{"orderId":"order-%s-{n}","amount":"25.00","currency":"USDC",'
    '"customer":{"email":"buyer{n}@example.com","name":"Buyer {n}"},'
    '"successUrl":"https://shop.example.com/orders/{n}/thanks",'
    '"cancelUrl":"https://shop.example.com/orders/{n}/cart",'
    '"metadata":{"cartId":"cart-{n}","channel":"web"}}'
)


def baseline_app() -> Starlette:
    """The baseline (a uvicorn factory): parse the body, INSERT one ``payment_intents`` row, answer 201.
    Reads ``X402MW_BENCH_DATABASE_URL`` and ``X402MW_BENCH_MERCHANT``."""
    engine = create_engine_for(os.environ["X402MW_BENCH_DATABASE_URL"])
    merchant_id = os.environ["X402MW_BENCH_MERCHANT"]
    insert = tables.payment_intents.insert()  # built once, values bound per request: the lean way

    async def create(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        now = datetime.now(UTC)
        customer = body.get("customer") or {}
        row = {
            "id": new_id(),
            "merchant_id": merchant_id,
            "livemode": False,
            "order_id": body["orderId"],
            "status": "requires_payment",
            "amount_minor": int(Decimal(body["amount"]) * 10**6),
            "amount_received_minor": 0,
            "currency": body["currency"],
            "accepted_currencies": [body["currency"]],
            "payment_methods": {"wallet": True, "transfer": True, "transferDefaultOpen": False},
            "customer_email": customer.get("email"),
            "customer_name": customer.get("name"),
            "success_url": body.get("successUrl"),
            "cancel_url": body.get("cancelUrl"),
            "order_metadata": body.get("metadata") or {},
            "exceptions": [],
            "created_at": now,
            "updated_at": now,
        }
        async with engine.begin() as conn:
            await conn.execute(insert, row)
        return JSONResponse({"paymentIntent": {"id": row["id"], "orderId": row["order_id"]}}, status_code=201)

    async def health(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await engine.dispose()

    return Starlette(
        routes=[Route("/v1/payment-intents", create, methods=["POST"]), Route("/healthz", health)],
        lifespan=lifespan,
    )


@dataclass
class Measured:
    name: str
    per_second: float
    requests: int
    errors: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    first_error: str

    def line(self) -> str:
        return (
            f"{self.name}: {self.per_second:,.0f} req/s ({self.requests} in the window), p50 {self.p50_ms:.1f} ms, "
            f"p95 {self.p95_ms:.1f} ms, p99 {self.p99_ms:.1f} ms, errors {self.errors}"
        )


@contextlib.contextmanager
def _fresh_database(database: str, directory: Path) -> Iterator[str]:
    if database == "sqlite":
        yield f"sqlite:///{directory / uuid.uuid4().hex[:12]}.sqlite3"
        return
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"x402mw_bench_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        shown = make_url(POSTGRES_URL).render_as_string(hide_password=True)
        raise SystemExit(
            f"bench_orders needs PostgreSQL: none answers at {shown} ({str(exc).strip()}); "
            "set X402MW_TEST_POSTGRES_URL to a server whose user may CREATE DATABASE"
        ) from exc
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _cli(*args: str, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "x402mw", *args, "--json"], env=env, check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def _wait_http(url: str, server: subprocess.Popen[bytes], log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up; its log ends:\n{log.read_text()[-3000:]}")


def _server_pids(server: subprocess.Popen[bytes]) -> list[int]:
    """The processes that serve requests: the server itself, or its worker processes."""
    found = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True).stdout.split()
    workers = [int(pid) for pid in found]
    return [pid for pid in workers if _is_python(pid)] or [server.pid]


def _is_python(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return "python" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    return False


def _measure(
    name: str, command: list[str], env: dict[str, str], port: int, seconds: float, concurrency: int, api_key: str
) -> Measured:
    workdir = Path(env["X402MW_DATA_DIR"])
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{name}.log"
    with log.open("wb") as handle:
        server = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
    profilers: list[subprocess.Popen[bytes]] = []
    try:
        _wait_http(f"http://127.0.0.1:{port}/healthz", server, log)
        run_id = uuid.uuid4().hex[:8]
        spec = {
            "host": "127.0.0.1",
            "port": port,
            "path": "/v1/payment-intents",
            "headers": {
                "Authorization": f"Bearer {api_key}",
                "Content-Type": "application/json",
                "Idempotency-Key": f"{run_id}-{{n}}",
                "User-Agent": "bench-orders/1",
            },
            "body": BODY % run_id,
            "warmup": WARMUP_SECONDS,
            "seconds": seconds,
            "concurrency": concurrency,
            "expect": 201,
        }
        load = subprocess.Popen(
            [sys.executable, "-m", "bench.http_load", json.dumps(spec)], stdout=subprocess.PIPE, env=env
        )
        profile_dir = os.environ.get("X402MW_BENCH_PROFILE")
        if profile_dir:
            profilers = _start_profilers(name, _server_pids(server), Path(profile_dir), seconds)
        out, _ = load.communicate()
        if load.returncode != 0:
            raise RuntimeError(f"the load generator failed ({load.returncode})")
    finally:
        for profiler in profilers:
            profiler.wait(timeout=seconds + 60)
        server.terminate()
        server.wait(timeout=30)
    data = json.loads(out)
    latencies_ms = [value * 1000 for value in data["latencies"]]
    return Measured(
        name,
        data["requests"] / data["seconds"],
        data["requests"],
        data["errors"],
        percentile(latencies_ms, 0.50),
        percentile(latencies_ms, 0.95),
        percentile(latencies_ms, 0.99),
        data["first_error"],
    )


def _start_profilers(name: str, pids: list[int], directory: Path, seconds: float) -> list[subprocess.Popen[bytes]]:
    """py-spy on each server process for the measured window (it starts after the warm-up)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    directory.mkdir(parents=True, exist_ok=True)
    time.sleep(WARMUP_SECONDS)
    return [
        subprocess.Popen(
            [
                spy,
                "record",
                "-p",
                str(pid),
                "-d",
                str(int(seconds)),
                "-r",
                "200",
                "-f",
                "raw",
                "--nonblocking",
                "-o",
                str(directory / f"{name}-{pid}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in pids
    ]


def _anvil_options(stack: contextlib.ExitStack) -> list[str]:
    """``--rpc-url`` and ``--token`` of a fresh anvil with the test tokens (several workers need a shared chain)."""
    from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
    from x402mw.platform.chain.rpc import HttpJsonRpc

    anvil = stack.enter_context(AnvilProcess())

    async def deploy() -> dict[str, str]:
        rpc = HttpJsonRpc(anvil.url)
        try:
            return await deploy_test_tokens(rpc, ANVIL_DEV_KEYS[0])
        finally:
            await rpc.aclose()

    tokens = asyncio.run(deploy())
    return ["--rpc-url", anvil.url, *(f"--token={symbol}={address}" for symbol, address in tokens.items())]


def run(
    seconds: float = 10.0, concurrency: int = 64, workers: int = 2, database: str = "postgresql"
) -> dict[str, float]:
    if database not in ("postgresql", "sqlite"):
        raise SystemExit(f"the database is postgresql or sqlite, not {database!r}")
    workdir = Path(tempfile.mkdtemp(prefix="x402mw-bench-orders-"))
    try:
        with contextlib.ExitStack() as stack:
            ours_env = dict(
                os.environ,
                X402MW_DATA_DIR=str(workdir / "ours"),
                X402MW_DATABASE_URL=stack.enter_context(_fresh_database(database, workdir)),
                ETH_HASH_BACKEND="pysha3",
            )
            merchant = _cli("platform", "merchants", "create", "--name", "bench", env=ours_env)["id"]
            api_key = _cli("platform", "keys", "create", "--merchant", merchant, env=ours_env)["key"]
            base_url = stack.enter_context(_fresh_database(database, workdir))
            base_env = dict(ours_env, X402MW_DATA_DIR=str(workdir / "baseline"), X402MW_DATABASE_URL=base_url)
            base_merchant = _cli("platform", "merchants", "create", "--name", "baseline", env=base_env)["id"]
            base_env.update(X402MW_BENCH_DATABASE_URL=base_url, X402MW_BENCH_MERCHANT=base_merchant)
            chain = _anvil_options(stack) if workers > 1 else []
            port = free_port()
            serve = [sys.executable, "-m", "x402mw", "platform", "serve", "--port", str(port), "--log-level", "warning"]
            serve += [f"--workers={workers}", *chain]
            ours = _measure("ours", serve, ours_env, port, seconds, concurrency, api_key)
            port = free_port()
            uvicorn = [sys.executable, "-m", "uvicorn", "bench.bench_orders:baseline_app", "--factory"]
            uvicorn += ["--port", str(port), "--log-level", "warning", "--no-access-log", "--loop", "uvloop"]
            uvicorn += ["--http", "httptools", f"--workers={workers}"]
            baseline = _measure("baseline", uvicorn, base_env, port, seconds, concurrency, api_key)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ratio = ours.per_second / baseline.per_second
    print(
        f"payment-order creation on {'SQLite' if database == 'sqlite' else 'PostgreSQL'} through uvicorn "
        f"({workers} server process(es), uvloop + httptools), "
        f"concurrency {concurrency}, {seconds:.0f} s after {WARMUP_SECONDS:.0f} s of warm-up:"
    )
    print("  " + ours.line())
    print("  " + baseline.line().replace("baseline", "baseline (one INSERT, same engine)"))
    verdict = "met" if _met(ours) else "NOT met"
    print(
        f"  ratio ours/baseline {ratio:.2f}x; targets >= {TARGET_PER_SECOND:,} req/s with p99 <= {TARGET_P99_MS} ms "
        f"and no errors: {verdict} (with {concurrency} requests always in flight the mean latency is "
        f"{concurrency} / throughput: a p99 of {TARGET_P99_MS} ms needs more than "
        f"{concurrency * 1000 / TARGET_P99_MS:,.0f} req/s)"
    )
    for measured in (ours, baseline):
        if measured.errors:
            print(f"  first {measured.name} error: {measured.first_error!r}")
    return {
        "ours_per_second": ours.per_second,
        "ours_p50_ms": ours.p50_ms,
        "ours_p95_ms": ours.p95_ms,
        "ours_p99_ms": ours.p99_ms,
        "ours_errors": ours.errors,
        "baseline_per_second": baseline.per_second,
        "baseline_p99_ms": baseline.p99_ms,
        "ratio": ratio,
    }


def _met(measured: Measured) -> bool:
    return measured.per_second >= TARGET_PER_SECOND and measured.p99_ms <= TARGET_P99_MS and not measured.errors


if __name__ == "__main__":
    arguments = sys.argv[1:]
    run(
        float(arguments[0]) if arguments else 10.0,
        int(arguments[1]) if len(arguments) > 1 else 64,
        int(arguments[2]) if len(arguments) > 2 else 2,
        arguments[3] if len(arguments) > 3 else "postgresql",
    )
