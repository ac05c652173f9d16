"""``x402mw platform users create``: the dashboard's first owner, from the command line, on SQLite
and PostgreSQL."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.harness import postgres_database
from x402mw.cli import main


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> object:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    else:
        with postgres_database() as url:
            yield url


def test_users_create(database_url: str) -> None:
    runner = CliRunner()
    env = {"X402MW_DATABASE_URL": database_url}
    made = runner.invoke(main, ["platform", "merchants", "create", "--name", "Shop", "--json"], env=env)
    assert made.exit_code == 0, made.output
    merchant_id = json.loads(made.output)["id"]
    email = f"owner-{uuid.uuid4().hex[:6]}@shop.test"
    args = ["platform", "users", "create", "--merchant", merchant_id, "--email", email, "--json"]
    created = runner.invoke(main, [*args, "--password-stdin"], input="correct horse battery\n", env=env)
    assert created.exit_code == 0, created.output
    user = json.loads(created.output)
    assert user["email"] == email and user["role"] == "owner" and user["merchant"] == merchant_id
    again = runner.invoke(main, args, env={**env, "X402MW_USER_PASSWORD": "another long password"})
    assert again.exit_code == 1 and "exists" in again.output
    short = runner.invoke(main, [*args[:-1], "--email", "b@shop.test"], input="short\nshort\n", env=env)
    assert short.exit_code == 1 and "at least 10 characters" in short.output
    unknown = runner.invoke(
        main,
        ["platform", "users", "create", "--merchant", str(uuid.uuid4()), "--email", "c@shop.test"],
        env={**env, "X402MW_USER_PASSWORD": "a long enough password"},
    )
    assert unknown.exit_code == 1 and "no merchant" in unknown.output
