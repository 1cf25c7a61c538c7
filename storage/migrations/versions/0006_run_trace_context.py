"""Keep the trace context of the request that created a run.

``trace_context`` holds the W3C ``traceparent`` of the creating request, so
each execution of the run (in whichever process claims it) continues the
caller's trace. Runs created before this revision have none.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("trace_context", sa.String(200), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("trace_context")
