"""Reserve run-event sequence numbers durably before they are published live.

An execution publishes events to live readers before the chunk log holds
them; ``reserved_seq`` records how far it may have gone, so a recovered
execution starts above it instead of reusing numbers readers have seen.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("reserved_seq", sa.BigInteger(), nullable=False, server_default="0")
        )
    # Runs executing under older code may have published up to a flush batch
    # beyond their log: their next execution starts a block above it.
    op.execute(
        "UPDATE runs SET reserved_seq = CASE WHEN status = 'running' "
        "THEN last_seq + 1024 ELSE last_seq END"
    )


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("reserved_seq")
