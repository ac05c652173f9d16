"""``tests/pg_cluster.py`` tells a PostgreSQL that answers from none at all, and says how to get one."""

from __future__ import annotations

import pytest

from tests.harness import POSTGRES_URL
from tests.pg_cluster import Probe, probe, run
from x402mw.platform.server import free_port


def test_the_suites_server_answers() -> None:
    assert probe(POSTGRES_URL) == (Probe.ANSWERS, "")


def test_nothing_listening_is_absent() -> None:
    found, error = probe(f"postgresql://postgres@127.0.0.1:{free_port()}/postgres", timeout=2)
    assert found is Probe.ABSENT
    assert error


def test_without_a_server_or_binaries_it_says_how_to_provide_one(capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    assert run(["false"], dead, path="", roots=()) == 2
    message = capsys.readouterr().err
    assert "X402MW_TEST_POSTGRES_URL=" in message
    assert "initdb" in message
