"""Database: SQLModel tables, async engines, Alembic migrations (the only way the schema is made)."""
