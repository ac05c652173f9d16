"""The supervisor of ``platform serve --workers``: it replaces a worker that dies, stops when one
cannot start, and stops every worker on SIGTERM. Real processes on a real port."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.waiting import eventually
from x402mw.platform.server import free_port

# Outside Linux, serve_workers hands over to uvicorn's own workers: no supervisor of ours to test.
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the supervisor runs on Linux only")

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def _supervise(app: str, port: int, min_lifetime: float) -> Iterator[subprocess.Popen[str]]:
    """``serve_workers`` with two workers of ``app`` in a process of its own, killed if still up at the end."""
    code = (
        "import x402mw.platform.supervisor as w\n"
        f"w._MIN_LIFETIME = {min_lifetime}\n"
        f"w.serve_workers({app!r}, host='127.0.0.1', port={port}, workers=2, log_level='warning')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # As a context manager the Popen closes its stderr pipe at the end, as well as waiting.
    with subprocess.Popen(
        [sys.executable, "-c", code], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True
    ) as supervisor:
        try:
            yield supervisor
        finally:
            if supervisor.poll() is None:
                supervisor.kill()
                supervisor.wait()


def _children(pid: int) -> set[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return {int(child) for child in found}


def _answering_pids(port: int, tries: int = 40) -> set[int]:
    """The worker pids that answer ``tries`` requests, each on a new connection."""
    pids = set()
    for _ in range(tries):
        pids.add(httpx.get(f"http://127.0.0.1:{port}/", timeout=10).json()["pid"])
    return pids


def test_a_dead_worker_is_replaced_and_sigterm_stops_them_all() -> None:
    port = free_port()
    with _supervise("tests.worker_apps:pid_app", port, min_lifetime=0.5) as supervisor:
        eventually(lambda: _answering_pids(port), until=lambda pids: len(pids) == 2, what="two workers", interval=0.2)
        first = _answering_pids(port)
        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        eventually(
            lambda: _answering_pids(port) - first,
            until=lambda new: len(new) == 1,
            what="a worker in the killed one's place",
            interval=0.2,
        )
        after = _answering_pids(port)
        assert victim not in after and len(after) == 2
        workers = _children(supervisor.pid)
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=60) == 0
        assert not any(Path(f"/proc/{pid}").exists() for pid in after), "a worker outlived the supervisor"
        assert after <= workers


def test_a_worker_that_cannot_start_stops_the_server_with_an_error() -> None:
    with _supervise("tests.worker_apps:broken_app", free_port(), min_lifetime=30) as supervisor:
        assert supervisor.wait(timeout=120) == 1
        assert supervisor.stderr is not None
        assert "this worker cannot start" in supervisor.stderr.read()


def test_the_workers_stop_when_the_supervisor_is_killed() -> None:
    port = free_port()
    with _supervise("tests.worker_apps:pid_app", port, min_lifetime=0.5) as supervisor:
        eventually(lambda: _answering_pids(port), until=lambda pids: len(pids) == 2, what="two workers", interval=0.2)
        workers = _answering_pids(port)
        supervisor.kill()  # SIGKILL: no handler runs, nothing is terminated by the supervisor
        supervisor.wait()
        eventually(
            lambda: [pid for pid in workers if Path(f"/proc/{pid}").exists()],
            until=lambda alive: not alive,
            what="the workers to stop",
        )
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
