"""``x402mw platform serve --workers 2`` on PostgreSQL: two processes on one port, on keys and a schema
made once, drained together on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import postgres_database
from tests.waiting import eventually
from x402mw.cli import main
from x402mw.cli_options import _settings
from x402mw.evm.keys import address_of
from x402mw.platform.chain.anvil import ANVIL_DEV_KEYS, AnvilProcess, deploy_test_tokens
from x402mw.platform.chain.rpc import HttpJsonRpc
from x402mw.platform.db.engine import create_engine_for
from x402mw.platform.server import free_port
from x402mw.platform.services.merchants import create_api_key, create_merchant


def _tokens(url: str) -> dict[str, str]:
    async def deploy() -> dict[str, str]:
        rpc = HttpJsonRpc(url)
        try:
            return await deploy_test_tokens(rpc, ANVIL_DEV_KEYS[0])
        finally:
            await rpc.aclose()

    return asyncio.run(deploy())


def _api_key(database_url: str) -> str:
    async def make() -> str:
        engine = create_engine_for(database_url)
        try:
            merchant = await create_merchant(engine, "Two workers")
            return (await create_api_key(engine, merchant.id))[1]
        finally:
            await engine.dispose()

    return asyncio.run(make())


def _wait_until_up(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    eventually(
        lambda: server.poll() is not None or httpx.get(url, timeout=1).status_code == 200,
        what=lambda: f"{url} to answer:\n{log.read_text()}",
        timeout=120,
    )
    assert server.poll() is None, log.read_text()


def _pids_of_sockets(port: int, state: str) -> list[set[str]]:
    """The processes holding each socket on ``port`` in ``state`` (``ss``; one set per socket)."""
    lines = subprocess.run(
        ["ss", "-tnpH", "state", state, f"( sport = :{port} )"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return [set(re.findall(r"pid=(\d+)", line)) for line in lines]


def _spread_of_connections(port: int, count: int) -> dict[str, int]:
    """Open ``count`` keep-alive connections at once; how many each server process accepted."""

    async def hold() -> dict[str, int]:
        clients = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) for _ in range(count)]
        try:
            replies = await asyncio.gather(*(client.get("/healthz") for client in clients))
            assert all(reply.status_code == 200 for reply in replies)
            spread: dict[str, int] = {}
            for pids in _pids_of_sockets(port, "established"):
                for pid in pids:
                    spread[pid] = spread.get(pid, 0) + 1
            return spread
        finally:
            await asyncio.gather(*(client.aclose() for client in clients))

    return asyncio.run(hold())


def test_two_workers_share_one_port_one_schema_and_one_set_of_keys(tmp_path: Path) -> None:
    with AnvilProcess() as anvil, postgres_database() as database_url:
        usdc = _tokens(anvil.url)["USDC"]
        env = dict(os.environ, X402MW_DATA_DIR=str(tmp_path), X402MW_DATABASE_URL=database_url, X402MW_MIGRATE="true")
        env["X402MW_DRAIN_SECONDS"] = "12"
        port, metrics_port = free_port(), free_port()
        log = tmp_path / "serve.log"
        command = [sys.executable, "-m", "x402mw", "platform", "serve", "--port", str(port), "--workers", "2"]
        command += ["--metrics-port", str(metrics_port)]
        command += ["--rpc-url", anvil.url, "--token", f"USDC={usdc}", "--log-level", "warning"]
        with log.open("wb") as handle:
            server = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
        try:
            _wait_until_up(f"http://127.0.0.1:{port}/healthz", server, log)
            workers = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True).stdout.split()
            listening = _pids_of_sockets(port, "listening")
            spread = _spread_of_connections(port, 32)
            key = _api_key(database_url)  # the schema is there: serve migrated before starting the workers
            signers, created = set(), []
            for n in range(16):  # a new connection each time, so that both workers answer some
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                    signers.add(client.get("/healthz").json()["receiptSigner"])
                    reply = client.post(
                        "/v1/payment-intents",
                        json={"orderId": f"order-{n}", "amount": "1.00", "currency": "USDC"},
                        headers={"Authorization": f"Bearer {key}", "Idempotency-Key": f"key-{n}"},
                    )
                    created.append(reply.status_code)
            metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
            server.send_signal(signal.SIGTERM)
            drained = server.wait(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(timeout=30)
    text = log.read_text()
    # The supervisor and each worker drain within the bound, and all exit by themselves.
    assert drained == 0, text
    assert text.count("serve: SIGTERM, draining: no new work, finishing what is in flight; exits within 12 s") == 3
    assert "exiting now" not in text
    serving = set().union(*listening)  # the workers' pids
    assert not [pid for pid in serving if Path(f"/proc/{pid}").exists()], "no worker outlives the supervisor"
    receipt_key = bytes.fromhex((tmp_path / "receipt.key").read_text().strip())
    assert len(workers) >= 2, workers  # the worker processes (and multiprocessing's resource tracker)
    # each worker listens on a socket of its own (SO_REUSEPORT), so the kernel balances connections
    # between them; uvicorn's shared socket let one process accept most of a burst of connections
    assert len(listening) == 2 and all(len(pids) == 1 for pids in listening), listening
    assert len(spread) == 2 and min(spread.values()) >= 5, spread
    assert signers == {address_of(receipt_key)}
    assert created == [201] * 16
    # The supervisor serves the metrics of both workers, summed: each answered some of the 16.
    counted = {
        sample.labels["status"]: sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "x402mw_http_requests_total"
        and (sample.labels["method"], sample.labels["route"]) == ("POST", "/v1/payment-intents")
    }
    assert counted == {"201": 16}


def test_more_workers_than_one_need_a_shared_chain(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["platform", "serve", "--workers", "2", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "--rpc-url" in result.output


def test_chains_and_tokens_come_from_the_environment_as_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X402MW_RPC_URL", "http://127.0.0.1:8545, http://127.0.0.1:8546")
    monkeypatch.setenv(
        "X402MW_TOKENS",
        "USDC=0x5FbDB2315678afecb367f032d93F642f64180aa3 EURC=0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512",
    )
    for name in ("serve", "worker"):
        command = main.commands["platform"].commands[name]  # type: ignore[attr-defined]
        settings = _settings(command.make_context(name, []).params)  # no option given: the environment's
        rpc_urls = [chain.rpc_url.get_secret_value() for chain in settings.chains if chain.rpc_url]
        assert rpc_urls == ["http://127.0.0.1:8545", "http://127.0.0.1:8546"], name
        assert [list(chain.tokens) for chain in settings.chains] == [["USDC", "EURC"]] * 2, name
