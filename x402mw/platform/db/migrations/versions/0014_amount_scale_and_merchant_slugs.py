"""amounts keep their scale beyond orders and links; slugs are unique per merchant

Plans, invoices and refunds get ``amount_text`` beside ``amount_minor`` (as payment orders and links
have it): the amount as it was sent, answered with its scale. Plan and payment-link slugs were one
namespace across merchants; they are unique per (merchant, slug) now, with an index on the slug for
the old merchant-less links.

Revision ID: 0014
Revises: 0021
Create Date: 2026-11-26 02:10:00.000000
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = '0014'
down_revision = '0021'
branch_labels = None
depends_on = None

# SQLite reflects the old unnamed unique constraints without a name: batch mode names them by this.
_NAMES = {"uq": "uq_%(table_name)s_%(column_0_name)s"}
_SLUGGED = ("payment_links", "subscription_plans")


def _text() -> sa.Column:
    return sa.Column('amount_text', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True)


def upgrade() -> None:
    for table in ("subscription_plans", "subscription_invoices", "refunds"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(_text())
    postgresql = op.get_bind().dialect.name == "postgresql"
    for table in _SLUGGED:
        with op.batch_alter_table(table, schema=None, naming_convention=_NAMES) as batch_op:
            batch_op.drop_constraint(f"{table}_slug_key" if postgresql else f"uq_{table}_slug", type_="unique")
            batch_op.create_unique_constraint(f"uq_{table}_merchant_slug", ["merchant_id", "slug"])
            batch_op.create_index(f"ix_{table}_slug", ["slug"], unique=False)


def downgrade() -> None:
    for table in _SLUGGED:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(f"ix_{table}_slug")
            batch_op.drop_constraint(f"uq_{table}_merchant_slug", type_="unique")
            batch_op.create_unique_constraint(f"{table}_slug_key", ["slug"])
    for table in ("refunds", "subscription_invoices", "subscription_plans"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('amount_text')
