"""The schema: Alembic migrations (the only way the schema is made) and where a database stands
against them (`schema_state`), for `x402mw platform migrate` and the refusal of `serve` and `worker`
to run on an unmigrated or newer schema."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from x402mw.platform.db.engine import CONNECT_TIMEOUT, sync_url

MIGRATIONS = Path(__file__).parent / "migrations"


def migrate(url: str, revision: str = "head") -> None:
    """Bring the schema at ``url`` to ``revision`` with Alembic (the only way the schema is made)."""
    parsed = make_url(sync_url(url))
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed)
    try:
        with engine.begin() as connection:
            config = _alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()


@dataclass(frozen=True, slots=True)
class SchemaState:
    """Where a database's schema stands against the migrations this x402mw knows (`schema_state`)."""

    current: str | None  # the database's revision; None: no schema at all
    head: str  # the newest revision this x402mw knows
    pending: tuple[str, ...]  # the revisions `migrate` would apply, oldest first
    unknown: bool  # the database is at a revision this x402mw does not know (a newer release migrated it)

    @property
    def up_to_date(self) -> bool:
        return not self.pending and not self.unknown

    def refusal(self) -> str | None:
        """One line saying why a process must not run on this schema, naming the command to run; None
        when it may."""
        if self.unknown:
            return (
                f"the database schema is at revision {self.current}, newer than this x402mw knows (up to {self.head}): "
                "run a release of x402mw that knows it, or restore the database from before that upgrade"
            )
        if self.pending:
            where = "empty" if self.current is None else f"at revision {self.current}"
            return (
                f"the database schema is {where}, {len(self.pending)} migration(s) behind this x402mw "
                f"(up to {self.head}): run `x402mw platform migrate` first"
            )
        return None


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def schema_state(url: str) -> SchemaState:
    """Read the revision of the schema at ``url`` (without changing anything) and compare it with the
    migrations this x402mw knows. Raises what the driver raises when the database cannot be reached."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(_alembic_config())
    head = scripts.get_current_head()
    assert head is not None, "the migrations have one head"
    parsed = make_url(sync_url(url))
    on_file = parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:"
    if on_file and not Path(str(parsed.database)).exists():  # reading must not create the file
        pending = tuple(s.revision for s in reversed(list(scripts.walk_revisions("base", head))))
        return SchemaState(None, head, pending, unknown=False)
    timeout = {"connect_timeout": int(CONNECT_TIMEOUT)} if parsed.get_backend_name() == "postgresql" else {}
    engine = create_engine(parsed, connect_args=timeout)
    try:
        with engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
    ancestry = [s.revision for s in reversed(list(scripts.walk_revisions("base", head)))]
    if current is not None and current not in ancestry:
        return SchemaState(current, head, (), unknown=True)
    applied = set() if current is None else {s.revision for s in scripts.walk_revisions("base", current)}
    return SchemaState(current, head, tuple(r for r in ancestry if r not in applied), unknown=False)


@functools.cache
def known_head() -> str:
    """The newest schema revision this x402mw knows."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None, "the migrations have one head"
    return head
