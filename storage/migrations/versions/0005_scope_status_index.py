"""Index runs by scope and status for the per-scope active-run quota.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_scope_status", ["scope", "status"], unique=False)


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_scope_status")
