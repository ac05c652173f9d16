"""payment channels (batch-settlement, issue 35): the channel offer of agent endpoints, the merchants'
receiver authorizers, the per-channel state, deposits and the worker's claim, settle and refund
transactions

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-29 08:40:00.000000
"""

from alembic import op
import sqlalchemy as sa



revision = '0027'
down_revision = '0026'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('agent_endpoints', schema=None) as batch_op:
        batch_op.add_column(sa.Column('channel_min_deposit', sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column('channel_withdraw_delay', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('channel_only', sa.Boolean(), nullable=False, server_default=sa.false()))
        batch_op.add_column(sa.Column('channel_idle_refund_seconds', sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column('channel_receiver_authorizer', sa.String(length=42), nullable=True))
    op.create_table(
        'channel_authorizers',
        sa.Column('merchant_id', sa.String(length=36), nullable=False),
        sa.Column('livemode', sa.Boolean(), nullable=False),
        sa.Column('address', sa.String(length=42), nullable=False),
        sa.Column('sealed_key', sa.String(length=400), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['merchant_id'], ['merchants.id']),
        sa.PrimaryKeyConstraint('merchant_id', 'livemode'),
    )
    big = sa.BigInteger
    op.create_table(
        'payment_channels',
        sa.Column('id', sa.String(length=66), nullable=False),
        sa.Column('merchant_id', sa.String(length=36), nullable=False),
        sa.Column('livemode', sa.Boolean(), nullable=False),
        sa.Column('endpoint_id', sa.String(length=36), nullable=False),
        sa.Column('chain_id', big(), nullable=False),
        sa.Column('token', sa.String(length=42), nullable=False),
        sa.Column('currency', sa.String(length=8), nullable=False),
        sa.Column('payer', sa.String(length=42), nullable=False),
        sa.Column('payer_authorizer', sa.String(length=42), nullable=False),
        sa.Column('receiver', sa.String(length=42), nullable=False),
        sa.Column('receiver_authorizer', sa.String(length=42), nullable=False),
        sa.Column('withdraw_delay', sa.Integer(), nullable=False),
        sa.Column('salt', sa.String(length=66), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('charged', big(), nullable=False),
        sa.Column('signed_max', big(), nullable=False),
        sa.Column('signature', sa.String(length=4200), nullable=False),
        sa.Column('deposited', big(), nullable=False),
        sa.Column('claimed', big(), nullable=False),
        sa.Column('settled', big(), nullable=False),
        sa.Column('refunded', big(), nullable=False),
        sa.Column('balance', big(), nullable=False),
        sa.Column('total_claimed', big(), nullable=False),
        sa.Column('withdraw_amount', big(), nullable=False),
        sa.Column('withdraw_requested_at', big(), nullable=False),
        sa.Column('refund_nonce', big(), nullable=False),
        sa.Column('synced_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('hold_id', sa.String(length=36), nullable=True),
        sa.Column('hold_until', sa.DateTime(timezone=True), nullable=True),
        sa.Column('hold_max', big(), nullable=True),
        sa.Column('hold_price', big(), nullable=True),
        sa.Column('hold_signature', sa.String(length=4200), nullable=True),
        sa.Column('hold_deposit', sa.String(length=66), nullable=True),
        sa.Column('last_hold_id', sa.String(length=36), nullable=True),
        sa.Column('last_charge', big(), nullable=False),
        sa.Column('refund_asked', big(), nullable=True),
        sa.Column('last_request_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['merchant_id'], ['merchants.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_payment_channels_merchant_created', 'payment_channels', ['merchant_id', 'created_at'])
    op.create_index('ix_payment_channels_claims', 'payment_channels', ['chain_id', 'receiver_authorizer'])
    op.create_index('ix_payment_channels_hold_id', 'payment_channels', ['hold_id'])
    op.create_index('ix_payment_channels_last_hold_id', 'payment_channels', ['last_hold_id'])
    op.create_table(
        'channel_deposits',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('channel_id', sa.String(length=66), nullable=False),
        sa.Column('authorization_key', sa.String(length=66), nullable=False),
        sa.Column('amount', big(), nullable=False),
        sa.Column('transaction', sa.String(length=66), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('authorization_key'),
    )
    op.create_index('ix_channel_deposits_channel_id', 'channel_deposits', ['channel_id'])
    op.create_table(
        'channel_transactions',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('chain_id', big(), nullable=False),
        sa.Column('receiver', sa.String(length=42), nullable=False),
        sa.Column('token', sa.String(length=42), nullable=False),
        sa.Column('transaction', sa.String(length=66), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('amount', big(), nullable=False),
        sa.Column('rows', sa.JSON(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_channel_transactions_status', 'channel_transactions', ['status'])


def downgrade() -> None:
    op.drop_table('channel_transactions')
    op.drop_table('channel_deposits')
    op.drop_table('payment_channels')
    op.drop_table('channel_authorizers')
    with op.batch_alter_table('agent_endpoints', schema=None) as batch_op:
        batch_op.drop_column('channel_receiver_authorizer')
        batch_op.drop_column('channel_idle_refund_seconds')
        batch_op.drop_column('channel_only')
        batch_op.drop_column('channel_withdraw_delay')
        batch_op.drop_column('channel_min_deposit')
