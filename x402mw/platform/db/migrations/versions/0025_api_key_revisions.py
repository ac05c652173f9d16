"""api key revisions: one row whose number every change of a key's standing (a revocation) bumps in
its transaction, so that a process caching key lookups on SQLite sees the change at once

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29 02:00:00.000000
"""

from alembic import op
import sqlalchemy as sa


revision = '0025'
down_revision = '0024'
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        'api_key_revisions',
        sa.Column('id', sa.Integer(), autoincrement=False, nullable=False),
        sa.Column('revision', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    op.bulk_insert(table, [{'id': 1, 'revision': 0}])


def downgrade() -> None:
    op.drop_table('api_key_revisions')
