"""``make dist`` builds a wheel that works on its own (issue 36): every file of the package is in it,
and the platform served from the installed wheel, not from this checkout, answers its pages and
assets."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx

from x402mw.platform.server import free_port

ROOT = Path(__file__).resolve().parents[2]


def _build(out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("x402mw-*.whl")
    return wheel


def test_the_wheel_holds_the_package_and_serves_the_platform(tmp_path: Path) -> None:
    wheel = _build(tmp_path / "dist")
    tracked = subprocess.run(
        ["git", "ls-files", "x402mw"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    inside = set(zipfile.ZipFile(wheel).namelist())
    missing = [path for path in tracked if path not in inside and "/versions/__pycache__" not in path]
    assert missing == [], f"files of the package left out of the wheel: {missing}"

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # the wheel's copy first on the path, ahead of this checkout's editable install (and out of the
    # checkout's folder, which `python -c` and `-m` would put first)
    env = {k: v for k, v in os.environ.items() if not k.startswith("X402MW_")}
    env |= {"PYTHONPATH": str(target), "X402MW_DATA_DIR": str(tmp_path / "data")}
    where = subprocess.run(
        [sys.executable, "-c", "import x402mw; print(x402mw.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert where.stdout.strip().startswith(str(target)), where.stdout + where.stderr

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "x402mw", "platform", "serve", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the platform from the wheel did not start"
            time.sleep(0.2)
        pages = ["/v1/health", "/dashboard/sign-in", "/dashboard/static/dashboard.css", "/checkout/static/checkout.js"]
        for path in pages:
            answer = httpx.get(base + path, timeout=10)
            assert answer.status_code == 200, (path, answer.status_code, answer.text[:200])
    finally:
        server.terminate()
        server.communicate(timeout=30)
