"""Processes for the MCP tests: the examples and the x402 Foundation's MCP side, run as a user would."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Deployment
from tests.waiting import eventually
from x402mw.platform.server import free_port

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
INTEROP = ROOT / "tests" / "interop"


def mcp1_python() -> str:
    """The Python of .venv-mcp1 (mcp<2 and the Foundation's ``x402[mcp]``; `make test` makes it)."""
    python = os.environ.get("X402MW_MCP1_PYTHON") or str(ROOT / ".venv-mcp1" / "bin" / "python")
    if not Path(python).exists():
        pytest.fail(f"{python} is missing: `make test` creates it (make .venv-mcp1/.installed)")
    return python


def environment(**extra: str) -> dict[str, str]:
    """This process's environment with this checkout first on the path (the examples import x402mw)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env


def mcp1_environment() -> dict[str, str]:
    """The environment of a .venv-mcp1 process: ours without what points at the main venv's packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ETH_HASH_BACKEND")}


def seller_command(deployment: Deployment, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(EXAMPLES / "mcp_seller.py"),
        "--platform-url",
        deployment.harness.url,
        "--api-key",
        deployment.api_key,
        "--endpoint",
        deployment.endpoint_id,
        *extra,
    ]


@contextlib.contextmanager
def running(command: list[str], port: int, cwd: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """``command`` started in ``cwd``, until it listens on ``port``; yields its MCP URL, stops it after."""
    log = cwd / f"process-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env or environment(), stdout=out, stderr=subprocess.STDOUT)
        try:

            def listening_or_exited() -> bool:
                if process.poll() is None:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()  # refused: not yet
                return True

            eventually(listening_or_exited, what=lambda: f"{command[1]} to listen on {port}: {log.read_text()}")
            assert process.poll() is None, f"{command[1]} exited {process.returncode}: {log.read_text()}"
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env or environment(), capture_output=True, text=True, timeout=120)


def foundation_client(
    deployment: Deployment, url: str, tool: str, arguments: dict[str, Any], cwd: Path
) -> dict[str, Any]:
    """The Foundation's MCP client calls ``tool`` at ``url`` and pays it from ``deployment``'s agent
    (in .venv-mcp1), up to 0.05 of the deployment's USDC."""
    key = "0x" + deployment.agent_key.hex()
    command = [mcp1_python(), str(INTEROP / "x402_mcp_client.py"), url, key, tool, json.dumps(arguments)]
    command += [deployment.harness.network, deployment.harness.usdc]
    done = run(command, cwd, env=mcp1_environment())
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


__all__ = ["foundation_client", "free_port", "mcp1_environment", "mcp1_python", "run", "running", "seller_command"]
