"""relayer pool: accounts per chain, leased by the processes that send from them

Revision ID: 0016
Revises: 0010
Create Date: 2026-11-26 02:10:00.000000
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = '0016'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('relayer_pools',
    sa.Column('chain_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('chain_id')
    )
    op.create_table('relayer_accounts',
    sa.Column('chain_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('slot', sa.Integer(), nullable=False),
    sa.Column('address', sqlmodel.sql.sqltypes.AutoString(length=42), nullable=False),
    sa.Column('holder', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=True),
    sa.Column('locked_until', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('chain_id', 'slot')
    )
    op.create_table('relayer_holders',
    sa.Column('chain_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('holder', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('seen_until', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('chain_id', 'holder')
    )


def downgrade() -> None:
    op.drop_table('relayer_holders')
    op.drop_table('relayer_accounts')
    op.drop_table('relayer_pools')
