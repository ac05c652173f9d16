"""discovery and sign-in-with-x: endpoints' discoverable flag, the discovery catalogue, used sign-in nonces

Revision ID: 0019
Revises: 0020
Create Date: 2026-11-26 02:40:00.000000
"""

from alembic import op
import sqlalchemy as sa


revision = '0019'
down_revision = '0020'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('agent_endpoints', schema=None) as batch_op:
        batch_op.add_column(sa.Column('discoverable', sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        'discovery_resources',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('merchant_id', sa.String(length=36), nullable=False),
        sa.Column('endpoint_id', sa.String(length=36), nullable=False),
        sa.Column('livemode', sa.Boolean(), nullable=False),
        sa.Column('resource', sa.String(length=2048), nullable=False),
        sa.Column('tool_name', sa.String(length=200), nullable=False),
        sa.Column('type', sa.String(length=8), nullable=False),
        sa.Column('description', sa.String(length=1000), nullable=False),
        sa.Column('mime_type', sa.String(length=200), nullable=False),
        sa.Column('accepts', sa.JSON(), nullable=False),
        sa.Column('extensions', sa.JSON(), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['endpoint_id'], ['agent_endpoints.id']),
        sa.ForeignKeyConstraint(['merchant_id'], ['merchants.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('endpoint_id', 'resource', 'tool_name', name='uq_discovery_resources_resource'),
    )
    op.create_index('ix_discovery_resources_updated', 'discovery_resources', ['updated_at'], unique=False)
    op.create_table(
        'sign_in_nonces',
        sa.Column('nonce', sa.String(length=128), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('nonce'),
    )
    op.create_index(op.f('ix_sign_in_nonces_expires_at'), 'sign_in_nonces', ['expires_at'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_sign_in_nonces_expires_at'), table_name='sign_in_nonces')
    op.drop_table('sign_in_nonces')
    op.drop_index('ix_discovery_resources_updated', table_name='discovery_resources')
    op.drop_table('discovery_resources')
    with op.batch_alter_table('agent_endpoints', schema=None) as batch_op:
        batch_op.drop_column('discoverable')
