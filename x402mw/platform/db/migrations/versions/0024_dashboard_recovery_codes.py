"""the dashboard's two-factor recovery codes

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29 02:00:00.000000
"""

from alembic import op
import sqlalchemy as sa


revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'dashboard_recovery_codes',
        sa.Column('id', sa.String(length=64), nullable=False),
        sa.Column('user_id', sa.String(length=36), nullable=False),
        sa.Column('used_at', TZ, nullable=True),
        sa.Column('created_at', TZ, nullable=False),
        sa.ForeignKeyConstraint(['user_id'], ['dashboard_users.id']),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_dashboard_recovery_codes_user_id', 'dashboard_recovery_codes', ['user_id'])


def downgrade() -> None:
    op.drop_index('ix_dashboard_recovery_codes_user_id', table_name='dashboard_recovery_codes')
    op.drop_table('dashboard_recovery_codes')
