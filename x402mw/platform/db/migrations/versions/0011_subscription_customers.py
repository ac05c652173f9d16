"""a subscription's customer is theirs alone: who chose its customer id, used form tokens, and
invoice orders without the customer page as their public successUrl

Revision ID: 0011
Revises: 0017
Create Date: 2026-11-26 02:10:00.000000
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = '0011'
down_revision = '0017'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('subscriptions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('customer_vouched', sa.Boolean(), server_default=sa.true(), nullable=False))
    op.create_table(
        'form_token_uses',
        sa.Column('token_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('used_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('token_hash'),
    )
    op.create_index(op.f('ix_form_token_uses_used_at'), 'form_token_uses', ['used_at'], unique=False)
    # The customer page link was every invoice order's successUrl, public to whoever held the order's id.
    op.execute(
        "UPDATE payment_intents SET success_url = NULL "
        "WHERE id IN (SELECT payment_intent_id FROM subscription_invoices)"
    )


def downgrade() -> None:
    op.drop_index(op.f('ix_form_token_uses_used_at'), table_name='form_token_uses')
    op.drop_table('form_token_uses')
    with op.batch_alter_table('subscriptions', schema=None) as batch_op:
        batch_op.drop_column('customer_vouched')
