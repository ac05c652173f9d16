"""Start-up failures of ``x402mw platform serve`` and ``worker`` are one line and exit status 1, and
``status`` says what is configured when a chain's node does not answer (issue 36)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens there


def _x402mw(tmp_path: Path, *args: str, **environment: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("X402MW_") or k == "X402MW_ANVIL"}
    env |= {"X402MW_DATA_DIR": str(tmp_path / "data"), **environment}
    return subprocess.run(
        [sys.executable, "-m", "x402mw", "platform", *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_an_unreachable_chain_is_one_line_and_exit_status_1(tmp_path: Path, command: str) -> None:
    done = _x402mw(tmp_path, command, "--rpc-url", UNREACHABLE)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"Error: cannot reach the chain's JSON-RPC at {UNREACHABLE}: ")


def test_an_unreachable_database_is_one_line_and_exit_status_1(tmp_path: Path) -> None:
    done = _x402mw(tmp_path, "serve", X402MW_DATABASE_URL="postgresql://postgres@127.0.0.1:9/nothing")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("Error: the platform could not start: OperationalError: ")


def test_a_relayer_pool_on_the_dev_chain_alone_is_refused(tmp_path: Path) -> None:
    done = _x402mw(tmp_path, "serve", X402MW_RELAYER_POOL_SIZE="4")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Error: X402MW_RELAYER_POOL_SIZE needs --rpc-url: a relayer pool is for chains reached over JSON-RPC" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_status_names_a_chain_whose_node_does_not_answer_by_its_configuration(tmp_path: Path) -> None:
    done = _x402mw(tmp_path, "status", "--rpc-url", UNREACHABLE + "/v2/secret-key")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "chain None" not in done.stdout and "secret-key" not in done.stdout
    assert f"chain at {UNREACHABLE} (chain id unknown until it answers): unreachable: " in done.stdout
