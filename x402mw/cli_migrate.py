"""``x402mw platform migrate [--check]``: the schema brought up to date as a step of its own."""

from __future__ import annotations

import sys

import click

from x402mw.platform.db.schema import migrate, schema_state


def migrate_or_check(database_url: str, *, check: bool) -> None:
    """Migrate the database at ``database_url``, or (``check``) say what migrating would apply and exit
    1 when it would apply anything. A schema newer than this x402mw knows is refused either way."""
    state = schema_state(database_url)
    if state.unknown:
        raise click.ClickException(state.refusal() or "")
    if check:
        if not state.pending:
            click.echo(f"database is up to date (revision {state.head})")
            return
        where = "empty" if state.current is None else f"at revision {state.current}"
        click.echo(f"database is {where}; pending migrations: {', '.join(state.pending)}")
        sys.exit(1)
    if state.pending:
        migrate(database_url)
        click.echo(f"database migrated to revision {state.head} ({len(state.pending)} migration(s) applied)")
    else:
        click.echo(f"database is up to date (revision {state.head})")
