"""SIGTERM drains ``x402mw platform serve`` (issue 38): in the middle of a bounded paid load the
process stops taking requests, finishes the ones it has and exits within the bound it logs; a second
SIGTERM exits at once. Either way, once it is started again, the chain, the records and what the
agents were answered agree: no payment settled twice, none lost."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx

from tests.harness import Serve, serving
from tests.integration.test_serve_restart import STOPPED, _fund, _merchant, _on_chain, _paid_tx, _pay, _rows
from tests.waiting import eventually
from x402mw.client import Wallet
from x402mw.evm.keys import new_private_key
from x402mw.platform.drain import FORCED_EXIT_STATUS

PRICE = 10_000
FUNDED = 1_000_000


def _load(serve: Serve, key: str, endpoint: str, agents: list[Wallet], signals: int) -> list[str]:
    """Each agent pays up to 10 times; once 8 payments are answered, ``signals`` SIGTERMs go to serve.
    The transactions the agents were answered with."""
    answered: list[str] = []
    process = serve.process
    assert process is not None

    async def agent_loop(agent: Wallet) -> None:
        for _ in range(10):
            try:
                response = await _pay(serve, key, endpoint, agent)
            except httpx.HTTPError:
                return
            if response.status_code != 200:
                return
            answered.append(_paid_tx(response))
            if len(answered) == 8:
                process.send_signal(signal.SIGTERM)
                if signals == 2:  # once the first is seen (two at once reach a process as one)
                    eventually(lambda: "draining" in serve.log.read_text(), what="serve to begin draining")
                    process.send_signal(signal.SIGTERM)

    async def load() -> None:
        await asyncio.gather(*(agent_loop(agent) for agent in agents))

    asyncio.run(load())
    return answered


def _agree(serve: Serve, data_dir: Path, agents: list[Wallet], answered: list[str]) -> None:
    """Started again: wait until every payment is final, then chain, records and answers agree."""
    serve.start()
    eventually(
        lambda: _rows(data_dir, "SELECT count(*) FROM agent_payments WHERE status NOT IN ('settled', 'failed')"),
        until=lambda rows: rows == [(0,)],
        what="the restarted platform to finish every payment left in flight",
        timeout=120,
    )
    assert serve.stop() in STOPPED
    settled = _rows(data_dir, "SELECT payer, \"transaction\" FROM agent_payments WHERE status = 'settled'")
    transactions = [tx for _, tx in settled]
    assert len(transactions) == len(set(transactions)), "no transaction recorded for two payments"
    assert set(answered) <= set(transactions), "every payment an agent was answered for is recorded settled"
    receipts, balances = _on_chain(data_dir, transactions, [agent.address for agent in agents])
    assert [r and r["status"] for r in receipts] == ["0x1"] * len(transactions)
    for agent, balance in zip(agents, balances, strict=True):
        paid = sum(1 for payer, _ in settled if payer.lower() == agent.address.lower())
        assert FUNDED - balance == paid * PRICE, f"{agent.address}: spent what its settled payments say, no more"


def test_sigterm_mid_load_drains_and_loses_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    agents = [Wallet(new_private_key()) for _ in range(4)]
    with serving(data_dir, X402MW_DRAIN_SECONDS="20") as serve:
        key, endpoint = _merchant(serve)
        for agent in agents:
            _fund(serve, key, agent.address, "1")
        process = serve.process
        assert process is not None
        answered = _load(serve, key, endpoint, agents, signals=1)
        assert process.wait(timeout=60) == 0, "drained and exited by itself"
        serve.process = None
        log = serve.log.read_text()
        assert "serve: SIGTERM, draining: no new work, finishing what is in flight; exits within 20 s" in log
        assert "Application shutdown complete." in log, "the platform closed: its leases and connections given back"
        assert len(answered) >= 8
        _agree(serve, data_dir, agents, answered)


def test_a_second_sigterm_exits_at_once_and_loses_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    agents = [Wallet(new_private_key()) for _ in range(4)]
    with serving(data_dir, X402MW_TAKEOVER_SECONDS="3") as serve:
        key, endpoint = _merchant(serve)
        for agent in agents:
            _fund(serve, key, agent.address, "1")
        process = serve.process
        assert process is not None
        answered = _load(serve, key, endpoint, agents, signals=2)
        assert process.wait(timeout=60) == FORCED_EXIT_STATUS
        serve.process = None
        assert "serve: SIGTERM again, exiting now; payments in flight stay recoverable" in serve.log.read_text()
        _agree(serve, data_dir, agents, answered)


def test_the_worker_drains_on_sigterm_and_a_second_exits_at_once(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("X402MW_") or k == "X402MW_ANVIL"}
    env |= {"X402MW_DATA_DIR": str(tmp_path / "data"), "X402MW_DRAIN_SECONDS": "15"}
    command = [sys.executable, "-m", "x402mw", "platform", "worker"]
    for signals, status in ((1, 0), (2, FORCED_EXIT_STATUS)):
        log = tmp_path / f"worker-{signals}.log"
        with log.open("wb") as handle:
            worker = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
        try:
            eventually(lambda: "worker running on" in log.read_text(), what=lambda: log.read_text(), timeout=120)  # noqa: B023
            worker.send_signal(signal.SIGTERM)
            if signals == 2:
                eventually(lambda: "draining" in log.read_text(), what=lambda: log.read_text())  # noqa: B023
                worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        text = log.read_text()
        assert "worker: SIGTERM, draining: no new work, finishing what is in flight; exits within 15 s" in text
        forced = "worker: SIGTERM again, exiting now" in text
        # An idle worker may finish draining before the second signal arrives: then it exits by itself, or
        # the signal ends it as the interpreter shuts down (Python has put back the default handlers by then).
        raced = [(0, False), (-signal.SIGTERM, False)]
        assert (code, forced) in ([(0, False)] if signals == 1 else [(status, True), *raced]), (code, text)
