"""Hosted checkout page views through uvicorn: views/s and latency at concurrency 64.

Ours: ``x402mw platform serve`` (uvicorn with uvloop and httptools) on a fresh PostgreSQL database,
with ``ORDERS`` payment orders made through the API and each viewed twice beforehand, one view at a
time (the first view gives the order its deposit address, a write that later views do not repeat;
the bench prints the mean time of both). A process keeps the pages it made (`pages._PAGES`), so the
warm-up lasts long enough for every process to have made every order's page. `bench.http_load`
then drives ``GET {checkout_url_base}/pi_<uuid>`` from a separate process over keep-alive
connections, each request for the next order in turn, as buyers opening their own checkout links
would. Every response must be 200 with the whole page: the order read from the database, its
payment options, the transfer panel with its EIP-681 QR code, the template rendered.

Baseline, in the same run and the same server processes: the platform's own ``GET /healthz`` (a
small JSON answer, no database), driven the same way. The ratio says how much of the server's bare
request rate survives rendering a checkout page.

Target: >= 1,000 views/s with p99 <= 50 ms. PostgreSQL is the server at ``X402MW_TEST_POSTGRES_URL``
(default ``postgresql://postgres@127.0.0.1:5432/postgres``)::

    python -m bench.bench_checkout [SECONDS] [CONCURRENCY] [WORKERS] [ORDERS]    # defaults: 10 64 2 256

Above one worker the platform runs on anvil, as the in-process dev chain cannot be shared between
processes (the page reads nothing from the chain).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.bench_orders import (
    TARGET_P99_MS,
    TARGET_PER_SECOND,
    WARMUP_SECONDS,
    Measured,
    _anvil_options,
    _cli,
    _fresh_database,
    _server_pids,
    _wait_http,
)
from bench.http_load import percentile
from x402mw.platform.server import free_port

COLD_VIEW_SECONDS = 0.03  # an order's first view in a process, at most, on a loaded 2-core machine


def _orders(base: str, api_key: str, count: int) -> tuple[list[str], float, float]:
    """``count`` orders made through the API, each page viewed twice, one view at a time; their
    checkout paths, and the mean time of a first view and of a second one (ms)."""
    paths = []
    first = second = 0.0
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as api:
        for n in range(count):
            body = {
                "orderId": f"bench-{uuid.uuid4().hex[:12]}-{n}",
                "amount": "25.00",
                "currency": "USDC",
                "acceptedCurrencies": ["USDC", "EURC"],
                "successUrl": f"https://shop.example.com/orders/{n}/thanks",
                "cancelUrl": f"https://shop.example.com/orders/{n}/cart",
                "expiresAt": "2099-01-01T00:00:00Z",
            }
            reply = api.post("/v1/payment-intents", json=body)
            reply.raise_for_status()
            url = httpx.URL(reply.json()["paymentIntent"]["checkoutUrl"])
            for view in range(2):
                began = time.perf_counter()
                page = api.get(url.path)
                took = (time.perf_counter() - began) * 1000
                if page.status_code != 200 or "deposit-address" not in page.text:
                    raise RuntimeError(f"the checkout page did not render: {page.status_code} {page.text[:300]}")
                first, second = (first + took, second) if view == 0 else (first, second + took)
            paths.append(url.path)
    return paths, first / count, second / count


def _cpu_seconds(pids: list[int]) -> float:
    """User and system CPU the processes ``pids`` have used so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def _drive(
    name: str, port: int, paths: list[str], seconds: float, concurrency: int, warmup: float, pids: list[int]
) -> tuple[Measured, float]:
    """The load on ``paths``, and the servers' CPU per request in ms over the whole run (warm-up too)."""
    spec = {
        "host": "127.0.0.1",
        "port": port,
        "method": "GET",
        "path": paths[0],
        "paths": paths,
        "headers": {"User-Agent": "bench-checkout/1", "Accept": "text/html"},
        "warmup": warmup,
        "seconds": seconds,
        "concurrency": concurrency,
        "expect": 200,
    }
    cpu = _cpu_seconds(pids)
    load = subprocess.run(
        [sys.executable, "-m", "bench.http_load", json.dumps(spec)], stdout=subprocess.PIPE, check=True
    )
    cpu = _cpu_seconds(pids) - cpu
    data = json.loads(load.stdout)
    latencies_ms = [value * 1000 for value in data["latencies"]]
    measured = Measured(
        name,
        data["requests"] / data["seconds"],
        data["requests"],
        data["errors"],
        percentile(latencies_ms, 0.50),
        percentile(latencies_ms, 0.95),
        percentile(latencies_ms, 0.99),
        data["first_error"],
    )
    # The whole run's requests: the measured window's rate over warm-up and window together.
    return measured, cpu * 1000 / max(1.0, measured.per_second * (seconds + warmup))


def _warmup(orders: int, workers: int) -> float:
    """Long enough for every process to have shown every order once: a process renders an order's
    page (and its QR code) on its first view of it, and keeps it for the next views."""
    return WARMUP_SECONDS + orders * workers * COLD_VIEW_SECONDS


def run(seconds: float = 10.0, concurrency: int = 64, workers: int = 2, orders: int = 256) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="x402mw-bench-checkout-"))
    try:
        with contextlib.ExitStack() as stack:
            env = dict(
                os.environ,
                X402MW_DATA_DIR=str(workdir),
                X402MW_DATABASE_URL=stack.enter_context(_fresh_database("postgresql", workdir)),
                ETH_HASH_BACKEND="pysha3",
            )
            merchant = _cli("platform", "merchants", "create", "--name", "Bench Books", env=env)["id"]
            api_key = _cli("platform", "keys", "create", "--merchant", merchant, env=env)["key"]
            chain = _anvil_options(stack) if workers > 1 else []
            port = free_port()
            serve = [sys.executable, "-m", "x402mw", "platform", "serve", "--port", str(port), "--log-level", "warning"]
            serve += [f"--workers={workers}", *chain]
            log = workdir / "serve.log"
            with log.open("wb") as handle:
                server = subprocess.Popen(serve, env=env, stdout=handle, stderr=subprocess.STDOUT)
            try:
                _wait_http(f"http://127.0.0.1:{port}/healthz", server, log)
                paths, first_ms, again_ms = _orders(f"http://127.0.0.1:{port}", api_key, orders)
                pids = _server_pids(server)
                health, health_cpu = _drive("healthz", port, ["/healthz"], seconds, concurrency, WARMUP_SECONDS, pids)
                warmup = _warmup(orders, workers)
                views, views_cpu = _drive("checkout page", port, paths, seconds, concurrency, warmup, pids)
            finally:
                server.terminate()
                server.wait(timeout=30)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    ratio = views.per_second / health.per_second
    print(
        f"hosted checkout page views on PostgreSQL through uvicorn ({workers} server process(es), uvloop + "
        f"httptools), {orders} orders in turn, concurrency {concurrency}, {seconds:.0f} s after "
        f"{_warmup(orders, workers):.0f} s of warm-up:"
    )
    print("  " + views.line().replace("req/s", "views/s"))
    print("  " + health.line().replace("healthz", "baseline GET /healthz (same processes)"))
    met = views.per_second >= TARGET_PER_SECOND and views.p99_ms <= TARGET_P99_MS and not views.errors
    print(
        f"  ratio views/healthz {ratio:.2f}x; targets >= {TARGET_PER_SECOND:,} views/s with p99 <= "
        f"{TARGET_P99_MS} ms and no errors: {'met' if met else 'NOT met'}"
    )
    print(
        f"  server CPU per request (about; warm-up included): a view {views_cpu:.2f} ms, /healthz "
        f"{health_cpu:.2f} ms; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(
        f"  one view at a time beforehand: an order's first view {first_ms:.1f} ms (the page is made, its QR "
        f"code drawn), a second view {again_ms:.1f} ms (the order read, the kept page served)"
    )
    for measured in (views, health):
        if measured.errors:
            print(f"  first {measured.name} error: {measured.first_error!r}")
    return {
        "views_per_second": views.per_second,
        "views_p50_ms": views.p50_ms,
        "views_p99_ms": views.p99_ms,
        "views_errors": views.errors,
        "healthz_per_second": health.per_second,
        "healthz_p99_ms": health.p99_ms,
        "ratio": ratio,
        "views_cpu_ms": views_cpu,
        "healthz_cpu_ms": health_cpu,
        "first_view_ms": first_ms,
        "second_view_ms": again_ms,
    }


if __name__ == "__main__":
    arguments = sys.argv[1:]
    run(
        float(arguments[0]) if arguments else 10.0,
        int(arguments[1]) if len(arguments) > 1 else 64,
        int(arguments[2]) if len(arguments) > 2 else 2,
        int(arguments[3]) if len(arguments) > 3 else 256,
    )
