"""Count history rewrites per thread, so readers can cache context incrementally.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("threads", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("history_epoch", sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("threads", schema=None) as batch_op:
        batch_op.drop_column("history_epoch")
