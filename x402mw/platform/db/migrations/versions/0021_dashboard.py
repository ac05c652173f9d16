"""the merchant dashboard: users, sessions, invitations, audit log, the API request log, and the
payments list's indexes

Revision ID: 0021
Revises: 0019
Create Date: 2026-11-26 02:50:00.000000
"""

from alembic import op
import sqlalchemy as sa


revision = '0021'
down_revision = '0019'
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'dashboard_users',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('merchant_id', sa.String(length=36), nullable=False),
        sa.Column('email', sa.String(length=320), nullable=False),
        sa.Column('password_hash', sa.String(length=255), nullable=False),
        sa.Column('role', sa.String(length=16), nullable=False),
        sa.Column('totp_secret', sa.String(length=255), nullable=True),
        sa.Column('totp_enabled', sa.Boolean(), nullable=False),
        sa.Column('totp_last_step', sa.BigInteger(), nullable=True),
        sa.Column('created_at', TZ, nullable=False),
        sa.Column('disabled_at', TZ, nullable=True),
        sa.ForeignKeyConstraint(['merchant_id'], ['merchants.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('email'),
    )
    op.create_index('ix_dashboard_users_merchant_id', 'dashboard_users', ['merchant_id'])
    op.create_table(
        'dashboard_sessions',
        sa.Column('id', sa.String(length=64), nullable=False),
        sa.Column('user_id', sa.String(length=36), nullable=False),
        sa.Column('merchant_id', sa.String(length=36), nullable=False),
        sa.Column('csrf_token', sa.String(length=64), nullable=False),
        sa.Column('livemode', sa.Boolean(), nullable=False),
        sa.Column('two_factor_passed', sa.Boolean(), nullable=False),
        sa.Column('created_at', TZ, nullable=False),
        sa.Column('last_seen_at', TZ, nullable=False),
        sa.Column('expires_at', TZ, nullable=False),
        sa.Column('revoked_at', TZ, nullable=True),
        sa.ForeignKeyConstraint(['merchant_id'], ['merchants.id']),
        sa.ForeignKeyConstraint(['user_id'], ['dashboard_users.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_dashboard_sessions_user_id', 'dashboard_sessions', ['user_id'])
    op.create_table(
        'dashboard_invitations',
        sa.Column('id', sa.String(length=64), nullable=False),
        sa.Column('merchant_id', sa.String(length=36), nullable=False),
        sa.Column('email', sa.String(length=320), nullable=False),
        sa.Column('role', sa.String(length=16), nullable=False),
        sa.Column('invited_by', sa.String(length=36), nullable=False),
        sa.Column('expires_at', TZ, nullable=False),
        sa.Column('used_at', TZ, nullable=True),
        sa.Column('created_at', TZ, nullable=False),
        sa.ForeignKeyConstraint(['merchant_id'], ['merchants.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_dashboard_invitations_merchant_id', 'dashboard_invitations', ['merchant_id'])
    op.create_table(
        'dashboard_audit',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('merchant_id', sa.String(length=36), nullable=True),
        sa.Column('user_id', sa.String(length=36), nullable=True),
        sa.Column('email', sa.String(length=320), nullable=True),
        sa.Column('action', sa.String(length=64), nullable=False),
        sa.Column('target', sa.String(length=200), nullable=True),
        sa.Column('outcome', sa.String(length=16), nullable=False),
        sa.Column('address', sa.String(length=64), nullable=True),
        sa.Column('detail', sa.String(length=500), nullable=True),
        sa.Column('created_at', TZ, nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_dashboard_audit_merchant_created', 'dashboard_audit', ['merchant_id', 'created_at'])
    op.create_table(
        'api_requests',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('merchant_id', sa.String(length=36), nullable=False),
        sa.Column('livemode', sa.Boolean(), nullable=False),
        sa.Column('method', sa.String(length=10), nullable=False),
        sa.Column('path', sa.String(length=500), nullable=False),
        sa.Column('status', sa.Integer(), nullable=False),
        sa.Column('request_id', sa.String(length=64), nullable=False),
        sa.Column('duration_ms', sa.Integer(), nullable=False),
        sa.Column('created_at', TZ, nullable=False),
        sa.ForeignKeyConstraint(['merchant_id'], ['merchants.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_api_requests_merchant_created', 'api_requests', ['merchant_id', 'livemode', 'created_at'])
    op.create_index('ix_api_requests_request_id', 'api_requests', ['request_id'])
    op.create_index('ix_api_requests_created', 'api_requests', ['created_at'])
    pi = 'payment_intents'
    op.create_index('ix_payment_intents_mode_created', pi, ['merchant_id', 'livemode', 'created_at', 'id'])
    op.create_index(
        'ix_payment_intents_mode_status_created', pi, ['merchant_id', 'livemode', 'status', 'created_at', 'id']
    )
    op.create_index('ix_payment_intents_mode_order', pi, ['merchant_id', 'livemode', 'order_id'])
    op.create_index('ix_payment_intents_mode_payer', pi, ['merchant_id', 'livemode', 'payer'])
    op.create_index('ix_payment_intents_mode_tx', pi, ['merchant_id', 'livemode', 'tx_hash'])


def downgrade() -> None:
    for name in ('tx', 'payer', 'order', 'status_created', 'created'):
        op.drop_index(f'ix_payment_intents_mode_{name}', table_name='payment_intents')
    op.drop_table('api_requests')
    op.drop_table('dashboard_audit')
    op.drop_table('dashboard_invitations')
    op.drop_table('dashboard_sessions')
    op.drop_table('dashboard_users')
