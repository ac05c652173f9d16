"""embedded chains

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27 10:12:03.118204
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('embedded_chains',
    sa.Column('chain_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('genesis_hash', sqlmodel.sql.sqltypes.AutoString(length=66), nullable=False),
    sa.Column('tokens', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('chain_id')
    )


def downgrade() -> None:
    op.drop_table('embedded_chains')
