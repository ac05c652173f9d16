"""api keys remember when they were last used (to the minute), for `x402mw platform keys list`

Revision ID: 0015
Revises: 0018
Create Date: 2026-11-26 02:10:00.000000
"""

from alembic import op
import sqlalchemy as sa


revision = '0015'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.add_column(sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_column('last_used_at')
