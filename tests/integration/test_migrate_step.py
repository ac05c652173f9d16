"""Migrations as a step of their own (issue 38): ``x402mw platform migrate [--check]``, and ``serve``
and ``worker`` refusing a PostgreSQL schema that is behind or ahead of this x402mw in one line that
names what to run; the embedded SQLite default migrates itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.harness import postgres_database, serving
from x402mw.platform.db.schema import schema_state


def _x402mw(tmp_path: Path, *args: str, **environment: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("X402MW_") or k == "X402MW_ANVIL"}
    env |= {"X402MW_DATA_DIR": str(tmp_path / "data"), **environment}
    return subprocess.run(
        [sys.executable, "-m", "x402mw", "platform", *args], env=env, capture_output=True, text=True, timeout=120
    )


def _one_line_refusal(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_postgresql_is_migrated_as_a_step_and_refused_until_it_is(tmp_path: Path) -> None:
    with postgres_database() as url:
        head = schema_state(url).head
        check = _x402mw(tmp_path, "migrate", "--check", X402MW_DATABASE_URL=url)
        assert check.returncode == 1, check.stdout + check.stderr
        assert check.stdout.startswith("database is empty; pending migrations: 0001, ") and head in check.stdout
        assert schema_state(url).current is None, "--check changed nothing"
        for command in ("serve", "worker"):
            _one_line_refusal(
                _x402mw(tmp_path, command, X402MW_DATABASE_URL=url), "schema is empty", "run `x402mw platform migrate`"
            )
        assert schema_state(url).current is None, "a refused process migrated nothing"

        done = _x402mw(tmp_path, "migrate", X402MW_DATABASE_URL=url)
        assert done.returncode == 0 and f"migrated to revision {head}" in done.stdout, done.stdout + done.stderr
        again = _x402mw(tmp_path, "migrate", "--check", X402MW_DATABASE_URL=url)
        assert again.returncode == 0 and again.stdout == f"database is up to date (revision {head})\n"

        with psycopg.connect(url, autocommit=True) as conn:  # a newer release migrated it
            conn.execute("UPDATE alembic_version SET version_num = '9999'")
        for command in ("serve", "worker"):
            _one_line_refusal(
                _x402mw(tmp_path, command, X402MW_DATABASE_URL=url, X402MW_MIGRATE="true"),
                "at revision 9999, newer than this x402mw knows",
            )
        _one_line_refusal(_x402mw(tmp_path, "migrate", X402MW_DATABASE_URL=url), "newer than this x402mw knows")


def test_serve_migrates_postgresql_when_told_to(tmp_path: Path) -> None:
    with postgres_database() as url, serving(tmp_path / "data", url) as serve:
        assert serve.process is not None  # the harness ran `platform migrate` first
        assert schema_state(url).up_to_date


def test_the_embedded_sqlite_default_migrates_itself_unless_told_not_to(tmp_path: Path) -> None:
    refused = _x402mw(tmp_path, "worker", X402MW_MIGRATE="false")
    _one_line_refusal(refused, "schema is empty", "x402mw platform migrate")
    with serving(tmp_path / "data") as serve:  # no database configured: SQLite in the data dir, migrated
        assert serve.process is not None
    assert schema_state(f"sqlite:///{tmp_path / 'data' / 'platform.sqlite3'}").up_to_date


@pytest.mark.parametrize("revision", ["0020"])
def test_check_names_only_what_is_pending(tmp_path: Path, revision: str) -> None:
    from x402mw.platform.db.schema import migrate

    url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
    migrate(url, revision)
    state = schema_state(url)
    done = _x402mw(tmp_path, "migrate", "--check", X402MW_DATABASE_URL=url)
    assert done.returncode == 1
    assert done.stdout == f"database is at revision {revision}; pending migrations: {', '.join(state.pending)}\n"
    assert revision not in state.pending and state.head in state.pending
