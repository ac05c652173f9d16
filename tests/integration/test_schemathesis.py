"""Schemathesis against the OpenAPI document a running platform serves: every operation, with an API
key, through all of its phases (the document's examples, boundary values of every constraint,
generated requests, and sequences of calls that follow the document's links), checked for:

- no 5xx (``not_a_server_error``);
- answers as documented: status codes, content type, headers and body schemas;
- no schema-valid request refused (``positive_data_acceptance``): only a 2xx, a 404 for an id that
  does not exist, or a 409 for a request the object's current state does not allow;
- a method the document does not list for a path is a 405, and ``OPTIONS`` names exactly the
  documented methods (besides ``HEAD`` and ``OPTIONS``) in ``Allow``; a request without the key is a
  401; a deleted object is gone.

Requests that the document calls invalid are not checked to be refused here: an EVM address in
mixed case is accepted when its EIP-55 checksum is right, which no pattern can say (the handlers'
own tests check their refusals). The run is seeded and derandomized, so a failure repeats, and
bounded in examples per operation. ``tests/schemathesis_hooks.py`` holds the two hooks, each for a
rule the document states in words (idempotency keys are not reused across requests; an order's
``expiresAt`` lies in the future).

The platform is one of its own (no background worker: the webhook endpoints the run registers get
no deliveries), on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import PlatformHarness, postgres_database, start_dev_platform

ROOT = Path(__file__).resolve().parents[2]
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
EXAMPLES = 25  # per operation and phase
CONFIG = """
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "404", "409"]
"""


@pytest.fixture(scope="module")
def own_platform(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformHarness]:
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(postgres_database()) if database == "postgresql" else None
        workdir = tmp_path_factory.mktemp(f"schemathesis-{database}")
        yield stack.enter_context(start_dev_platform(workdir, database_url=url, run_worker=False))


def test_the_api_keeps_to_its_openapi_document(own_platform: PlatformHarness, tmp_path: Path) -> None:
    _, key, _ = own_platform.merchant("Schemathesis")
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG, encoding="utf-8")
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
        f"Authorization: Bearer {key}",
        "--checks",
        "all",
        "--exclude-checks",
        "negative_data_rejection,object_level_authorization",
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        "402",
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",
        "60",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    environment = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks", "PYTHONPATH": str(ROOT)}
    # run from tmp_path: schemathesis keeps a cache of what it found in its working directory
    run = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-20000:]
    assert "39 selected / 39 total" in output, output[-5000:]  # every operation of the document ran
    print(output[output.find("Test Phases:") :])  # what ran, and how many cases (pytest -rP shows it)
