"""``make bench-check``: the fast benchmarks at a small size, each figure held against its floor.

Every figure checked is a ratio measured in one run against a baseline of the same run (ours over
the Foundation SDK's, over a bare INSERT, over ``/healthz``, over the chain alone...), so that a
machine that is slow today slows both sides alike. ``bench/floors.toml`` holds, per benchmark, the
lowest value each ratio may take (``floor``) or the highest (``ceiling``), set about a third short of
the figure on a quiet machine: noise does not trip them, a path made twice as slow does.

::

    python -m bench.check                 # every benchmark in floors.toml
    python -m bench.check orders e2e      # some of them

It prints each figure beside its bound and exits 1 when one is out of bounds (or a benchmark failed).
"""

from __future__ import annotations

import sys
import time
import tomllib
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FLOORS = Path(__file__).with_name("floors.toml")


def _challenge() -> Mapping[str, Any]:
    from bench import bench_challenge

    return bench_challenge.run(n=1000, rounds=12)


def _orders() -> Mapping[str, Any]:
    from bench import bench_orders

    return bench_orders.run(seconds=6.0, concurrency=64, workers=2)


def _e2e() -> Mapping[str, Any]:
    from bench import bench_e2e

    return bench_e2e.run(seconds=8.0, database="sqlite", agents=32)


def _metered() -> Mapping[str, Any]:
    from bench import bench_metered

    return bench_metered.run(seconds=5.0, database="postgresql", agents=32)


def _checkout() -> Mapping[str, Any]:
    from bench import bench_checkout

    return bench_checkout.run(seconds=6.0, concurrency=64, workers=2, orders=64)


def _dashboard() -> Mapping[str, Any]:
    from bench import bench_dashboard

    return bench_dashboard.run(count=100_000, n=100)


# name -> what runs it; the order is the order of the run
BENCHES: dict[str, Callable[[], Mapping[str, Any]]] = {
    "challenge": _challenge,
    "orders": _orders,
    "checkout": _checkout,
    "dashboard": _dashboard,
    "e2e": _e2e,
    "metered": _metered,
}


@dataclass(frozen=True, slots=True)
class Bound:
    """One figure's bound: ``value`` must be >= ``floor`` and <= ``ceiling`` where each is given."""

    bench: str
    figure: str
    floor: float | None
    ceiling: float | None
    why: str

    def holds(self, value: float) -> bool:
        return (self.floor is None or value >= self.floor) and (self.ceiling is None or value <= self.ceiling)

    def describe(self) -> str:
        return f">= {self.floor:g}" if self.floor is not None else f"<= {self.ceiling:g}"


def load_bounds(path: Path = FLOORS) -> list[Bound]:
    """The bounds in ``path``: a table per benchmark, a table per figure with ``floor`` or ``ceiling``."""
    bounds = []
    for bench, figures in tomllib.loads(path.read_text()).items():
        if bench not in BENCHES:
            raise ValueError(f"{path.name}: no benchmark named {bench!r} (known: {', '.join(BENCHES)})")
        for figure, spec in figures.items():
            floor, ceiling = spec.get("floor"), spec.get("ceiling")
            if (floor is None) == (ceiling is None):
                raise ValueError(f"{path.name}: [{bench}] {figure} needs exactly one of floor and ceiling")
            bounds.append(Bound(bench, figure, floor, ceiling, str(spec.get("why", ""))))
    return bounds


def check(names: list[str], bounds: list[Bound]) -> bool:
    """Run the benchmarks ``names`` and print each bound figure; True when every one holds."""
    ok = True
    rows: list[tuple[str, str, str, str, str]] = []
    for name in names:
        wanted = [bound for bound in bounds if bound.bench == name]
        print(f"\n== bench-check: {name}", flush=True)
        started = time.monotonic()
        try:
            figures = BENCHES[name]()
        except Exception:  # a benchmark that breaks fails the check, with its traceback
            traceback.print_exc()
            rows.append((name, "(the benchmark failed)", "-", "-", "FAIL"))
            ok = False
            continue
        took = time.monotonic() - started
        for bound in wanted:
            value = figures.get(bound.figure)
            if not isinstance(value, int | float):
                rows.append((name, bound.figure, "missing", bound.describe(), "FAIL"))
                ok = False
                continue
            holds = bound.holds(float(value))
            ok = ok and holds
            rows.append((name, bound.figure, f"{value:.3g}", bound.describe(), "ok" if holds else "FAIL"))
        print(f"   ({took:.0f} s)", flush=True)
    print("\nbench-check: each same-run figure against its bound (bench/floors.toml)")
    print(f"  {'bench':<10} {'figure':<28} {'value':>9}  {'bound':>9}  result")
    for bench, figure, value, bound, result in rows:
        print(f"  {bench:<10} {figure:<28} {value:>9}  {bound:>9}  {result}")
    return ok


def main(argv: list[str]) -> int:
    bounds = load_bounds()
    names = argv or list(dict.fromkeys(bound.bench for bound in bounds))
    unknown = [name for name in names if name not in BENCHES]
    if unknown:
        print(f"bench-check: unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHES)}")
        return 2
    started = time.monotonic()
    ok = check(names, bounds)
    print(f"bench-check: {'passed' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
