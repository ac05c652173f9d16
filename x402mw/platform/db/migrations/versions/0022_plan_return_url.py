"""plan return url: where a plan's customers return to the shop (invoice checkout, customer page)

Revision ID: 0022
Revises: 0014
Create Date: 2026-11-26 03:30:00.000000
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = '0022'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('subscription_plans', schema=None) as batch_op:
        batch_op.add_column(sa.Column('return_url', sqlmodel.sql.sqltypes.AutoString(length=2048), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('subscription_plans', schema=None) as batch_op:
        batch_op.drop_column('return_url')
