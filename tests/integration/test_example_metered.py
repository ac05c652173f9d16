"""examples/metered_seller.py run as its docstring says (``python path/to/examples/metered_seller.py``,
from another folder) against the real platform on the dev chain, paid by ``x402mw pay``: it charges
per generated token, and the CLI shows what was charged and the ceiling signed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.harness import PlatformHarness
from tests.metered_fixtures import metered_deployment
from tests.waiting import eventually
from x402mw.platform.server import free_port

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "metered_seller.py"


def test_the_metered_example_charges_per_token(dev_platform: PlatformHarness, tmp_path: Path) -> None:
    deployment = metered_deployment(dev_platform, ceiling=50_000)
    port = free_port()
    env = dict(
        os.environ,
        X402MW_API_KEY=deployment.api_key,
        X402MW_ENDPOINT_ID=deployment.endpoint_id,
        X402MW_PLATFORM_URL=dev_platform.url,
        PYTHONPATH=os.pathsep.join([str(EXAMPLE.parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    log = tmp_path / "seller.log"
    with log.open("wb") as out:
        seller = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--port", str(port)], cwd=tmp_path, env=env, stdout=out, stderr=out
        )
    try:
        health = f"http://127.0.0.1:{port}/health"
        eventually(
            lambda: seller.poll() is not None or httpx.get(health, timeout=2).status_code == 200,
            what=lambda: f"the example to answer:\n{log.read_text()}",
        )
        assert seller.poll() is None, log.read_text()
        agent_env = dict(env, X402MW_PRIVATE_KEY="0x" + deployment.agent_key.hex())
        paid = subprocess.run(
            [
                sys.executable, "-m", "x402mw", "pay", "--json", "--max-amount", "0.05", "-X", "POST",
                "-d", json.dumps({"prompt": "hello", "maxTokens": 12}), f"http://127.0.0.1:{port}/generate",
            ],
            cwd=tmp_path, env=agent_env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert paid.returncode == 0, paid.stdout + paid.stderr
        answer = json.loads(paid.stdout)
        assert json.loads(answer["body"])["tokens"] == 12
        payment = answer["payment"]
        assert (payment["scheme"], payment["atomicAmount"], payment["atomicMaxAmount"]) == ("upto", "1200", "50000")
        assert payment["transaction"]
        text = subprocess.run(
            [
                sys.executable, "-m", "x402mw", "pay", "--max-amount", "0.05", "-X", "POST",
                "-d", json.dumps({"prompt": "hi", "maxTokens": 0}), f"http://127.0.0.1:{port}/generate",
            ],
            cwd=tmp_path, env=agent_env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert text.returncode == 0, text.stdout + text.stderr
        assert "charged: 0 of at most 0.05 " in text.stdout  # the token by symbol, or its address
        assert "transaction: none (nothing was charged, so nothing was sent)" in text.stdout
        assert "unknown" not in text.stdout
    finally:
        seller.terminate()
        seller.wait(timeout=10)
    assert dev_platform.balance(deployment.payout) == 1200
