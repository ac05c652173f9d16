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
import sys
import tempfile
import time
from pathlib import Path

from tests.reliability.cluster import Cluster, new_address
from tests.reliability.pool_load import LoadResult, SettleLoad

RESYNCS = "x402mw_relayer_nonce_resyncs_total"


def _leased(cluster: Cluster) -> int:
    return len(cluster.sql("SELECT address FROM relayer_accounts WHERE locked_until > now() AND holder IS NOT NULL"))


def _line(name: str, result: LoadResult) -> str:
    return (
        f"{name}: {len(result.settled)} paid in {result.seconds:.1f} s = {result.rate:.1f} paid/s "
        f"({result.busy} 503s sent again, {len(result.other)} not settled)"
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
            one = asyncio.run(load.run(seconds, concurrency))
            cluster.sql("UPDATE relayer_pools SET size = 8")  # no restart: the processes follow
            _wait_for(lambda: _leased(cluster) == 8)
            time.sleep(2)  # the new accounts topped up and started
            eight = asyncio.run(load.run(seconds, concurrency))
            # the pool's accounts only: the funding account, shared by every process, may resync
            resyncs = sum(serve.metric(RESYNCS, without=cluster.relayer) for serve in cluster.serves)
    ratio = eight.rate / one.rate if one.rate else float("inf")
    print(
        "bench_pool: 4 serve processes, PostgreSQL, anvil (1 s blocks) behind a 16-per-sender proxy, "
        f"{concurrency} settle calls at a time"
    )
    print("  " + _line("1 account ", one))
    print("  " + _line("8 accounts", eight))
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
