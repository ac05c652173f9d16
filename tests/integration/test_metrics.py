"""Prometheus metrics of a real platform, scraped over HTTP from the metrics listener."""

from __future__ import annotations

import asyncio
import math
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from examples.metrics_summary import quantile, summarize
from tests.harness import Deployment, PlatformHarness
from tests.sellers import asgi_transport, starlette_app
from tests.waiting import eventually
from x402mw.cli import main
from x402mw.client import Wallet, X402Auth
from x402mw.evm.keys import new_private_key
from x402mw.platform.metrics import serve_metrics
from x402mw.platform.server import free_port
from x402mw.protocol import PaymentRequirements, reasons

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def metrics_url() -> Iterator[str]:
    port = free_port()
    stop = serve_metrics(port)
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        stop()


async def _scrape(url: str) -> Samples:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(url)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    return after.get(key, 0.0) - before.get(key, 0.0)


async def _pay(deployment: Deployment, auth: X402Auth) -> httpx.Response:
    app = starlette_app(deployment.api_key, deployment.harness.url, deployment.endpoint_id)
    async with httpx.AsyncClient(
        transport=asgi_transport(app), base_url="http://testserver", auth=auth, timeout=60
    ) as client:
        return await client.get("/weather")


async def test_a_scrape_shows_settlements_their_phases_and_the_api_calls(
    dev_platform: PlatformHarness, metrics_url: str
) -> None:
    deployment = await asyncio.to_thread(dev_platform.deploy)
    network = dev_platform.network
    before = await _scrape(metrics_url)

    auth = X402Auth(deployment.agent, max_amount="0.05")
    for _ in range(2):
        assert (await _pay(deployment, auth)).status_code == 200
    broke = X402Auth(Wallet(new_private_key()), max_amount="0.05")  # holds no USDC: refused at simulation
    assert (await _pay(deployment, broke)).status_code == 402

    after = await _scrape(metrics_url)
    settlements = "x402mw_settlements_total"
    assert _delta(before, after, settlements, network=network, outcome="settled", reason="") == 2
    assert _delta(before, after, settlements, network=network, outcome="failed", reason=reasons.INSUFFICIENT_FUNDS) == 1
    for phase in ("before_send", "chain", "platform"):  # timed for the two transfers sent, not the refusal
        name = f"x402mw_settlement_{phase}_seconds"
        assert _delta(before, after, f"{name}_count", network=network) == 2, phase
        assert _delta(before, after, f"{name}_sum", network=network) > 0, phase
        assert _delta(before, after, f"{name}_bucket", network=network, le="+Inf") == 2, phase
    # The registry is the process's: every platform of the suite in this process runs a dev chain of
    # the same id, and their workers may send a sweep or a refund meanwhile. The two transfers are
    # among what was counted.
    assert _delta(before, after, "x402mw_relayer_transactions_total", network=network, result="sent") >= 2
    http = "x402mw_http_requests_total"
    assert _delta(before, after, http, method="POST", route="/v1/agent/settlements", status="200") == 3
    assert _delta(before, after, http, method="GET", route="/v1/agent/endpoints/{endpoint_id}", status="200") >= 1
    assert not [key for key in after if key[0] == http and ("route", deployment.endpoint_id) in key[1]]

    async with httpx.AsyncClient(timeout=10) as client:
        summary = summarize((await client.get(metrics_url)).text)  # the example's reading of a scrape
    assert any(line.startswith(f"  {network} settled: ") for line in summary), summary
    assert any(line.startswith(f"  {network} failed ({reasons.INSUFFICIENT_FUNDS}): ") for line in summary)
    for phase in ("before_send", "chain", "platform"):
        assert any(re.fullmatch(rf"  {network} {phase}: [0-9.]+ ms / [0-9.]+ ms", line) for line in summary), summary


async def test_a_refusal_before_any_settlement_work_is_counted_with_its_reason(
    deployment: Deployment, metrics_url: str
) -> None:
    other = "eip155:1"  # a network the endpoint (on the dev chain) does not take
    authorization = {
        "from": deployment.agent.address,
        "to": deployment.payout,
        "value": "10000",
        "validAfter": "0",
        "validBefore": "2000000000",
        "nonce": "0x" + "ab" * 32,
    }
    before = await _scrape(metrics_url)
    with deployment.api() as api:
        reply = api.post(
            "/agent/settlements",
            json={
                "endpointId": deployment.endpoint_id,
                "challengeId": "ch_metrics",
                "expiresAt": 2_000_000_000,
                "accepted": {
                    "scheme": "exact",
                    "network": other,
                    "amount": "10000",
                    "asset": deployment.harness.usdc,
                    "payTo": deployment.payout,
                    "maxTimeoutSeconds": 60,
                },
                "paymentPayload": {
                    "x402Version": 2,
                    "payload": {"signature": "0x" + "11" * 65, "authorization": authorization},
                },
            },
        )
    after = await _scrape(metrics_url)
    assert reply.status_code == 200, reply.text
    assert reply.json()["settlement"]["errorReason"] == reasons.INVALID_NETWORK
    assert "accepted" not in reply.json()  # the seller's terms are not echoed back to it
    labels = {"network": "other", "outcome": "failed", "reason": reasons.INVALID_NETWORK}
    assert _delta(before, after, "x402mw_settlements_total", **labels) == 1  # not a label per network sent


async def test_facilitator_calls_are_counted_under_the_networks_the_platform_serves(
    deployment: Deployment, metrics_url: str
) -> None:
    harness = deployment.harness
    requirements = {
        "scheme": "exact",
        "network": harness.network,
        "amount": "5000",
        "asset": harness.usdc,
        "payTo": deployment.payout,
        "maxTimeoutSeconds": 120,
        "extra": {"name": "USD Coin", "version": "2"},
    }
    payload = deployment.agent.sign_payment(PaymentRequirements.model_validate(requirements)).to_wire()
    body = {"x402Version": 2, "paymentPayload": payload, "paymentRequirements": requirements}
    chain_id = harness.network.split(":")[1]
    before = await _scrape(metrics_url)
    with deployment.api() as api:
        assert api.post("/x402/verify", json=body).json()["isValid"] is True
        tampered = body | {"paymentRequirements": requirements | {"amount": "1"}}
        assert api.post("/x402/verify", json=tampered).json()["isValid"] is False
        for network in ("eip155:999999", "eip155:31337x", f"eip155:00{chain_id}"):  # made-up spellings
            api.post("/x402/verify", json=body | {"paymentRequirements": requirements | {"network": network}})
        assert api.post("/x402/settle", json=body).json()["success"] is True
        assert api.post("/x402/settle", json=body).json()["success"] is True  # the same receipt again
    after = await _scrape(metrics_url)
    verifications = "x402mw_verifications_total"
    assert _delta(before, after, verifications, network=harness.network, valid="true", reason="") == 1
    value = reasons.INVALID_VALUE
    assert _delta(before, after, verifications, network=harness.network, valid="false", reason=value) == 1
    assert _delta(before, after, verifications, network="other", valid="false", reason=reasons.INVALID_NETWORK) == 3
    settled = {"network": harness.network, "outcome": "settled", "reason": ""}
    assert _delta(before, after, "x402mw_settlements_total", **settled) == 2
    named = {dict(labels).get("network") for _, labels in after}
    assert not named & {"eip155:999999", "eip155:31337x", f"eip155:00{chain_id}"}


def test_a_metrics_port_in_use_is_a_usage_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            main, ["platform", "serve", "--data-dir", str(tmp_path), "--port", "0", "--metrics-port", str(port)]
        )
    assert result.exit_code == 2, result.output
    assert f"cannot serve metrics at 127.0.0.1:{port}" in result.output


def test_the_example_reads_quantiles_from_buckets_as_prometheus_does() -> None:
    buckets = [(0.01, 5.0), (0.1, 10.0), (math.inf, 10.0)]
    assert quantile(0.5, buckets) == pytest.approx(0.01)
    assert quantile(0.75, buckets) == pytest.approx(0.055)
    assert quantile(0.5, [(0.01, 0.0), (math.inf, 4.0)]) == 0.01  # beyond the last finite bound
    assert quantile(0.5, [(math.inf, 0.0)]) is None


def test_the_worker_process_serves_its_metrics_too(tmp_path: Path) -> None:
    port = free_port()
    command = [sys.executable, "-m", "x402mw", "platform", "worker", "--data-dir", str(tmp_path)]
    command += ["--metrics-port", str(port), "--log-format", "json"]
    log = tmp_path / "worker.log"
    with log.open("wb") as handle:
        worker = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    try:
        metrics = eventually(
            lambda: worker.poll() is not None or httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1),
            what=lambda: f"the worker's metrics:\n{log.read_text()}",
        )
        assert worker.poll() is None, log.read_text()
        text = metrics.text
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    names = {family.name for family in text_string_to_metric_families(text)}
    assert {"x402mw_webhook_attempts", "x402mw_settlements", "x402mw_relayer_transactions"} <= names, names
