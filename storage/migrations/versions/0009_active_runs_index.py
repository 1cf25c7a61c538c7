"""Index only the active runs of each scope, for the per-scope quota.

Every Send of a scope counts that scope's queued, running and waiting runs
while it holds the scope's lock. The index of (scope, status) it counted
with also held every ended run, and when the table had no planner statistics
(a new table, or any table while autovacuum is off) PostgreSQL scanned it
over all of a scope's runs: the count, and with it every Send of the scope,
slowed down with each run the scope had ever had. The new index holds only
the runs the quota counts, so the count reads those whatever the statistics.

Building it scans ``runs`` once under a lock that holds writes to ``runs``
back until it is built. On a large PostgreSQL database, build it beforehand
without blocking writes, and this revision keeps it::

    CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_runs_scope_active ON runs (scope)
        WHERE status IN ('queued', 'running', 'waiting');

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# Spelled out rather than imported: a revision keeps meaning what it meant
# when it was written, whatever the runtime's statuses become.
_ACTIVE = sa.text("status IN ('queued', 'running', 'waiting')")


def upgrade() -> None:
    """Apply this revision."""
    op.create_index(
        "ix_runs_scope_active",
        "runs",
        ["scope"],
        unique=False,
        postgresql_where=_ACTIVE,
        sqlite_where=_ACTIVE,
        if_not_exists=True,
    )
    op.drop_index("ix_runs_scope_status", table_name="runs")


def downgrade() -> None:
    """Revert this revision."""
    op.create_index("ix_runs_scope_status", "runs", ["scope", "status"], unique=False)
    op.drop_index("ix_runs_scope_active", table_name="runs")
