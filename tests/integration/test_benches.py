"""Every benchmark that ``make bench-check`` does not hold to a floor runs here at a small size, so
that none can break unnoticed between the runs made by hand (``bench_subscriptions`` once stopped
with a TypeError for weeks). These check that each runs to its end and prints its figures; the
figures themselves are not judged here (a unit test never reads a wall clock)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# module, its arguments at a small size, a phrase its output must contain
SMALL_RUNS = [
    ("bench_verify", ["200"], "speedup"),
    ("bench_keys", ["20", "1"], "API key check on postgresql"),
    ("bench_devchain", ["40", "4", "40"], "bench_devchain"),
    ("bench_subscriptions", ["2000", "200"], "a pass with nothing due"),
    ("bench_mcp", ["3"], "MCP overhead / HTTP overhead"),
    ("bench_gateway", ["20"], "ratio_402"),
    ("bench_reports", ["5000", "500", "5"], "reports on PostgreSQL"),
    ("bench_channels", ["1", "sqlite", "2"], "channel gas / exact gas"),
]


def _run_small(module: str, arguments: list[str], printed: str) -> None:
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert printed in done.stdout, done.stdout[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(("module", "arguments", "printed"), SMALL_RUNS, ids=[run[0] for run in SMALL_RUNS])
def test_the_benchmark_runs_to_its_end_at_a_small_size(module: str, arguments: list[str], printed: str) -> None:
    _run_small(module, arguments, printed)


@pytest.mark.soak
def test_the_pool_benchmark_runs_to_its_end_at_a_small_size() -> None:
    """With the soak, alone: four platform processes with their relayer pools would take more
    PostgreSQL connections than the rest of the suite leaves (the server's 100)."""
    _run_small("bench_pool", ["3", "16"], "ratio:")


def test_the_floors_name_known_benchmarks_and_bound_each_figure_once() -> None:
    from bench.check import BENCHES, load_bounds

    bounds = load_bounds()
    assert {bound.bench for bound in bounds} == set(BENCHES)
    assert len({(bound.bench, bound.figure) for bound in bounds}) == len(bounds)
    assert all((bound.floor is None) != (bound.ceiling is None) for bound in bounds)
