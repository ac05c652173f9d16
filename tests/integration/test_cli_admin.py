"""A merchant's day on the command line, against a real ``x402mw platform serve`` on SQLite (the
queues' status on PostgreSQL too): what ``serve`` says on start (and that the faucet command it
prints works as printed),
``merchants create|list|show|rename``, ``keys create|list|revoke`` with their ``--json``, and
``platform status`` while the platform runs and once it has stopped. And ``x402mw demo``, which
leaves nothing behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli_runs import run_cli
from tests.harness import Serve, postgres_database, serving
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.devchain import DEV_CHAIN_ID

NETWORK = f"eip155:{DEV_CHAIN_ID}"


@pytest.fixture
def served(database: str, tmp_path: Path) -> Iterator[Serve]:
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(postgres_database()) if database == "postgresql" else None
        yield stack.enter_context(serving(tmp_path / "data", url))


def _cli(serve: Serve, *args: str, json_lines: bool = False, status: int = 0) -> Any:
    """``x402mw platform ARGS --data-dir ... --json`` (in this process: the command is tested, not
    its process): its answer."""
    done = run_cli(["platform", *args, "--data-dir", str(serve.data_dir), "--json"], serve.env())
    assert done.returncode == status, done.stderr + done.stdout
    if json_lines:
        return [json.loads(line) for line in done.stdout.splitlines()]
    return json.loads(done.stdout) if status == 0 else done.stderr


def _text(serve: Serve, *args: str) -> str:
    done = run_cli(["platform", *args, "--data-dir", str(serve.data_dir)], serve.env())
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_serve_says_where_it_is_and_its_faucet_command_funds_an_agent(served: Serve) -> None:
    said = served.log.read_text()
    assert f"API at {served.url}" in said
    assert f"checkout pages at http://127.0.0.1:{served.port}/checkout/pi_<paymentId>" in said
    assert f"data dir: {served.data_dir}" in said
    assert f"dashboard at http://127.0.0.1:{served.port}/dashboard " in said
    assert re.search(r"receipts signed by 0x[0-9a-fA-F]{40} \(GET /v1/health: receiptSigner\)", said)
    assert f"chain {NETWORK} (chainId {DEV_CHAIN_ID}, x402mw dev chain, test):" in said
    tokens = dict(re.findall(r"^    (USDC|EURC) (0x[0-9a-fA-F]{40})$", said, re.MULTILINE))
    assert set(tokens) == {"USDC", "EURC"}
    # the faucet command, run as printed (a shell, a test key and an agent's address in the environment)
    lines = said.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("curl -s"))
    command = "\n".join(line.strip() for line in lines[start : start + 2])
    merchant = _cli(served, "merchants", "create", "--name", "Faucet Co")
    key = _cli(served, "keys", "create", "--merchant", merchant["id"])["key"]
    agent = address_of(new_private_key())
    env = dict(os.environ, X402MW_API_KEY=key, AGENT_ADDRESS=agent)
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    funded = json.loads(done.stdout)
    assert funded["address"] == agent and funded["currency"] == "USDC" and funded["network"] == NETWORK
    # status while serve runs: the chain is its, the tokens are the ones it printed, nothing is overdue
    report = _cli(served, "status")
    [chain] = report["chains"]
    assert chain["chainId"] == DEV_CHAIN_ID and chain["tokens"] == tokens
    assert chain["state"].startswith("running")
    assert report["worker"] == "ok" and report["dataDir"] == str(served.data_dir)
    assert set(report["queues"]) == {"webhookDeliveries", "emails", "refunds", "settlements", "expiringOrders"}
    # once serve has stopped, status reads the chain itself: its head and the relayer's gas
    served.stop()
    report = _cli(served, "status")
    [chain] = report["chains"]
    assert chain["state"] == "ok" and chain["head"] > 0 and float(chain["relayerGas"]) > 0
    assert "worker: ok" in _text(served, "status")


def test_merchants_and_keys(served: Serve) -> None:
    assert _cli(served, "merchants", "list", json_lines=True) == []
    first = _cli(served, "merchants", "create", "--name", "First shop")
    second = _cli(served, "merchants", "create", "--name", "Second shop")
    listed = _cli(served, "merchants", "list", json_lines=True)
    assert [(m["id"], m["name"], m["keys"]) for m in listed] == [
        (first["id"], "First shop", 0),
        (second["id"], "Second shop", 0),
    ]
    assert _cli(served, "merchants", "rename", first["id"], "--name", "First & best") == {
        "id": first["id"],
        "name": "First & best",
    }
    created = [_cli(served, "keys", "create", "--merchant", first["id"], "--mode", mode) for mode in ("test", "live")]
    keys = _cli(served, "keys", "list", "--merchant", first["id"], json_lines=True)
    assert [(k["id"], k["mode"], k["lastUsedAt"], k["revokedAt"]) for k in keys] == [
        (created[0]["id"], "test", None, None),
        (created[1]["id"], "live", None, None),
    ]
    assert created[0]["key"].startswith(keys[0]["prefix"]) and len(keys[0]["prefix"]) < len(created[0]["key"])
    # a request with the test key is its last use
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {created[0]['key']}"}) as api:
        assert api.get("/payment-intents").status_code == 200
    _cli(served, "keys", "revoke", created[1]["id"])
    shown = _cli(served, "merchants", "show", first["id"])
    assert shown["name"] == "First & best" and shown["keys"] == 2 and shown["activeKeys"] == 1
    used, revoked = shown["apiKeys"]
    assert used["lastUsedAt"] is not None and used["revokedAt"] is None
    assert revoked["lastUsedAt"] is None and revoked["revokedAt"] is not None
    # the text forms: a header and one line per row
    table = _text(served, "keys", "list", "--merchant", first["id"]).splitlines()
    assert table[0].split() == ["id", "prefix", "mode", "createdAt", "lastUsedAt", "revokedAt"] and len(table) == 3
    assert "First & best" in _text(served, "merchants", "list")
    # unknown ids are a clear error, exit status 1
    missing = str(new_private_key().hex()[:8])
    assert "no merchant" in _cli(served, "merchants", "show", missing, status=1)
    assert "no merchant" in _cli(served, "merchants", "rename", missing, "--name", "x", status=1)
    assert "no merchant" in _cli(served, "keys", "list", "--merchant", missing, status=1)


@pytest.mark.both_databases  # the queues' ages: COUNT FILTER and time comparisons in each dialect
def test_status_says_when_no_worker_does_the_work_due(database: str, tmp_path: Path) -> None:
    # a serve without the worker duties: an order past its expiry stays owed, and status says so
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(postgres_database()) if database == "postgresql" else None
        serve = stack.enter_context(serving(tmp_path / "data", url, X402MW_RUN_WORKER="false"))
        merchant = _cli(serve, "merchants", "create", "--name", "Idle Co")
        key = _cli(serve, "keys", "create", "--merchant", merchant["id"])["key"]
        expires = datetime.now(UTC) + timedelta(seconds=1)
        with httpx.Client(base_url=serve.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
            body = {"orderId": "late-1", "amount": "1.00", "currency": "USDC", "expiresAt": expires.isoformat()}
            assert api.post("/payment-intents", json=body).status_code == 201
        while datetime.now(UTC) < expires + timedelta(seconds=1.5):
            time.sleep(0.2)
        done = run_cli(["platform", "status", "--overdue-seconds", "1", "--json"], serve.env())
        assert done.returncode == 1 and done.stdout.startswith("{"), done.stderr + done.stdout
        report = json.loads(done.stdout)
        assert report["queues"]["expiringOrders"] == {"waiting": 1, "overdue": 1}
        assert report["worker"].startswith("behind (expiringOrders")
        # within the default minute, the same order is only waiting
        assert _cli(serve, "status")["worker"] == "ok"


def test_the_demo_removes_its_folder(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("X402MW_") or k == "X402MW_ANVIL"}
    done = subprocess.run(
        [sys.executable, "-m", "x402mw", "demo", "--requests", "1"],
        env=env | {"TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.rstrip().splitlines()[-1].startswith("Next: run your own platform")  # a next step
    assert "/dashboard" in done.stdout.rstrip().splitlines()[-1] and "docs/quickstart.md" in done.stdout
    made = re.search(r"workdir: (\S+) \(removed at the end\)", done.stdout)
    assert made is not None and made[1].startswith(str(tmp_path)), done.stdout
    assert list(tmp_path.iterdir()) == []
