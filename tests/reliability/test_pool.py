"""The relayer pool under load, as real processes: 4 ``serve`` processes on PostgreSQL, a pool of 8
relayer accounts, anvil mining a block a second behind the busy-node proxy (16 pending
transactions per sender, as geth). A 60-second load pays through every process; one process is
killed mid-load. Then: every payment settled (200), no account's nonces were ever shared (0 nonce
resyncs in the metrics), the killed process's accounts were taken over once their leases ran out,
and the soak's invariants hold: every transfer on chain matches one settled record, nobody was
charged twice, nothing is left in flight."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.cluster import Cluster, new_address
from tests.reliability.pool_load import PRICE, LoadResult, SettleLoad
from tests.waiting import eventually

# Four platform processes under a minute of load: it runs with the soak, alone (make test).
pytestmark = [pytest.mark.soak, pytest.mark.anvil, pytest.mark.postgres]

LEASE = 6
SECONDS = 60
RESYNCS = "x402mw_relayer_nonce_resyncs_total"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    settings = {
        "X402MW_RELAYER_POOL_SIZE": "8",
        "X402MW_RELAYER_LEASE_SECONDS": str(LEASE),
        "X402MW_RELAYER_GAS_FLOOR_WEI": str(10**17),
    }
    with Cluster(
        tmp_path, serve_count=4, anvil_args=["--block-time", "1"], rpc_max_pending=16, env=settings, metrics=True
    ) as made:
        yield made


def _leases(cluster: Cluster) -> dict[str, str | None]:
    rows = cluster.sql("SELECT address, holder FROM relayer_accounts WHERE locked_until > now()")
    return {address: holder for address, holder in rows}


def test_a_pool_of_accounts_pays_without_sharing_nonces_and_survives_a_killed_process(cluster: Cluster) -> None:
    merchant, payout = cluster.merchant(), new_address()
    endpoint = merchant.endpoint(payout)
    payers = [cluster.agent(usdc=10**9) for _ in range(8)]
    load = SettleLoad(cluster, merchant, endpoint, payout, payers)
    eventually(
        lambda: _leases(cluster),
        until=lambda leases: len(leases) >= 8 and len(set(leases.values())) >= 4,
        what="the pool's 8 accounts shared out among the 4 processes",
    )

    killed = cluster.serves[3]
    outcome: list[LoadResult] = []
    runner = threading.Thread(target=lambda: outcome.append(asyncio.run(load.run(SECONDS, 64))))
    runner.start()
    time.sleep(SECONDS / 3)
    before = _leases(cluster)
    resyncs_of_killed = killed.metric(RESYNCS, without=cluster.relayer)  # the pool's accounts
    killed.kill()
    runner.join(SECONDS + 240)
    assert outcome, "the load never finished"
    result = outcome[0]
    print(
        f"pool load: {len(result.settled)} paid in {result.seconds:.1f} s ({result.rate:.1f}/s), "
        f"{result.busy} 503s and {result.cut} cut connections sent again"
    )

    assert result.other == [], result.other[:5]  # every paid request settled: a 200
    assert len(result.settled) == len(set(result.settled)) > 0
    resyncs = resyncs_of_killed + sum(serve.metric(RESYNCS, without=cluster.relayer) for serve in cluster.serves[:3])
    assert resyncs == 0, "no two processes ever sent from one account"

    # The killed process's accounts were taken over by the living once their leases ran out.
    time.sleep(LEASE + 3)
    after = _leases(cluster)
    living = {holder for (holder,) in cluster.sql("SELECT holder FROM relayer_holders WHERE seen_until > now()")}
    dead = set(before.values()) - living
    assert len(dead) == 1 and len(living) == 3, (before, living)
    assert len(after) == 8 and set(after.values()) <= living, after
    assert {a for a, h in before.items() if h in dead} <= set(after)

    # The soak's invariants: each transfer once, each payer charged once per payment.
    eventually(cluster.unfinished_payments, until=lambda left: not left, what="every payment finished")
    settled = cluster.sql("SELECT transaction FROM agent_payments WHERE pay_to = %s AND status = 'settled'", payout)
    on_chain = [t["tx"] for t in cluster.transfers() if t["to"].lower() == payout.lower()]
    assert sorted(row[0] for row in settled) == sorted(on_chain)
    assert set(result.settled) <= set(on_chain)
    assert cluster.balance(payout) == PRICE * len(on_chain)
    assert sum(10**9 - cluster.balance(p.address) for p in payers) == PRICE * len(on_chain)
