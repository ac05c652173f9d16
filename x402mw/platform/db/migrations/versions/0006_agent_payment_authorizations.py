"""agent payments keep their signed authorization and a takeover lease

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 10:40:00.000000
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_payments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("signature", sqlmodel.sql.sqltypes.AutoString(length=132), nullable=True))
        batch_op.add_column(sa.Column("valid_after", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("valid_before", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_payments", schema=None) as batch_op:
        batch_op.drop_column("locked_until")
        batch_op.drop_column("valid_before")
        batch_op.drop_column("valid_after")
        batch_op.drop_column("signature")
