"""Run events in binary: the serialized ``pai.v1.RunEvent`` and its kind.

``run_events.body`` holds the event as the runtime serialized it (seq and
time included), so StreamRun sends it without decoding; ``run_events.kind``
names the event's arm, or its chunk type for chunks, so compaction finds
deltas in SQL without decoding bodies. ``run_events.event`` (JSON) becomes
nullable: rows written from this revision on carry a body and no JSON.

Rows written before it are **not rewritten**: they keep their JSON and no
kind, readers convert them on every read and compaction reads their chunk
type from the JSON. Converting them here would rewrite the whole table in one
transaction, which at 10^9 rows is not an option (and compaction shrinks old
runs to a handful of rows anyway). On PostgreSQL the upgrade only changes the
catalog (two nullable columns without defaults, one dropped ``NOT NULL``): it
takes a brief exclusive lock and touches no row. SQLite cannot drop ``NOT
NULL`` in place, so there the table is copied as is (the embedded backend's
databases are small).

The downgrade deletes the events that exist only in binary: revision 0007
cannot read them, so those runs' logs lose them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("run_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("body", sa.LargeBinary(), nullable=True))
        batch_op.add_column(sa.Column("kind", sa.String(32), nullable=True))
        batch_op.alter_column("event", existing_type=_JSON, nullable=True)


def downgrade() -> None:
    """Revert this revision (deleting events stored in binary only)."""
    op.execute("DELETE FROM run_events WHERE event IS NULL")
    with op.batch_alter_table("run_events", schema=None) as batch_op:
        batch_op.alter_column("event", existing_type=_JSON, nullable=False)
        batch_op.drop_column("kind")
        batch_op.drop_column("body")
