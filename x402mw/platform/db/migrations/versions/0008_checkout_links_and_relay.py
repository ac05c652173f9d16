"""checkout completed: payment links, amounts as sent, the order's relayed authorization

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28 09:00:00.000000
"""

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "payment_links",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=36), nullable=False),
        sa.Column("merchant_id", sqlmodel.sql.sqltypes.AutoString(length=36), nullable=False),
        sa.Column("livemode", sa.Boolean(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("slug", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("amount_text", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("currency", sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False),
        sa.Column("accepted_currencies", sa.JSON(), nullable=False),
        sa.Column("payment_methods", sa.JSON(), nullable=False),
        sa.Column("success_url", sqlmodel.sql.sqltypes.AutoString(length=2048), nullable=True),
        sa.Column("cancel_url", sqlmodel.sql.sqltypes.AutoString(length=2048), nullable=True),
        sa.Column("link_metadata", sa.JSON(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["merchant_id"], ["merchants.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("slug"),
    )
    op.create_index("ix_payment_links_merchant_created", "payment_links", ["merchant_id", "created_at"], unique=False)
    with op.batch_alter_table("payment_intents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("amount_text", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True))
        batch_op.add_column(sa.Column("payment_link_id", sqlmodel.sql.sqltypes.AutoString(length=36), nullable=True))
        batch_op.add_column(sa.Column("relay_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
        batch_op.add_column(sa.Column("relay_claimed_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index("ix_payment_intents_payment_link_id", ["payment_link_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("payment_intents", schema=None) as batch_op:
        batch_op.drop_index("ix_payment_intents_payment_link_id")
        batch_op.drop_column("relay_claimed_at")
        batch_op.drop_column("relay_hash")
        batch_op.drop_column("payment_link_id")
        batch_op.drop_column("amount_text")
    op.drop_index("ix_payment_links_merchant_created", table_name="payment_links")
    op.drop_table("payment_links")
