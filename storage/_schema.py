"""The schema, as SQLAlchemy Core tables (one module, one source of truth).

Migrations in ``storage/migrations`` create exactly these tables; a test
compares the migrated database with this metadata.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB

#: Strict JSON column: JSONB on PostgreSQL, JSON text elsewhere.
Json = JSON().with_variant(JSONB(), "postgresql")
Ts = DateTime(timezone=True)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

threads = Table(
    "threads",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("scope", String(200), nullable=False),
    Column("agent", String(200), nullable=False),
    Column("status", String(16), nullable=False),
    # Incremented by every root write; the CAS guard.
    Column("version", BigInteger, nullable=False),
    Column("metadata", Json, nullable=False),
    Column("private_metadata", Json, nullable=False),
    Column("active_run_id", String(40), nullable=True),
    # Next dense message position (= number of messages).
    Column("next_position", BigInteger, nullable=False),
    # Next per-thread run sequence number (queue order).
    Column("next_run_seq", BigInteger, nullable=False),
    # Bumped by every write that changes or removes existing messages (not by
    # appends), so a reader holding a context can extend it incrementally.
    Column("history_epoch", BigInteger, nullable=False, server_default="0"),
    Column("created_at", Ts, nullable=False),
    Column("updated_at", Ts, nullable=False),
    Index(None, "scope", "created_at"),
    Index(None, "active_run_id"),
    # Retention finds idle threads past their TTL oldest first.
    Index(None, "status", "updated_at"),
)

messages = Table(
    "messages",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("thread_id", String(40), ForeignKey("threads.id", ondelete="CASCADE"), nullable=False),
    Column("position", BigInteger, nullable=False),
    Column("role", String(16), nullable=False),
    Column("parts", Json, nullable=False),
    Column("metadata", Json, nullable=False),
    Column("private_metadata", Json, nullable=False),
    Column("visible_transcript", Boolean, nullable=False),
    Column("visible_context", Boolean, nullable=False),
    Column("run_id", String(40), nullable=True),
    Column("step_index", Integer, nullable=True),
    Column("created_at", Ts, nullable=False),
    UniqueConstraint("thread_id", "position"),
)

runs = Table(
    "runs",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("thread_id", String(40), ForeignKey("threads.id", ondelete="CASCADE"), nullable=False),
    Column("scope", String(200), nullable=False),
    Column("thread_seq", BigInteger, nullable=False),
    Column("status", String(16), nullable=False),
    Column("outcome", String(16), nullable=True),
    Column("reason", String(200), nullable=True),
    Column("initiator", String(16), nullable=False),
    Column("operation", String(16), nullable=False),
    # The operation input, applied when the run starts (queued user message, trigger input...).
    Column("input", Json, nullable=False),
    Column("started_at", Ts, nullable=True),
    Column("execution_started_at", Ts, nullable=True),
    Column("metadata", Json, nullable=False),
    Column("private_metadata", Json, nullable=False),
    Column("usage", Json, nullable=False),
    Column("step_count", Integer, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("error", Json, nullable=True),
    Column("hook_failures", Json, nullable=False),
    Column("lease_owner", String(200), nullable=True),
    Column("lease_expires_at", Ts, nullable=True),
    # Incremented by every claim, so a stale owner with the same name is still fenced.
    Column("lease_epoch", BigInteger, nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    # Sequence numbers up to here may have been published live by an execution
    # (always >= last_seq); a new execution starts above it, so a recovered
    # attempt never reuses a number a lost process showed to readers.
    Column("reserved_seq", BigInteger, nullable=False, server_default="0"),
    Column("created_at", Ts, nullable=False),
    Column("updated_at", Ts, nullable=False),
    Column("ended_at", Ts, nullable=True),
    # Set by CancelRun while another execution holds the lease; the holder cancels.
    Column("cancel_requested_at", Ts, nullable=True),
    # The W3C traceparent of the request that created the run, so every
    # execution (in any process) continues the caller's trace.
    Column("trace_context", String(200), nullable=True),
    # When retention removed the run's deltas from its event log (None: not yet).
    Column("events_compacted_at", Ts, nullable=True),
    UniqueConstraint("thread_id", "thread_seq"),
    Index(None, "thread_id", "status", "thread_seq"),
    # Claims scan runnable runs oldest first.
    Index(None, "status", "created_at"),
    # Retention finds ended runs not compacted yet, oldest first (NULL leads).
    Index(None, "events_compacted_at", "ended_at"),
)

#: The statuses the per-scope active-run quota counts (a waiting run holds its
#: thread, and its pending actions, as much as a running one).
QUOTA_RUN_STATUSES = ("queued", "running", "waiting")

# The per-scope active-run quota counts a scope's active runs under the scope's
# lock on every Send. Only active runs are in this index, so the count reads
# those and never the scope's ended ones, however many there are and whatever
# the planner's statistics say (an index of (scope, status) was scanned over
# all of a scope's runs when the table had none). The quota's statement writes
# the same status list into its SQL, which is how both databases know the
# index answers it.
Index(
    "ix_runs_scope_active",
    runs.c.scope,
    postgresql_where=runs.c.status.in_(QUOTA_RUN_STATUSES),
    sqlite_where=runs.c.status.in_(QUOTA_RUN_STATUSES),
)

pending_actions = Table(
    "pending_actions",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("run_id", String(40), ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("thread_id", String(40), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("tool_call_id", String(200), nullable=False),
    Column("tool_name", String(200), nullable=False),
    Column("input", Json, nullable=True),
    Column("request", Json, nullable=True),
    Column("resolution", Json, nullable=True),
    Column("message_id", String(40), nullable=True),
    Column("created_at", Ts, nullable=False),
    Column("resolved_at", Ts, nullable=True),
    Index(None, "run_id", "status"),
)

run_events = Table(
    "run_events",
    metadata,
    Column("run_id", String(40), ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("seq", BigInteger, nullable=False),
    # The event as strict JSON: rows logged before revision 0008 only (None since).
    Column("event", Json, nullable=True),
    # The serialized ``pai.v1.RunEvent`` (seq and time included), sent to readers
    # as is; opaque to storage. None in rows logged before revision 0008.
    Column("body", LargeBinary, nullable=True),
    # What the event is: its arm, or its chunk type for chunks (``status``,
    # ``message``, ``text-delta``...), so compaction finds deltas without
    # decoding bodies. None in rows logged before revision 0008.
    Column("kind", String(32), nullable=True),
    Column("created_at", Ts, nullable=False),
    PrimaryKeyConstraint("run_id", "seq"),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("scope", String(200), nullable=False),
    Column("key", String(300), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("result", Json, nullable=False),
    Column("created_at", Ts, nullable=False),
    # The thread the request wrote to: DeleteThread removes its keys too.
    Column("thread_id", String(40), nullable=True),
    PrimaryKeyConstraint("scope", "key"),
    # Retention expires keys oldest first.
    Index(None, "created_at"),
    Index(None, "thread_id"),
)
