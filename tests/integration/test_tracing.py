"""Traces over real processes: ``x402mw pay`` (the agent), ``examples/starlette_seller.py`` (the
seller) and ``x402mw platform serve`` (the platform, its dev chain in-process), each exporting by the
standard ``OTEL_*`` variables to an OTLP/HTTP receiver of this test. One paid request is one trace,
from the agent's request to the transaction's receipt, and no span carries a secret. A collector
that is not there costs no request, and says so once."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness import Serve, serving
from tests.otlp_receiver import ReceivedSpan, Receiver, otlp_receiver
from tests.waiting import eventually
from x402mw.evm.keys import address_of, new_private_key
from x402mw.platform.chain.devchain import DEV_CHAIN_ID
from x402mw.platform.server import free_port
from x402mw.tracing import ATTRIBUTES

EXAMPLES = Path(__file__).parents[2] / "examples"
NETWORK = f"eip155:{DEV_CHAIN_ID}"
OTEL = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_EXPORTER_OTLP_TIMEOUT": "3"}
ALLOWED = set(ATTRIBUTES.values())


class Shop:
    """A platform with a merchant, its key, an agent endpoint at 0.01 USDC and a funded agent."""

    def __init__(self, serve: Serve, collector: str) -> None:
        self.serve = serve
        self.collector = collector
        merchant = serve.cli("merchants", "create", "--name", "Traced Co")
        self.key = serve.cli("keys", "create", "--merchant", merchant["id"])["key"]
        self.agent_key = "0x" + new_private_key().hex()
        with httpx.Client(base_url=serve.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=60) as api:
            reply = api.post(
                "/agent/endpoints",
                json={
                    "name": "Weather",
                    "resourceUrl": "http://127.0.0.1/weather",
                    "chainId": DEV_CHAIN_ID,
                    "currency": "USDC",
                    "payoutAddress": address_of(new_private_key()),
                    "pricingMode": "fixed",
                    "amountMinor": "10000",
                },
            )
            assert reply.status_code == 201, reply.text
            self.endpoint = reply.json()["endpoint"]["id"]
            agent = address_of(bytes.fromhex(self.agent_key[2:]))
            funded = api.post(
                "/sandbox/faucet", json={"network": NETWORK, "currency": "USDC", "address": agent, "amount": "1"}
            )
            assert funded.status_code == 200, funded.text

    def env(self, service: str, **more: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("X402MW_", "OTEL_")) or k == "X402MW_ANVIL"}
        return (
            base
            | OTEL
            | {
                "OTEL_SERVICE_NAME": service,
                "OTEL_EXPORTER_OTLP_ENDPOINT": self.collector,
                "X402MW_PLATFORM_URL": self.serve.url,
                "X402MW_API_KEY": self.key,
            }
            | more
        )


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Shop, Receiver]]:
    base = tmp_path_factory.mktemp("tracing")
    with otlp_receiver() as (collector, receiver):
        environment = OTEL | {"OTEL_SERVICE_NAME": "platform", "OTEL_EXPORTER_OTLP_ENDPOINT": collector}
        with serving(base / "data", **environment) as serve:
            yield Shop(serve, collector), receiver


@contextlib.contextmanager
def _seller(shop: Shop) -> Iterator[str]:
    port = free_port()
    env = shop.env("seller", X402MW_ENDPOINT_ID=shop.endpoint, PORT=str(port))
    with subprocess.Popen(
        [sys.executable, str(EXAMPLES / "starlette_seller.py")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    ) as process:
        try:
            url = f"http://127.0.0.1:{port}"
            eventually(lambda: process.poll() is not None or httpx.get(url + "/health", timeout=2), what="the seller")
            assert process.poll() is None, process.stdout.read().decode() if process.stdout else ""
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)


def _pay(env: dict[str, str], url: str) -> tuple[dict[str, object], str]:
    done = subprocess.run(
        [sys.executable, "-m", "x402mw", "pay", url, "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout), done.stderr


def _chain(spans: list[ReceivedSpan], leaf: ReceivedSpan) -> list[str]:
    """The names from ``leaf`` up to the trace's root, through the parents received."""
    by_id = {span.span_id: span for span in spans}
    names, span = [], leaf
    while span is not None:
        names.append(span.name)
        span = by_id.get(span.parent_id)
    return names


def test_one_paid_request_is_one_trace_over_three_processes(traced: tuple[Shop, Receiver]) -> None:
    shop, receiver = traced
    with _seller(shop) as seller:
        paid, _ = _pay(shop.env("agent", X402MW_PRIVATE_KEY=shop.agent_key), seller + "/weather")
    assert paid["status"] == 200, paid
    payment = paid["payment"]
    assert isinstance(payment, dict)
    transaction = payment["transaction"]

    def the_trace() -> list[ReceivedSpan]:
        roots = [s for s in receiver.spans if s.name == "x402 pay" and s.attributes.get("x402.transaction.hash")]
        assert roots, "the agent's span"
        spans = receiver.of_trace(roots[-1].trace_id)
        assert {"relayer receipt", "x402 settle", "x402 settlement"} <= {s.name for s in spans}
        return spans

    spans = eventually(the_trace, what=lambda: f"one trace of the paid request, among {receiver.spans}")
    assert len(spans) >= 6, spans
    assert {s.service for s in spans} >= {"agent", "seller", "platform"}
    names = {s.name for s in spans}
    assert {"x402 pay", "x402 settle", "POST /v1/agent/settlements", "x402 settlement", "relayer send"} <= names

    # the receipt's span descends from the agent's request, through each process
    receipt = next(s for s in spans if s.name == "relayer receipt")
    assert receipt.attributes["x402.transaction.hash"] == transaction
    assert _chain(spans, receipt) == [
        "relayer receipt",
        "x402 settlement",
        "POST /v1/agent/settlements",
        "x402 settle",
        "x402 pay",
    ]
    settlement = next(s for s in spans if s.name == "x402 settlement")
    assert settlement.attributes["x402.scheme"] == "exact"
    assert settlement.attributes["x402.network"] == NETWORK
    assert settlement.attributes["x402.amount"] == "10000"
    assert settlement.attributes["x402.transaction.hash"] == transaction
    assert settlement.attributes["x402.payment.id"]
    settle = next(s for s in spans if s.name == "x402 settle")
    assert settle.attributes["x402.payment.id"] == settlement.attributes["x402.payment.id"]
    assert settle.attributes["x402.challenge.id"] == settlement.attributes["x402.challenge.id"]

    # nothing secret: only the attributes allowed, and neither key nor signature anywhere
    secrets = [shop.agent_key[2:].lower(), shop.key]
    for span in receiver.spans:
        for name, value in span.attributes.items():
            assert name in ALLOWED, (span.name, name)
            text = str(value).lower()
            assert not any(secret.lower() in text for secret in secrets), (span.name, name)
            assert not re.fullmatch(r"(0x)?[0-9a-f]{130}", text), (span.name, name)  # a 65-byte signature


def test_a_collector_that_is_not_there_costs_no_request_and_is_told_once(traced: tuple[Shop, Receiver]) -> None:
    shop, _ = traced
    nowhere = f"http://127.0.0.1:{free_port()}"
    with _seller(shop) as seller:
        env = shop.env("agent", X402MW_PRIVATE_KEY=shop.agent_key, OTEL_EXPORTER_OTLP_ENDPOINT=nowhere)
        paid, said = _pay(env, seller + "/weather")
    assert paid["status"] == 200, paid
    assert said.count("traces could not be exported") == 1, said
    assert nowhere in said


def test_tracing_is_off_without_the_variables(traced: tuple[Shop, Receiver]) -> None:
    shop, receiver = traced
    env = {k: v for k, v in shop.env("agent", X402MW_PRIVATE_KEY=shop.agent_key).items() if not k.startswith("OTEL_")}
    before = len([s for s in receiver.spans if s.service == "agent"])
    with _seller(shop) as seller:
        paid, said = _pay(env, seller + "/weather")
    assert paid["status"] == 200, paid
    assert "trace" not in said
    # the platform and the seller go on tracing; the agent sent none, and its request no traceparent
    assert len([s for s in receiver.spans if s.service == "agent"]) == before
