"""smart accounts and payment identifiers: a payment's signature may be a smart account's (longer
than a key's 65 bytes); the x402 payment-identifier extension's ids with their answers

Revision ID: 0018
Revises: 0016
Create Date: 2026-11-26 02:30:00.000000
"""

from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = '0018'
down_revision = '0016'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('agent_payments', schema=None) as batch_op:
        batch_op.alter_column(
            'signature',
            existing_type=sqlmodel.sql.sqltypes.AutoString(length=132),
            type_=sqlmodel.sql.sqltypes.AutoString(length=8194),
            existing_nullable=True,
        )
    op.create_table(
        'payment_identifiers',
        sa.Column('answer', sa.JSON(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('locked_until', sa.DateTime(timezone=True), nullable=True),
        sa.Column('scope', sqlmodel.sql.sqltypes.AutoString(length=48), nullable=False),
        sa.Column('identifier', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column('fingerprint', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.PrimaryKeyConstraint('scope', 'identifier'),
    )
    with op.batch_alter_table('payment_identifiers', schema=None) as batch_op:
        batch_op.create_index('ix_payment_identifiers_created', ['created_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('payment_identifiers', schema=None) as batch_op:
        batch_op.drop_index('ix_payment_identifiers_created')
    op.drop_table('payment_identifiers')
    with op.batch_alter_table('agent_payments', schema=None) as batch_op:
        batch_op.alter_column(
            'signature',
            existing_type=sqlmodel.sql.sqltypes.AutoString(length=8194),
            type_=sqlmodel.sql.sqltypes.AutoString(length=132),
            existing_nullable=True,
        )
