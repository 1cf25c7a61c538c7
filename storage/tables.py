"""The SQLAlchemy tables, for tooling that reads storage directly (benchmarks, operators' scripts).

The service itself goes through :class:`storage.Store`; these are the same
table objects it uses, so a query written against them matches the schema
the migrations create.
"""

from storage._schema import idempotency_keys, messages, metadata, run_events, runs, threads

__all__ = ["idempotency_keys", "messages", "metadata", "run_events", "runs", "threads"]
