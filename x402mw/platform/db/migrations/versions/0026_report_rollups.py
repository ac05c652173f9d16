"""report rollups (branch h/reports): the reports' figures summed per merchant, mode, metric, UTC
hour, coin and dimension, kept up to date in the transactions of the writes that change them

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29 05:30:00.000000
"""

from alembic import op
import sqlalchemy as sa


revision = '0026'
down_revision = '0025'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'report_rollups',
        sa.Column('merchant_id', sa.String(length=36), nullable=False),
        sa.Column('livemode', sa.Boolean(), nullable=False),
        sa.Column('metric', sa.String(length=24), nullable=False),
        sa.Column('hour', sa.DateTime(timezone=True), nullable=False),
        sa.Column('currency', sa.String(length=8), nullable=False),
        sa.Column('dimension', sa.String(length=64), nullable=False),
        sa.Column('amount_minor', sa.BigInteger(), nullable=False),
        sa.Column('count', sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(['merchant_id'], ['merchants.id']),
        sa.PrimaryKeyConstraint('merchant_id', 'livemode', 'metric', 'hour', 'currency', 'dimension'),
    )


def downgrade() -> None:
    op.drop_table('report_rollups')
