"""The storage provider: one implementation for SQLite and PostgreSQL.

The provider applies write sets mechanically and enforces scope, strict
JSON, version compare-and-swap and lease fencing. It never invents agent
behaviour: every transition is computed by the runtime. Each public method
is one transaction, run as a unit (see :mod:`storage._engine`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

from sqlalchemy import Connection, func, select, text
from sqlalchemy.exc import IntegrityError

from storage._engine import Engines, create_engines
from storage._json import JsonObject
from storage._listen import Listener
from storage._records import (
    PROMOTE_NEXT,
    ClaimedRun,
    CommitResult,
    EventRecord,
    Heartbeat,
    IdempotencyRecord,
    Lease,
    MessageRecord,
    NewEvent,
    Page,
    PendingActionRecord,
    RunRecord,
    ThreadPatch,
    ThreadRecord,
    WriteSet,
)
from storage._retention import MarkerEncoder, RetentionPolicy, RetentionSql, SweepReport
from storage._rows import MAX_PAGE_SIZE, check_write_set_json
from storage._schema import metadata
from storage._sql import Sql
from storage.errors import StateConflict, VersionConflict

log = logging.getLogger("pai_grpc.storage")

T = TypeVar("T")


class DuplicateRequest(StateConflict):
    """A write set carried an idempotency key that is already stored."""

    def __init__(self, key: str) -> None:
        super().__init__("request", key, "already committed")


class Store:
    """A storage provider bound to one database (SQLite or PostgreSQL)."""

    def __init__(self, engines: Engines) -> None:
        self._engines = engines
        self._sql = Sql(engines.dialect)
        self._retention = RetentionSql(engines.dialect == "postgresql")
        #: Called after each commit with its duration in seconds and whether a
        #: version guard refused it (the service's metrics; storage knows none).
        self.observer: Callable[[float, bool], None] | None = None
        #: Called with each write set this store committed and its result, right
        #: after the commit (e.g. a cache of thread contexts extends itself).
        self.commit_listeners: list[Callable[[WriteSet, CommitResult], None]] = []
        #: Called after this store ran work that may have rewritten event logs
        #: (a sweep that compacted runs, operators' maintenance SQL): copies of
        #: recent runs' events kept in memory may no longer be their logs.
        self.log_rewrite_listeners: list[Callable[[], None]] = []

    @classmethod
    def open(cls, url: str, *, pool_size: int = 20, schema: str | None = None) -> Store:
        """Create a provider for ``url`` (no I/O happens until first use)."""
        return cls(create_engines(url, pool_size=pool_size, schema=schema))

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._engines.dialect

    @property
    def engines(self) -> Engines:
        """How the provider reaches its database (migrations use it)."""
        return self._engines

    async def close(self) -> None:
        """Release every connection."""
        await self._engines.dispose()

    async def run_in_transaction(self, fn: Callable[[Connection], T]) -> T:
        """Run raw maintenance SQL in one write transaction (operators and tests)."""
        try:
            return await self._engines.write(fn, heavy=True)
        finally:
            self._logs_rewritten()  # it may have changed anything

    def _logs_rewritten(self) -> None:
        for listener in self.log_rewrite_listeners:
            listener()

    # ---- notifications -----------------------------------------------------

    def channel(self, name: str) -> str:
        """The NOTIFY channel ``name`` of this store (namespaced by schema)."""
        return f"pai_{self._engines.schema or 'public'}_{name}"

    def listener(self, handlers: dict[str, Callable[[str], None]]) -> Listener | None:
        """A listener for ``{channel name: handler}`` (``None`` on SQLite, which polls)."""
        if self.dialect != "postgresql":
            return None
        url = self._engines.url.set(drivername="postgresql")
        settings = {"search_path": self._engines.schema} if self._engines.schema else {}
        return Listener(
            url.render_as_string(hide_password=False),
            {self.channel(name): handler for name, handler in handlers.items()},
            server_settings=settings,
        )

    async def notify(self, notes: Sequence[tuple[str, str]]) -> None:
        """Send notifications outside a write set (PostgreSQL only)."""
        if self.dialect != "postgresql" or not notes:
            return
        await self._engines.write(lambda c: self._sql.notify(c, notes))

    # ---- reads -------------------------------------------------------------

    async def now(self) -> datetime:
        """The provider's current time."""
        return await self._engines.read(self._sql.now)

    async def upkeep_problems(self) -> list[str]:
        """What in the database's own upkeep would slow this store down over time.

        PostgreSQL only (SQLite needs none): every run leaves dead row versions
        of its thread and its run behind, which only vacuum removes, and the
        planner picks plans by statistics only analyze gathers. With
        autovacuum off, server-wide or for one of the store's tables, neither
        happens: tables and indexes grow and scans slow down until an operator
        runs ``VACUUM (ANALYZE)``. Returns one sentence per problem.
        """
        if self.dialect != "postgresql":
            return []
        return await self._engines.read(_upkeep_problems)

    async def analyze_unattended(self) -> list[str]:
        """Analyze the store's tables whose statistics autovacuum will not renew; their names.

        PostgreSQL only. Without statistics the planner cannot tell a thread's
        id from its scope: a lookup by both (every read and write of a thread)
        chose the index of the scope's threads, or of their status, over the
        primary key, and read every thread of the scope to find one (2,000
        index entries for a scope of 2,000 threads; one ``ANALYZE`` brings it
        back to the primary key). Autovacuum analyzes a table once enough of
        it changed; while it is off, server-wide or for a table, this does
        what it would: each such table whose rows changed since its last
        analyze by more than autovacuum's own threshold
        (``autovacuum_analyze_threshold`` plus ``autovacuum_analyze_scale_factor``
        of its rows) is analyzed, skipped if another session holds it. It
        needs ``track_counts`` (the startup warning names it when off).
        """
        if self.dialect != "postgresql":
            return []
        stale = await self._engines.read(_unattended_tables, heavy=True)
        for table in stale:
            await self._engines.read(partial(_analyze, table=table), heavy=True)
        if stale:
            log.info("analyzed %s: autovacuum does not (docs/storage.md, Vacuum)", ", ".join(stale))
        return stale

    async def get_thread(self, scope: str, thread_id: str) -> ThreadRecord | None:
        """A thread of ``scope``; ``None`` when absent or in another scope."""
        return await self._engines.read(lambda c: self._sql.get_thread(c, scope, thread_id))

    async def list_threads(
        self, scope: str, *, limit: int = 50, page_token: str = ""
    ) -> Page[ThreadRecord]:
        """The scope's threads, newest first."""
        return await self._engines.read(
            lambda c: self._sql.list_threads(c, scope, limit, page_token)
        )

    async def list_messages(
        self,
        scope: str,
        thread_id: str,
        *,
        view: str = "transcript",
        order: str = "asc",
        after_message_id: str | None = None,
        before_message_id: str | None = None,
        through_position: int | None = None,
        limit: int = 100,
        page_token: str = "",
    ) -> Page[MessageRecord]:
        """A page of the thread's messages by view, order and exclusive id bounds.

        ``through_position`` caps the read at a physical anchor (inclusive),
        so history read during a step never sees later messages.
        """
        return await self._engines.read(
            heavy=limit > 100,
            fn=lambda c: self._sql.list_messages(
                c,
                scope,
                thread_id,
                view=view,
                order=order,
                after_message_id=after_message_id,
                before_message_id=before_message_id,
                through_position=through_position,
                limit=limit,
                page_token=page_token,
            ),
        )

    async def context(
        self, scope: str, thread_id: str, *, view: str = "context", from_position: int = 0
    ) -> tuple[ThreadRecord, list[MessageRecord]]:
        """The thread head and the messages of ``view`` below it, from one snapshot.

        With ``from_position`` only later messages are read: callers that hold
        the earlier ones pass the count they hold, and must reload from 0 when
        the head's ``history_epoch`` differs from theirs.
        """
        return await self._engines.read(
            lambda c: self._sql.context(c, scope, thread_id, view, from_position),
            heavy=from_position == 0,
        )

    async def get_messages(
        self, scope: str, thread_id: str, message_ids: Sequence[str]
    ) -> list[MessageRecord]:
        """The named messages of the thread that exist, in chronological order."""
        if not message_ids:
            return []
        return await self._engines.read(
            lambda c: self._sql.get_messages(c, scope, thread_id, message_ids)
        )

    async def get_run(self, scope: str, run_id: str) -> RunRecord | None:
        """A run of ``scope``; ``None`` when absent or in another scope."""
        return await self._engines.read(lambda c: self._sql.get_run(c, scope, run_id))

    async def list_runs(
        self, scope: str, thread_id: str, *, limit: int = 50, page_token: str = ""
    ) -> Page[RunRecord]:
        """The thread's runs, newest first."""
        return await self._engines.read(
            lambda c: self._sql.list_runs(c, scope, thread_id, limit, page_token)
        )

    async def list_pending_actions(
        self, scope: str, run_id: str, *, status: str | None = None
    ) -> list[PendingActionRecord]:
        """The run's pending actions in creation order."""
        return await self._engines.read(
            lambda c: self._sql.list_pending_actions(c, scope, run_id, status)
        )

    async def read_events(
        self, scope: str, run_id: str, *, after_seq: int = 0, limit: int = 500
    ) -> list[EventRecord]:
        """Event-log entries of the run with ``seq > after_seq``, in order."""
        return await self._engines.read(
            lambda c: self._sql.read_events(c, scope, run_id, after_seq, limit)
        )

    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        """The stored result of request ``key``, if it was committed."""
        return await self._engines.read(lambda c: self._sql.get_idempotency(c, scope, key))

    async def runnable_count(self) -> int:
        """How many runs are waiting for a runner."""
        return await self._engines.read(self._sql.runnable_count)

    # ---- writes ------------------------------------------------------------

    async def commit(
        self,
        ws: WriteSet,
        *,
        events_after: Callable[[CommitResult], list[NewEvent]] | None = None,
    ) -> CommitResult:
        """Apply one write set atomically; on any error nothing is written.

        ``events_after`` builds event-log entries that describe what this write
        set committed (e.g. a message with its assigned position); it runs
        inside the transaction, must be pure, and its events commit atomically
        with the rest.

        Raises:
            InvalidJson: a value is not strict JSON (checked before any I/O).
            NotFound: the thread (or a named message) is absent in the scope.
            VersionConflict: a root guard (version, status, message count,
                private metadata) failed.
            LeaseLost: a fenced run update found the lease gone.
            StateConflict: a run or pending action is not in the expected state.
            DuplicateRequest: the idempotency key is already stored.
        """
        check_write_set_json(ws)
        started = time.perf_counter()
        conflict = False
        try:
            result = await self._engines.write(lambda c: self._sql.commit(c, ws, events_after))
        except VersionConflict:
            # A speculative write expected this refusal as one of its outcomes.
            conflict = not ws.speculative
            raise
        except IntegrityError as e:
            if ws.idempotency is not None and "idempotency" in str(e.orig).lower():
                raise DuplicateRequest(ws.idempotency.key) from e
            raise
        finally:
            if self.observer is not None:
                self.observer(time.perf_counter() - started, conflict)
        for listener in self.commit_listeners:
            try:
                listener(ws, result)
            except Exception:
                # The write set is durable: a listener's failure must not make it look lost.
                log.exception("a commit listener failed")
        return result

    async def delete_thread(
        self, scope: str, thread_id: str, *, expected_version: int | None = None
    ) -> None:
        """Delete an idle thread and everything in it."""
        # Heavy: a long thread's messages, events and runs all go in this transaction.
        await self._engines.write(
            lambda c: self._sql.delete_thread(c, scope, thread_id, expected_version), heavy=True
        )

    # ---- retention ---------------------------------------------------------

    @property
    def idempotency_ttl(self) -> timedelta | None:
        """How long a request result answers replays of its key (None: forever).

        After it, the key counts as unused: a replay is a new request.
        """
        return self._sql.idempotency_ttl

    @idempotency_ttl.setter
    def idempotency_ttl(self, ttl: timedelta | None) -> None:
        self._sql.idempotency_ttl = ttl

    @contextlib.asynccontextmanager
    async def sweep_lock(self) -> AsyncIterator[bool]:
        """Hold the sweeper lock for the block; yields whether it was taken.

        On PostgreSQL a session advisory lock (keyed by the store's schema),
        held on a connection of its own while batches commit on others, so one
        sweeper works at a time across processes. SQLite serialises every write
        already: the lock is always taken there.
        """
        engine = self._engines.async_engine
        if engine is None:
            yield True
            return
        key = _lock_key(f"pai.sweeper:{self._engines.schema or 'public'}")
        async with engine.connect() as conn:
            taken = bool((await conn.execute(select(func.pg_try_advisory_lock(key)))).scalar())
            await conn.commit()
            try:
                yield taken
            finally:
                if taken:
                    with contextlib.suppress(Exception):  # a dead session has dropped it
                        await conn.execute(select(func.pg_advisory_unlock(key)))
                        await conn.commit()

    async def sweep(self, policy: RetentionPolicy, *, encode_marker: MarkerEncoder) -> SweepReport:
        """One retention pass: compaction, key expiry, idle threads and stuck queues, in batches.

        It ends with :meth:`analyze_unattended` (tables autovacuum leaves alone).

        Each batch is one short transaction; the pass runs while it holds
        :meth:`sweep_lock`, and reports ``ran=False`` if another sweeper has it.
        ``encode_marker`` serializes the ``compacted`` event each removed
        stretch becomes, in the encoding of the rest of the log.
        """
        report = SweepReport()
        async with self.sweep_lock() as taken:
            if not taken:
                report.ran = False
                return report
            rows = max(1, policy.batch_rows)
            if policy.events_after_terminal is not None:
                after = policy.events_after_terminal
                while True:
                    runs_, events = await self._sweep_batch(
                        lambda c: self._retention.compact_batch(
                            c, self._sql.now(c), after, rows, encode_marker
                        ),
                        policy.rest,
                    )
                    report.batches += 1
                    report.compacted_runs += runs_
                    report.removed_events += events
                    if runs_ == 0:
                        break
                    self._logs_rewritten()
            if policy.idempotency_ttl is not None:
                ttl = policy.idempotency_ttl
                while True:
                    n = await self._sweep_batch(
                        lambda c: self._retention.expire_keys_batch(c, self._sql.now(c), ttl, rows),
                        policy.rest,
                    )
                    report.batches += 1
                    report.expired_keys += n
                    if n < rows:
                        break
            if policy.idle_threads_after is not None:
                idle = policy.idle_threads_after
                # A thread cascades to all its rows: fewer per transaction.
                limit = max(1, rows // 500)
                while True:
                    n = await self._sweep_batch(
                        lambda c: self._retention.delete_idle_batch(
                            c, self._sql.now(c), idle, limit
                        ),
                        policy.rest,
                    )
                    report.batches += 1
                    report.deleted_threads += n
                    if n < limit:
                        break
            report.repaired_queues = await self._repair_queues(rows)
            report.analyzed = await self.analyze_unattended()
        return report

    async def _repair_queues(self, limit: int) -> int:
        """Promote the next queued run of threads whose queue nothing would move.

        Each repair is a guarded commit of the state found (still idle, or the
        same ended run still active), so a thread a commit changed meanwhile is
        left to that commit. A repair is an anomaly: each is logged.
        """
        broken = await self._engines.read(lambda c: self._sql.broken_queues(c, limit), heavy=True)
        repaired = 0
        for scope, thread_id, active in broken:
            ws = WriteSet(
                scope=scope,
                thread_id=thread_id,
                expected_active_run=active,
                thread=ThreadPatch(active_run_id=PROMOTE_NEXT),
            )
            if active is None:
                ws.expected_status = ("idle",)
            try:
                result = await self.commit(ws)
            except VersionConflict:
                continue  # it moved: whatever moved it keeps the queue
            repaired += 1
            after = result.thread
            log.warning(
                "thread %s: its queue was stuck (active run %s); now %s, active run %s",
                thread_id,
                active,
                after.status if after else "?",
                after.active_run_id if after else None,
            )
        return repaired

    async def _sweep_batch(self, fn: Callable[[Connection], T], rest: float) -> T:
        started = time.perf_counter()
        result = await self._engines.write(fn, heavy=True)
        if rest > 0 and self.dialect == "sqlite":
            # SQLite serialises every write: between batches the writer is the service's.
            await asyncio.sleep((time.perf_counter() - started) * rest)
        return result

    # ---- claims and leases -------------------------------------------------

    async def claim_run(self, owner: str, *, lease_seconds: float) -> ClaimedRun | None:
        """Claim the next runnable run with a lease, or return ``None``.

        A run is runnable when it is its thread's active run (so at most one
        run per thread is ever claimed) and it is queued, or running with no
        live lease (recovery after a lost runner). Claims take the oldest
        runnable run first; on PostgreSQL concurrent claimers skip each
        other's locked rows.
        """
        return await self._engines.write(lambda c: self._sql.claim_run(c, owner, lease_seconds))

    async def claim_runs(self, owner: str, *, lease_seconds: float, limit: int) -> list[ClaimedRun]:
        """Claim up to ``limit`` runnable runs in one transaction, oldest first."""
        if limit <= 0:
            return []
        return await self._engines.write(
            lambda c: self._sql.claim_runs(c, owner, lease_seconds, limit)
        )

    async def heartbeat(self, lease: Lease, *, lease_seconds: float) -> Heartbeat:
        """Extend a held lease; raises :class:`LeaseLost` when it is gone.

        The answer also says whether a cancellation was requested, so a holder
        in another process learns of it within one heartbeat even without
        notifications.
        """
        return await self._engines.write(lambda c: self._sql.heartbeat(c, lease, lease_seconds))

    async def release(self, lease: Lease) -> None:
        """Give a lease up early so another runner can claim the run at once."""
        await self._engines.write(lambda c: self._sql.release(c, lease))


def _lock_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key (the same in every process)."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


#: Spellings PostgreSQL accepts for false in a boolean storage parameter.
_OFF = ("false", "off", "no", "0", "f", "of", "n")


def _upkeep_problems(conn: Connection) -> list[str]:
    """See :meth:`Store.upkeep_problems`."""
    shown = text(
        "SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum', 'track_counts')"
    )
    settings: dict[str, str] = {str(name): str(value) for name, value in conn.execute(shown)}
    problems = [
        f"PostgreSQL runs with {name} = off: autovacuum never vacuums or analyzes this "
        "store's tables, so the dead row versions every run leaves behind pile up"
        + (
            " (sweeps analyze the tables meanwhile, for the planner's statistics)"
            if name == "autovacuum"
            else " and plans go by stale statistics"
        )
        + "; turn it on, or run VACUUM (ANALYZE) on a schedule"
        for name in ("autovacuum", "track_counts")
        if settings.get(name) == "off"
    ]
    tables = conn.execute(
        text(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relkind = 'r' AND EXISTS ("
            " SELECT 1 FROM unnest(c.reloptions) AS o"
            " WHERE lower(o) = ANY(:off)) ORDER BY c.relname"
        ),
        {"off": [f"autovacuum_enabled={v}" for v in _OFF]},
    ).scalars()
    problems += [
        f"table {name} has autovacuum_enabled = false: its dead row versions pile up "
        f"(ALTER TABLE {name} RESET (autovacuum_enabled))"
        for name in tables
    ]
    return problems


def _analyze(conn: Connection, *, table: str) -> None:
    """``ANALYZE`` one of the store's tables, unless another session holds it."""
    # One of the schema's own table names, never input: safe to spell into the SQL.
    assert table in metadata.tables, table
    conn.execute(text(f"ANALYZE (SKIP_LOCKED) {table}"))


def _unattended_tables(conn: Connection) -> list[str]:
    """See :meth:`Store.analyze_unattended`: the tables due an analyze autovacuum will not run."""
    due = text(
        "SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
        " WHERE s.schemaname = current_schema() AND s.relname = ANY(:tables)"
        " AND (current_setting('autovacuum') = 'off' OR EXISTS ("
        " SELECT 1 FROM unnest(c.reloptions) AS o WHERE lower(o) = ANY(:off)))"
        " AND s.n_mod_since_analyze > current_setting('autovacuum_analyze_threshold')::float8"
        " + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(c.reltuples, 0)"
        " ORDER BY s.relname"
    )
    params = {"tables": sorted(metadata.tables), "off": [f"autovacuum_enabled={v}" for v in _OFF]}
    return [str(name) for name in conn.execute(due, params).scalars()]


__all__ = ["MAX_PAGE_SIZE", "DuplicateRequest", "JsonObject", "Store"]
