"""Paid requests per second with a pool of 8 relayer accounts, against 1 account, in the same run.

Processes: 4 ``x402mw platform serve`` on a fresh PostgreSQL database; anvil mining a block a
second (``--block-time 1``, as a real chain does) behind the busy-node proxy of the tests
(``tests.rpc_proxy``), which refuses a sender's transactions beyond 16 pending, as geth's pool and
hosted providers do. This process drives ``concurrency`` settle calls at a time
(``POST /v1/agent/settlements``, as the seller middleware makes them, each with a fresh payment)
over the 4 processes for ``seconds``, sending a 503 again after 0.2 s (`tests.reliability.pool_load`).

Baseline: the same platform with a pool of 1 account (``X402MW_RELAYER_POOL_SIZE=1``); then the
pool is made 8 accounts in the database, without a restart, and the same load runs again. One
account carries at most 16 transactions a block; eight carry eight times as many, as far as the
CPU lets the processes keep up (two cores here, shared with the load, anvil and the proxy).

    python -m bench.bench_pool 20 128        # seconds per measurement, concurrent settle calls
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from tests.reliability.cluster import Cluster, new_address
from tests.reliability.pool_load import LoadResult, SettleLoad

RESYNCS = "x402mw_relayer_nonce_resyncs_total"


def _cpu(pgid: int | None) -> float:
    """CPU seconds (user and system) of process ``pgid`` and every process in its group (Linux)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if pgid is not None and (int(fields[2]) == pgid or int(stat.parent.name) == pgid):
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class _CpuMeter:
    """CPU seconds spent by the serves, the node, the proxy and this process over a measurement."""

    def __init__(self, cluster: Cluster) -> None:
        self.groups = {
            "serves": [serve.popen.pid for serve in cluster.serves if serve.popen is not None],
            "anvil": [cluster.anvil.pid],
            "proxy": [cluster.proxy.pid if cluster.proxy else None],
        }
        self.start = self._read()

    def _read(self) -> dict[str, float]:
        read = {name: sum(_cpu(pid) for pid in pids) for name, pids in self.groups.items()}
        times = os.times()
        read["load"] = times.user + times.system
        return read

    def spent(self) -> dict[str, float]:
        now = self._read()
        return {name: now[name] - self.start[name] for name in now}


def _busiest_block(cluster: Cluster, first: int, last: int) -> int:
    """The most transactions one block from ``first`` to ``last`` holds: what the accounts carried."""
    counts = [
        len(cluster.rpc("eth_getBlockByNumber", hex(number), False)["transactions"])
        for number in range(first, last + 1)
    ]
    return max(counts, default=0)


def _head(cluster: Cluster) -> int:
    return int(cluster.rpc("eth_blockNumber"), 16)


def _leased(cluster: Cluster) -> int:
    return len(cluster.sql("SELECT address FROM relayer_accounts WHERE locked_until > now() AND holder IS NOT NULL"))


def _line(name: str, result: LoadResult, cpu: dict[str, float]) -> str:
    per_paid = ", ".join(f"{part} {1000 * spent / max(len(result.settled), 1):.1f}" for part, spent in cpu.items())
    return (
        f"{name}: {len(result.settled)} paid in {result.seconds:.1f} s = {result.rate:.1f} paid/s "
        f"({result.busy} 503s sent again, {len(result.other)} not settled); "
        f"CPU {sum(cpu.values()) / result.seconds:.2f} cores, ms per paid: {per_paid}"
    )


def run(seconds: float = 20.0, concurrency: int = 128) -> float:
    settings = {"X402MW_RELAYER_POOL_SIZE": "1", "X402MW_RELAYER_LEASE_SECONDS": "10", "X402MW_LOG_LEVEL": "warning"}
    with tempfile.TemporaryDirectory() as workdir:
        options = {"anvil_args": ["--block-time", "1"], "rpc_max_pending": 16, "env": settings, "metrics": True}
        with Cluster(Path(workdir), serve_count=4, **options) as cluster:  # type: ignore[arg-type]
            merchant, payout = cluster.merchant("Bench merchant"), new_address()
            payers = [cluster.agent(usdc=10**10) for _ in range(8)]
            load = SettleLoad(cluster, merchant, merchant.endpoint(payout), payout, payers)
            _wait_for(lambda: _leased(cluster) == 1)
            meter, first = _CpuMeter(cluster), _head(cluster)
            one = asyncio.run(load.run(seconds, concurrency))
            one_cpu, one_block = meter.spent(), _busiest_block(cluster, first, _head(cluster))
            cluster.sql("UPDATE relayer_pools SET size = 8")  # no restart: the processes follow
            _wait_for(lambda: _leased(cluster) == 8)
            time.sleep(2)  # the new accounts topped up and started
            meter, first = _CpuMeter(cluster), _head(cluster)
            eight = asyncio.run(load.run(seconds, concurrency))
            eight_cpu, eight_block = meter.spent(), _busiest_block(cluster, first, _head(cluster))
            # the pool's accounts only: the funding account, shared by every process, may resync
            resyncs = sum(serve.metric(RESYNCS, without=cluster.relayer) for serve in cluster.serves)
    ratio = eight.rate / one.rate if one.rate else float("inf")
    print(
        "bench_pool: 4 serve processes, PostgreSQL, anvil (1 s blocks) behind a 16-per-sender proxy, "
        f"{concurrency} settle calls at a time"
    )
    print("  " + _line("1 account ", one, one_cpu) + f"; busiest block: {one_block} transactions")
    print("  " + _line("8 accounts", eight, eight_cpu) + f"; busiest block: {eight_block} transactions")
    print(f"  ratio: {ratio:.1f}x (target >= 4x); nonce resyncs: {resyncs:.0f}")
    return ratio


def _wait_for(condition: object, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("the relayer pool was never shared out")
        time.sleep(0.5)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    run(float(arguments[0]) if arguments else 20.0, int(arguments[1]) if len(arguments) > 1 else 128)
