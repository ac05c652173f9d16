"""payment intent description: what is bought, shown to the buyer at checkout

Revision ID: 0017
Revises: 0010
Create Date: 2026-11-26 02:20:00.000000
"""

from alembic import op
import sqlalchemy as sa


revision = '0017'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('payment_intents', schema=None) as batch_op:
        batch_op.add_column(sa.Column('description', sa.String(length=1000), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('payment_intents', schema=None) as batch_op:
        batch_op.drop_column('description')
