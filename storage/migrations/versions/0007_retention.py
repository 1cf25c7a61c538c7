"""Retention: compaction marks, idempotency-key expiry and idle-thread indexes.

``runs.events_compacted_at`` records when retention removed a terminal run's
deltas from its event log; ``idempotency_keys.thread_id`` lets DeleteThread
remove a thread's keys with it (keys stored before this revision have none,
and expire by their TTL). Each index serves one retention scan, oldest first.
Adding nullable columns and indexes keeps a populated database's rows as they
are.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("events_compacted_at", sa.DateTime(timezone=True)))
        batch_op.create_index(
            "ix_runs_events_compacted_at_ended_at", ["events_compacted_at", "ended_at"]
        )
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("thread_id", sa.String(40), nullable=True))
        batch_op.create_index("ix_idempotency_keys_created_at", ["created_at"])
        batch_op.create_index("ix_idempotency_keys_thread_id", ["thread_id"])
    with op.batch_alter_table("threads", schema=None) as batch_op:
        batch_op.create_index("ix_threads_status_updated_at", ["status", "updated_at"])


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("threads", schema=None) as batch_op:
        batch_op.drop_index("ix_threads_status_updated_at")
    with op.batch_alter_table("idempotency_keys", schema=None) as batch_op:
        batch_op.drop_index("ix_idempotency_keys_thread_id")
        batch_op.drop_index("ix_idempotency_keys_created_at")
        batch_op.drop_column("thread_id")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_events_compacted_at_ended_at")
        batch_op.drop_column("events_compacted_at")
