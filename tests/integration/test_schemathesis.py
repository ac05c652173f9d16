"""Schemathesis against the OpenAPI document a running platform serves: every operation (but the
document's own GET), with an API key, through all of its phases (boundary values of every
constraint, generated requests, and sequences of calls that follow the document's links), checked
for:

- no 5xx (``not_a_server_error``);
- answers as documented: status codes, content type, headers and body schemas;
- no schema-valid request refused (``positive_data_acceptance``): only a 2xx, a 404 for an id that
  does not exist, or a 409 for a request the object's current state does not allow;
- a method the document does not list for a path is a 405, and ``OPTIONS`` names exactly the
  documented methods (besides ``HEAD`` and ``OPTIONS``) in ``Allow``; a request without the key is a
  401; a deleted object is gone.

Requests that the document calls invalid are not checked to be refused here: an EVM address in
mixed case is accepted when its EIP-55 checksum is right, which no pattern can say (the handlers'
own tests check their refusals). Half of the ids in paths are the merchant's real objects (orders,
a paid one and a refunded one, a refund, an agent endpoint, a webhook endpoint, a challenge, events, a subscription
plan, a subscription and its test clock)
so that operations get past the 404 to their logic; the operations that wait on the chain get
generated ids only. The run is derandomized, so a failure repeats, and bounded in examples per
operation. ``tests/schemathesis_hooks.py`` holds the hooks, each for a rule the document states
in words (idempotency keys are not reused across requests; an order's ``expiresAt`` lies in the
future; orders, links and plans are in coins a chain of the platform carries).

The platform is one of its own (no background worker: the webhook endpoints the run registers get
no deliveries), on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness import Deployment, PlatformHarness, platform_server, postgres_database
from x402mw.platform.openapi.document import build_document
from x402mw.platform.settings import PlatformSettings

ROOT = Path(__file__).resolve().parents[2]
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
EXAMPLES = 15  # per operation and phase
SEEDED = 0.5  # how often a path id is one of the merchant's real objects rather than a generated one
_ON_CHAIN = {"syncCheckoutTransaction", "checkCheckoutTransferStatus", "sandboxSimulatePayment"}


@pytest.fixture(scope="module")
def own_platform(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformHarness]:
    """A dev-chain platform of the run's own, without the background worker, and with a small pool:
    schemathesis sends one request at a time, and PostgreSQL's connections are shared by the suite."""
    with contextlib.ExitStack() as stack:
        workdir = tmp_path_factory.mktemp(f"schemathesis-{database}")
        url = stack.enter_context(postgres_database()) if database == "postgresql" else None
        settings = PlatformSettings(
            database_url=url or f"sqlite:///{workdir / 'platform.sqlite3'}",
            data_dir=workdir,
            run_worker=False,
            database_pool_size=4,
        )
        yield PlatformHarness(stack.enter_context(platform_server(settings)))


def _objects(deployment: Deployment) -> dict[str, list[str]]:
    """The merchant's real objects of each kind, made through the API: the run's path ids are drawn
    from these half of the time, so that operations on an id get past the 404 to their logic."""
    with deployment.api() as api:
        orders = [
            _ok(api.post("/payment-intents", json={"orderId": f"st-{n}", "amount": "2.5", "currency": "USDC"}))[
                "paymentIntent"
            ]["id"]
            for n in range(3)
        ]
        for paid in orders[1:]:
            _ok(api.post(f"/sandbox/payment-intents/{paid}/simulate-payment", json={}))
        refund = _ok(api.post(f"/payment-intents/{orders[2]}/refunds", json={}))["refund"]["id"]
        hook = _ok(api.post("/webhook-endpoints", json={"url": "https://example.com/hook", "enabledEvents": ["*"]}))
        challenge = {
            "challengeId": "ch_schemathesis",
            "endpointId": deployment.endpoint_id,
            "network": deployment.harness.network,
            "asset": deployment.harness.usdc,
            "payTo": deployment.payout,
            "amount": "10000",
            "expiresAt": 4102444800,
        }
        _ok(api.post("/agent/challenges/batch", json={"challenges": [challenge]}))
        events = [event["id"] for event in _ok(api.get("/events", params={"limit": 5}))["data"]]
        plan = _ok(
            api.post(
                "/subscription-plans", json={"name": "Pro", "amount": "9.99", "currency": "USDC", "interval": "monthly"}
            )
        )
        clock = _ok(api.post("/test-clocks", json={"frozenTime": "2026-01-31T10:00:00Z"}))["testClock"]["id"]
        opened = {"planId": plan["plan"]["id"], "merchantCustomerId": "cus_schemathesis", "testClock": clock}
        subscription = _ok(api.post("/subscriptions", json=opened))["subscription"]["id"]
    return {
        "orders": orders,
        "refunds": [refund],
        "endpoints": [deployment.endpoint_id],
        "hooks": [hook["webhookEndpoint"]["id"]],
        "challenges": [challenge["challengeId"]],
        "events": events,
        "plans": [plan["plan"]["id"]],
        "subscriptions": [subscription],
        "clocks": [clock],
    }


def _ok(reply: httpx.Response) -> Any:
    assert reply.is_success, reply.text
    return reply.json()


def _config(objects: dict[str, list[str]]) -> str:
    """schemathesis.toml: what a refusal of valid data may be, and where path ids come from."""
    # 402: an order's x402Url answers its price; 429: the public checkout endpoints' rate limits
    lines = ["[checks.positive_data_acceptance]", 'expected-statuses = ["2xx", "402", "404", "409", "429"]', ""]
    for name, values in objects.items():
        lines += [f"[dictionaries.{name}]", f"values = {json.dumps(values)}", ""]
    # Every operation taking one of these ids draws it from the real ones, but for those that wait on the
    # chain (sync waits up to 10 s for the generated transaction of a real order to be mined).
    for parameter, name in [
        ("payment_id", "orders"),
        ("refund_id", "refunds"),
        ("endpoint_id", "endpoints"),
        ("webhook_endpoint_id", "hooks"),
        ("challenge_id", "challenges"),
        ("event_id", "events"),
        ("plan_id", "plans"),
        ("subscription_id", "subscriptions"),
        ("test_clock_id", "clocks"),
    ]:
        binding = f'{{ dictionary = "{name}", probability = {SEEDED} }}'
        lines += ["[[operations]]", f"exclude-operation-id = {json.dumps(sorted(_ON_CHAIN))}"]
        lines += [f'parameters = {{ "path.{parameter}" = {binding} }}', ""]
    return "\n".join(lines)


@pytest.mark.timeout(600)  # every operation, one request at a time: about 5 minutes on PostgreSQL, as its run allows
def test_the_api_keeps_to_its_openapi_document(own_platform: PlatformHarness, tmp_path: Path) -> None:
    deployment = own_platform.deploy()
    config = tmp_path / "schemathesis.toml"
    config.write_text(_config(_objects(deployment)), encoding="utf-8")
    # every operation but GET /v1/openapi.json, which schemathesis leaves out as the schema's own
    # (test_openapi checks what it serves)
    operations = sum(len(item) for item in build_document()["paths"].values()) - 1
    command = [
        str(SCHEMATHESIS),
        "--config-file",
        str(config),
        "--no-color",
        "run",
        own_platform.url + "/openapi.json",
        "--url",
        own_platform.url.removesuffix("/v1"),
        "--header",
        f"Authorization: Bearer {deployment.api_key}",
        "--checks",
        "all",
        "--exclude-checks",
        "negative_data_rejection,object_level_authorization",
        "--max-examples",
        str(EXAMPLES),
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",
        "60",
        # sync waits up to 10 s for the buyer's transaction by design (it answers within ~10.1 s); an
        # id /prepare answered reaches it through an inferred link
        "--max-response-time",
        "30",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    environment = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks", "PYTHONPATH": str(ROOT)}
    # run from tmp_path: schemathesis keeps a cache of what it found in its working directory
    run = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-20000:]
    assert f"{operations} selected / {operations} total" in output, output[-5000:]
    # what ran, for how long, and how many cases (pytest -rP shows it)
    print("\n".join(line for line in output.splitlines() if re.search(r"\((in [0-9.]+s)\)|generated|Scenarios", line)))
