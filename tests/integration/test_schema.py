"""Alembic migrations are the only way the schema is made: they must agree with the models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine
from sqlmodel import SQLModel

import x402mw.platform.db.models  # noqa: F401
from tests.harness import postgres_database
from x402mw.platform.db.engine import sync_url
from x402mw.platform.db.schema import migrate


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'schema.sqlite3'}"
    else:
        with postgres_database() as url:
            yield url


def test_migrations_match_the_models(database_url: str) -> None:
    migrate(database_url)
    engine = create_engine(sync_url(database_url))
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            differences = compare_metadata(context, SQLModel.metadata)
    finally:
        engine.dispose()
    assert differences == []


def test_migrating_twice_is_harmless(database_url: str) -> None:
    migrate(database_url)
    migrate(database_url)
