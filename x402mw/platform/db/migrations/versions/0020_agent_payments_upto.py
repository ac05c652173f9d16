"""agent payments of the upto scheme: the scheme, the signed ceiling, the Permit2 details

Revision ID: 0020
Revises: 0015
Create Date: 2026-11-26 02:30:00.000000
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_payments", schema=None) as batch_op:
        batch_op.add_column(
sa.Column("scheme", sa.String(length=16), nullable=False, server_default="exact")
        )
        batch_op.add_column(sa.Column("ceiling_minor", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("permit", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_payments", schema=None) as batch_op:
        batch_op.drop_column("permit")
        batch_op.drop_column("ceiling_minor")
        batch_op.drop_column("scheme")
