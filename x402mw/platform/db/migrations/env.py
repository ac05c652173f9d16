"""Alembic environment: runs on the connection handed over by `x402mw.platform.db.schema.migrate`."""

from alembic import context
from sqlmodel import SQLModel

import x402mw.platform.db.models  # noqa: F401  (registers the tables)

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=SQLModel.metadata, render_as_batch=True, compare_type=True)
with context.begin_transaction():
    context.run_migrations()
