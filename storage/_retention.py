"""Retention: bounded storage growth, in short transactions.

Three kinds of work, each done in bounded batches (one transaction per batch,
so no batch holds its locks for long or runs a full-table DELETE):

- **compaction**: a terminal run's text, reasoning and tool-input deltas are
  removed from its event log once it has been terminal for a while. Each
  stretch of removed events between two kept ones is replaced by one
  ``compacted`` event carrying the stretch's last seq, so a reader resuming
  anywhere inside it receives the marker next and never meets a gap it cannot
  explain. Deletes address rows by primary key (``run_id`` and a seq range).
  Deltas are found by the ``kind`` column, or for rows logged before
  revision 0008 (JSON, no kind) by the chunk type inside their JSON. The
  marker is stored like any new event, in binary, encoded by the caller
  (storage never encodes events itself).
- **idempotency expiry**: request results older than their TTL are deleted.
- **idle threads**: threads idle past their TTL are deleted with everything
  in them (cascades), like DeleteThread.

On PostgreSQL batches pick their rows with ``FOR UPDATE SKIP LOCKED``, and a
whole pass holds a session advisory lock (see :meth:`storage.Store.sweep`), so
one sweeper works at a time across processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, tuple_, update

from storage._rows import required
from storage._schema import idempotency_keys, run_events, runs, threads

#: Statuses after which a run writes no more events.
TERMINAL = ("completed", "failed", "cancelled")
#: Chunk types compaction removes: the committed messages hold what they spelled out.
DELTA_TYPES = frozenset({"text-delta", "reasoning-delta", "tool-input-delta"})


@dataclass(frozen=True)
class RetentionPolicy:
    """What a sweep removes; ``None`` turns a kind of work off.

    Attributes:
        events_after_terminal: Compact a run's events this long after it ended.
        idempotency_ttl: Delete request results older than this.
        idle_threads_after: Delete threads idle (no write) for this long.
        batch_rows: Rows one transaction removes, roughly (a run is compacted
            whole, so a batch may exceed it by one run's events).
        rest: On SQLite, which serialises every write, seconds of pause per
            second of batch work, so a sweep takes at most ``1 / (1 + rest)``
            of the writer (PostgreSQL batches lock only the rows they remove).
    """

    events_after_terminal: timedelta | None = timedelta(hours=1)
    idempotency_ttl: timedelta | None = timedelta(hours=24)
    idle_threads_after: timedelta | None = None
    batch_rows: int = 5000
    rest: float = 1.0


@dataclass(frozen=True, slots=True)
class CompactionMarker:
    """The event one compacted stretch becomes, stored at ``last_seq`` (kind ``compacted``)."""

    first_seq: int
    last_seq: int
    removed_events: int
    #: The time of the stretch's last event: the marker takes its place.
    time: datetime


#: Serializes a marker into the body stored for it: the same encoding the
#: writers of the log use, since readers send bodies as they are.
MarkerEncoder = Callable[[CompactionMarker], bytes]


@dataclass
class SweepReport:
    """What one sweep pass did."""

    #: False when another sweeper held the lock, so this pass did nothing.
    ran: bool = True
    compacted_runs: int = 0
    removed_events: int = 0
    expired_keys: int = 0
    deleted_threads: int = 0
    #: Threads whose stuck queue the pass set moving again (see Store.sweep).
    repaired_queues: int = 0
    batches: int = 0
    #: Tables the pass analyzed because autovacuum would not (see Store.analyze_unattended).
    analyzed: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        if not self.ran:
            return "skipped: another sweeper is active"
        return (
            f"compacted {self.compacted_runs} run(s) ({self.removed_events} event(s) removed), "
            f"expired {self.expired_keys} idempotency key(s), "
            f"deleted {self.deleted_threads} idle thread(s), "
            f"repaired {self.repaired_queues} stuck queue(s), in {self.batches} batch(es)"
            + (f"; analyzed {', '.join(self.analyzed)}" if self.analyzed else "")
        )


def compaction_stretches(rows: Sequence[tuple[int, str | None]]) -> list[tuple[int, int, int]]:
    """``(first_seq, last_seq, count)`` of each maximal stretch of delta events.

    ``rows`` are a run's ``(seq, chunk type)`` in seq order (``None`` for
    events that are not chunks).
    """
    out: list[tuple[int, int, int]] = []
    first = last = count = 0
    for seq, kind in rows:
        if kind in DELTA_TYPES:
            if count == 0:
                first = seq
            last, count = seq, count + 1
        elif count:
            out.append((first, last, count))
            count = 0
    if count:
        out.append((first, last, count))
    return out


class RetentionSql:
    """The statements of one sweep batch (the caller owns the transaction)."""

    def __init__(self, postgres: bool) -> None:
        self.postgres = postgres

    def _skip_locked(self, stmt: Any, of: Any) -> Any:
        return stmt.with_for_update(of=of, skip_locked=True) if self.postgres else stmt

    def compact_batch(
        self,
        conn: Connection,
        now: Any,
        after: timedelta,
        max_rows: int,
        encode_marker: MarkerEncoder,
    ) -> tuple[int, int]:
        """Compact the oldest eligible runs until ``max_rows`` events are removed.

        Returns ``(runs compacted, events removed)``. Only terminal runs that
        ended at least ``after`` ago are touched: a queued, running or
        waiting run is never compacted.
        """
        candidates = conn.execute(
            self._skip_locked(
                select(runs.c.id)
                .where(
                    runs.c.events_compacted_at.is_(None),
                    runs.c.ended_at <= now - after,
                    runs.c.status.in_(TERMINAL),
                )
                .order_by(runs.c.events_compacted_at, runs.c.ended_at)
                .limit(max(1, min(100, max_rows // 50))),
                runs,
            )
        ).all()
        compacted = removed = 0
        # Rows logged before binary events have no kind: their JSON names the chunk type.
        kind = func.coalesce(run_events.c.kind, run_events.c.event[("chunk", "type")].as_string())
        for (run_id,) in candidates:
            rows = conn.execute(
                select(run_events.c.seq, kind, run_events.c.created_at)
                .where(run_events.c.run_id == run_id)
                .order_by(run_events.c.seq)
            ).all()
            times = {r[0]: required(r[2]) for r in rows}
            stretches = compaction_stretches([(r[0], r[1]) for r in rows])
            for first, last, count in stretches:
                conn.execute(
                    delete(run_events).where(
                        run_events.c.run_id == run_id,
                        run_events.c.seq >= first,
                        run_events.c.seq <= last,
                    )
                )
                removed += count
            if stretches:
                conn.execute(
                    insert(run_events),
                    [
                        {
                            "run_id": run_id,
                            "seq": last,
                            "body": encode_marker(
                                CompactionMarker(first, last, count, times[last])
                            ),
                            "kind": "compacted",
                            "created_at": times[last],
                        }
                        for first, last, count in stretches
                    ],
                )
            conn.execute(update(runs).where(runs.c.id == run_id).values(events_compacted_at=now))
            compacted += 1
            if removed >= max_rows:
                break
        return compacted, removed

    def expire_keys_batch(self, conn: Connection, now: Any, ttl: timedelta, limit: int) -> int:
        """Delete up to ``limit`` idempotency records older than ``ttl``."""
        oldest = (
            select(idempotency_keys.c.scope, idempotency_keys.c.key)
            .where(idempotency_keys.c.created_at <= now - ttl)
            .order_by(idempotency_keys.c.created_at)
            .limit(limit)
        )
        keys = conn.execute(self._skip_locked(oldest, idempotency_keys)).all()
        if not keys:
            return 0
        conn.execute(
            delete(idempotency_keys).where(
                tuple_(idempotency_keys.c.scope, idempotency_keys.c.key).in_(
                    bindparam("p_keys", expanding=True)
                )
            ),
            {"p_keys": [tuple(k) for k in keys]},
        )
        return len(keys)

    def delete_idle_batch(self, conn: Connection, now: Any, idle: timedelta, limit: int) -> int:
        """Delete up to ``limit`` threads idle for ``idle``, with everything in them."""
        ids = [
            r[0]
            for r in conn.execute(
                self._skip_locked(
                    select(threads.c.id)
                    .where(threads.c.status == "idle", threads.c.updated_at <= now - idle)
                    .order_by(threads.c.status, threads.c.updated_at)
                    .limit(limit),
                    threads,
                )
            ).all()
        ]
        if not ids:
            return 0
        # The picked rows are locked (or, on SQLite, the database is), so they
        # are still idle: messages, runs, pending actions and events cascade.
        conn.execute(delete(threads).where(threads.c.id.in_(ids)))
        conn.execute(delete(idempotency_keys).where(idempotency_keys.c.thread_id.in_(ids)))
        return len(ids)
