"""discovery popularity: how much each catalogued resource is settled for lately, for search ranking

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-26 05:20:00.000000
"""

from alembic import op
import sqlalchemy as sa


revision = '0023'
down_revision = '0022'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('discovery_resources', schema=None) as batch_op:
        batch_op.add_column(sa.Column('popularity', sa.Float(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('discovery_resources', schema=None) as batch_op:
        batch_op.drop_column('popularity')
