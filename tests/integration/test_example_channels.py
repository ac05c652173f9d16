"""examples/channel_seller.py run as its docstring says (``python path/to/examples/channel_seller.py``,
from another folder) against the real platform on the dev chain, paid by the x402 Foundation SDK's
``batch-settlement`` client: one deposit, vouchers after it, one claim and one settle."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.channel_fixtures import channel_deployment, sdk_channel_agent
from tests.harness import PlatformHarness
from tests.waiting import eventually
from x402mw.platform.server import free_port

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "channel_seller.py"

pytestmark = pytest.mark.anyio


async def test_the_foundation_sdk_pays_the_channel_example(dev_platform: PlatformHarness, tmp_path: Path) -> None:
    deployment = await asyncio.to_thread(channel_deployment, dev_platform, price=1_000, min_deposit=10_000)
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
        await asyncio.to_thread(
            eventually,
            lambda: seller.poll() is not None or httpx.get(health, timeout=2).status_code == 200,
            what=lambda: f"the example to answer:\n{log.read_text()}",
        )
        assert seller.poll() is None, log.read_text()
        agent, _scheme = sdk_channel_agent(dev_platform, deployment.agent_key, httpx.AsyncHTTPTransport())
        async with agent:
            answers = [await agent.get(f"http://127.0.0.1:{port}/quote", params={"q": str(n)}) for n in range(6)]
    finally:
        seller.terminate()
        seller.wait(timeout=10)
    for response in answers:
        assert response.status_code == 200, response.text
        assert response.json()["charged"] == 1000
    settled = [json.loads(base64.b64decode(r.headers["PAYMENT-RESPONSE"])) for r in answers]
    assert [bool(s["transaction"]) for s in settled] == [True] + [False] * 5  # one deposit of the 10,000 floor
    assert settled[-1]["extra"]["channelState"]["chargedCumulativeAmount"] == "6000"
    assert settled[-1]["extra"]["channelState"]["balance"] == "10000"

    worker = dev_platform.platform.channel_worker
    dev_platform.server.call(lambda _p: worker.claim(everything=True))
    dev_platform.server.call(lambda _p: worker.settle())
    assert await asyncio.to_thread(dev_platform.balance, deployment.payout) == 6_000
