"""The provider's SQL, written once against SQLAlchemy's synchronous Connection.

Every public method here is one unit of work inside one transaction. The
provider runs it inline or on a SQLite thread, or in one greenlet per
transaction over asyncpg on PostgreSQL (see ``storage/_engine.py``).
Nothing here interprets agent data: write sets are applied mechanically,
guarded by scope, version/status/message-count CAS and lease fencing.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from functools import partial
from operator import attrgetter
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    ColumnElement,
    Connection,
    DateTime,
    Float,
    Integer,
    Row,
    Table,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql

from storage._direct import DirectStatement, direct_execute
from storage._json import JsonValue
from storage._pages import decode_position_cursor, decode_time_id_cursor, encode_page_token
from storage._records import (
    NOW,
    PROMOTE_NEXT,
    SEQ_BLOCK,
    UNSET,
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
    RunUpdate,
    ThreadRecord,
    WriteSet,
)
from storage._rows import (
    aware,
    event_record,
    fence,
    message_record,
    page_limit,
    pending_record,
    required,
    run_record,
    thread_record,
    view_conditions,
)
from storage._schema import (
    QUOTA_RUN_STATUSES,
    idempotency_keys,
    messages,
    pending_actions,
    run_events,
    runs,
    threads,
)
from storage.errors import ActiveRunLimit, LeaseLost, NotFound, StateConflict, VersionConflict

ACTIVE_RUN_STATUSES = ("queued", "running")


def _one_of(column: ColumnElement[Any], values: Sequence[str]) -> ColumnElement[bool]:
    """``column IN ('a', 'b')`` over the runtime's own status names, written into the SQL.

    A list bound as one expanding parameter is spliced into the statement's
    text at every execution (SQLAlchemy's post-compile step), on statements
    every run executes; these lists are constants.
    """
    assert all(re.fullmatch(r"[a-z_]+", v) for v in values), values
    return column.in_([literal_column(f"'{v}'") for v in values])


def _status_guard(column: ColumnElement[Any], count: int) -> ColumnElement[bool]:
    """``column IN (:p_status_0, ...)``: ``count`` plain parameters (see :func:`_status_params`).

    The guard's size is part of the statement's shape, so no execution needs
    an expanding parameter spliced into its text.
    """
    return column.in_([bindparam(f"p_status_{i}") for i in range(count)])


def _status_params(statuses: Sequence[str], params: dict[str, Any]) -> int:
    """Bind ``statuses`` for :func:`_status_guard`; their count, for the statement's shape."""
    for i, status in enumerate(statuses):
        params[f"p_status_{i}"] = status
    return len(statuses)


_RUN_FIELDS = (
    "status",
    "outcome",
    "reason",
    "operation",
    "input",
    "started_at",
    "execution_started_at",
    "metadata",
    "private_metadata",
    "usage",
    "step_count",
    "error",
    "hook_failures",
    "last_seq",
    "reserved_seq",
    "ended_at",
    "cancel_requested_at",
)


#: Notifications sent by one statement at most.
_NOTIFY_BATCH = 8


def _notify_columns(n: int) -> list[Any]:
    """``pg_notify(:p_c0, :p_p0), ...``: ``n`` notifications as columns of a statement."""
    return [
        func.pg_notify(bindparam(f"p_c{i}"), bindparam(f"p_p{i}")).label(f"notified_{i}")
        for i in range(n)
    ]


def _notify_stmt(n: int) -> Any:
    """``SELECT pg_notify(:p_c0, :p_p0), ...`` for ``n`` notifications."""
    return select(*_notify_columns(n))


def _notify_params(notes: Sequence[tuple[str, str]], params: dict[str, Any]) -> None:
    """Bind ``notes`` for :func:`_notify_columns`."""
    for i, (channel, payload) in enumerate(notes):
        params[f"p_c{i}"] = channel
        params[f"p_p{i}"] = payload


def sqlite_timestamp(value: datetime) -> str:
    """A datetime as SQLAlchemy's SQLite ``DATETIME`` stores it (``YYYY-MM-DD HH:MM:SS.ffffff``).

    Its fields as given (an offset is dropped, not applied), as SQLAlchemy
    does; ``isoformat`` builds the same text at a fraction of the cost.
    """
    return value.isoformat(" ", "microseconds")[:26]


#: Rows of one table that :func:`insert_together` binds value by value; more go as arrays.
_VALUES_ROWS = 2
#: Rows of one table that :func:`insert_together` sends with other tables' rows. Each
#: element of an array costs a Python check or two in asyncpg (~1.5 us a row here),
#: so past this, a statement of its own (a round trip, ~150 us) costs less.
_FUSED_ROWS = 64


class _DriverInsert:
    """An INSERT of whole rows into one table, straight to the driver.

    Every run logs a row per event, and every Send inserts a run and a
    message and every step a message: through Core, each row went through a
    parameter dict, the compiled-statement cache and the columns' bind
    processors. The values written are the ones Core writes: JSON as
    ``json.dumps`` text (``None`` as JSON ``null``, as Core stores it in a
    JSON column), and on SQLite timestamps as SQLAlchemy's text.

    On PostgreSQL the inserts of one commit can travel as one statement
    (:func:`insert_together`), each table's rows as a ``VALUES`` list
    (:meth:`values`) or, past :data:`_VALUES_ROWS` rows, as one array per
    column (:meth:`unnest`), whose text does not depend on the number of rows.
    """

    def __init__(self, table: Table, names: Sequence[str], postgres: bool) -> None:
        self.table = table.name
        self.postgres = postgres
        self.names = tuple(names)
        columns = [table.c[name] for name in self.names]
        self.encoders: tuple[Callable[[Any], Any] | None, ...] = tuple(
            json.dumps
            if isinstance(c.type, JSON)
            else _sqlite_time
            if isinstance(c.type, DateTime) and not postgres
            else None
            for c in columns
        )
        marks = [f"${i}" for i in range(1, len(columns) + 1)] if postgres else ["?"] * len(columns)
        self.sql = f"INSERT INTO {table.name} ({', '.join(self.names)}) VALUES ({', '.join(marks)})"
        # JSON travels as the text Core writes and is cast by the statement (an
        # array of the driver's JSON codec would encode it again).
        dialect = postgresql.asyncpg.dialect()  # type: ignore[no-untyped-call]
        self._array_types = tuple(
            "TEXT[]" if isinstance(c.type, JSON) else f"{c.type.compile(dialect=dialect)}[]"
            for c in columns
        )
        self._selected = tuple(
            f"{name}::{c.type.compile(dialect=dialect)}" if isinstance(c.type, JSON) else name
            for name, c in zip(self.names, columns, strict=True)
        )

    @classmethod
    def of(cls, table: Table, record: type, postgres: bool) -> _DriverInsert:
        """The insert of ``record``'s fields that are columns of ``table``."""
        return cls(table, [f.name for f in fields(record) if f.name in table.c], postgres)

    def encode(self, records: Sequence[Any]) -> list[tuple[Any, ...]]:
        """``records`` (objects with an attribute per column written) as driver rows."""
        return [
            tuple(
                value if encode is None else encode(value)
                for encode, value in zip(
                    self.encoders, attrgetter(*self.names)(record), strict=True
                )
            )
            for record in records
        ]

    def rows(self, conn: Connection, rows: list[tuple[Any, ...]]) -> None:
        """Insert ``rows``: values in column order, already as the driver takes them."""
        # Straight to the driver (see storage._direct): nothing here needs Core's execution.
        if len(rows) > 1 or not self.postgres:
            direct_execute(conn, self.sql, rows, many=True)
        else:
            direct_execute(conn, self.sql, rows[0])

    def values(self, count: int, first: int) -> str:
        """PostgreSQL: the insert of ``count`` rows, bound from ``$first`` on."""
        width = len(self.names)
        rows = ", ".join(
            "(" + ", ".join(f"${first + row * width + i}" for i in range(width)) + ")"
            for row in range(count)
        )
        return f"INSERT INTO {self.table} ({', '.join(self.names)}) VALUES {rows}"

    def unnest(self, first: int) -> str:
        """PostgreSQL: the insert of one array per column, bound from ``$first`` on."""
        arrays = ", ".join(f"${first + i}::{array}" for i, array in enumerate(self._array_types))
        names = ", ".join(self.names)
        return (
            f"INSERT INTO {self.table} ({names}) "
            f"SELECT {', '.join(self._selected)} FROM unnest({arrays}) AS u({names})"
        )


def insert_together(
    conn: Connection,
    inserts: Sequence[tuple[_DriverInsert, list[tuple[Any, ...]]]],
    cache: dict[Hashable, Any],
) -> None:
    """Insert rows into several tables in one statement on PostgreSQL.

    A commit inserts into up to three tables (a Send: a run and a message; a
    step: its messages and its events), and on PostgreSQL each statement is
    a round trip. The inserts go as data-modifying ``WITH`` clauses of one
    statement, a table's rows as a ``VALUES`` list or, past
    :data:`_VALUES_ROWS` rows, as one array per column, so the statement's
    text depends only on which tables it writes and how many rows up to that
    (``cache`` keeps one per combination). PostgreSQL checks foreign keys at
    the end of the statement, so an event may name a run inserted beside it.
    A table with more than :data:`_FUSED_ROWS` rows goes alone, in its place
    in the order, as do one table's rows and any rows on SQLite (where a
    statement is no round trip).
    """
    present = [(target, rows) for target, rows in inserts if rows]
    if not present:
        return
    if not present[0][0].postgres:
        for target, rows in present:
            target.rows(conn, rows)
        return
    group: list[tuple[_DriverInsert, list[tuple[Any, ...]]]] = []
    for target, rows in present:
        if len(rows) <= _FUSED_ROWS:
            group.append((target, rows))
            continue
        _insert_group(conn, group, cache)
        group = []
        target.rows(conn, rows)
    _insert_group(conn, group, cache)


def _insert_group(
    conn: Connection,
    group: list[tuple[_DriverInsert, list[tuple[Any, ...]]]],
    cache: dict[Hashable, Any],
) -> None:
    """PostgreSQL: the inserts of ``group`` as one statement (see :func:`insert_together`)."""
    if len(group) <= 1:
        for target, rows in group:
            target.rows(conn, rows)
        return
    # Up to _VALUES_ROWS rows go as a VALUES list: asyncpg checks every element
    # of an array parameter against collections.abc in Python, which cost more
    # than the array saved for a run's or a message's one row.
    key = (
        "insert_together",
        *((target.table, len(rows) if len(rows) <= _VALUES_ROWS else 0) for target, rows in group),
    )
    sql = cache.get(key)
    if sql is None:
        parts: list[str] = []
        first = 1
        for target, rows in group:
            if len(rows) <= _VALUES_ROWS:
                parts.append(target.values(len(rows), first))
                first += len(target.names) * len(rows)
            else:
                parts.append(target.unnest(first))
                first += len(target.names)
        ctes = ", ".join(f"w{i} AS ({part})" for i, part in enumerate(parts[:-1]))
        sql = cache[key] = f"WITH {ctes} {parts[-1]}"
    params: list[Any] = []
    for _, rows in group:
        if len(rows) <= _VALUES_ROWS:
            for row in rows:
                params.extend(row)
        else:
            params.extend(zip(*rows, strict=True))
    direct_execute(conn, sql, tuple(params))


def _sqlite_time(value: datetime | None) -> str | None:
    return None if value is None else sqlite_timestamp(value)


class Sql:
    """The statements of one dialect."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.postgres = dialect == "postgresql"
        self._cache: dict[Hashable, Any] = {}
        self._direct: dict[int, tuple[Any, DirectStatement | None]] = {}
        self._insert_run_rows = _DriverInsert.of(runs, RunRecord, self.postgres)
        self._insert_message_rows = _DriverInsert.of(messages, MessageRecord, self.postgres)
        self._insert_event_rows = _DriverInsert(
            run_events, ("run_id", "seq", "body", "kind", "created_at"), self.postgres
        )
        #: How long a stored request result answers replays (None: forever).
        self.idempotency_ttl: timedelta | None = None

    def _stmt(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """A statement built once per shape: building costs more than executing it here."""
        stmt = self._cache.get(key)
        if stmt is None:
            stmt = self._cache[key] = build()
        return stmt

    def _execute(self, conn: Connection, stmt: Any, params: Mapping[str, Any]) -> Any:
        """Execute ``stmt``, one of :meth:`_stmt`'s, with ``params``.

        It goes straight to the driver, compiled once (see :mod:`storage._direct`);
        its result reads as Core's does.
        """
        # Keyed by identity: every statement here lives in _cache for good, and
        # the entry holds it, so its id is never reused by another.
        entry = self._direct.get(id(stmt))
        if entry is None:
            entry = self._direct[id(stmt)] = (stmt, DirectStatement.compile(stmt, conn.dialect))
        direct = entry[1]
        return conn.execute(stmt, params) if direct is None else direct.execute(conn, params)

    # ---- helpers -----------------------------------------------------------

    def now(self, conn: Connection) -> datetime:
        """The provider clock: ``now()`` on PostgreSQL (never the app clock there).

        A transaction that may have waited for a lock reads the time of a
        statement after the wait instead (see :meth:`_check_active_runs`): a
        run started after the wait must not seem to start before what it
        waited for ended.
        """
        if self.postgres:
            stmt = self._stmt("now", lambda: select(func.now()))
            return required(self._execute(conn, stmt, {}).scalar_one())
        return datetime.now(UTC)

    def _lock(self, stmt: Any) -> Any:
        return stmt.with_for_update() if self.postgres else stmt

    def _position_of(self, conn: Connection, thread_id: str, message_id: str) -> int:
        stmt = self._stmt(
            "position_of",
            lambda: select(messages.c.position).where(
                messages.c.thread_id == bindparam("p_thread"), messages.c.id == bindparam("p_id")
            ),
        )
        pos = self._execute(conn, stmt, {"p_thread": thread_id, "p_id": message_id}).scalar()
        if pos is None:
            raise NotFound("message", message_id)
        return int(pos)

    def _require_thread(self, conn: Connection, scope: str, thread_id: str) -> None:
        stmt = self._stmt(
            "require_thread",
            lambda: select(threads.c.id).where(
                threads.c.id == bindparam("p_id"), threads.c.scope == bindparam("p_scope")
            ),
        )
        found = self._execute(conn, stmt, {"p_id": thread_id, "p_scope": scope}).first()
        if found is None:
            raise NotFound("thread", thread_id)

    # ---- reads -------------------------------------------------------------

    def get_thread(self, conn: Connection, scope: str, thread_id: str) -> ThreadRecord | None:
        """A thread of ``scope``."""
        row = self._execute(
            conn, self._thread_stmt(), {"p_id": thread_id, "p_scope": scope}
        ).first()
        return thread_record(row) if row else None

    def _thread_stmt(self) -> Any:
        return self._stmt(
            "get_thread",
            lambda: select(threads).where(
                threads.c.id == bindparam("p_id"), threads.c.scope == bindparam("p_scope")
            ),
        )

    def list_threads(
        self, conn: Connection, scope: str, limit: int, page_token: str
    ) -> Page[ThreadRecord]:
        """The scope's threads, newest first."""
        query: dict[str, JsonValue] = {"op": "threads", "scope": scope}
        stmt = select(threads).where(threads.c.scope == scope)
        if page_token:
            created, after_id = decode_time_id_cursor(page_token, query)
            stmt = stmt.where(
                or_(
                    threads.c.created_at < created,
                    and_(threads.c.created_at == created, threads.c.id < after_id),
                )
            )
        limit = page_limit(limit)
        stmt = stmt.order_by(threads.c.created_at.desc(), threads.c.id.desc()).limit(limit + 1)
        rows = [thread_record(r) for r in conn.execute(stmt).all()]
        token = ""
        if len(rows) > limit:
            rows = rows[:limit]
            token = encode_page_token(query, [rows[-1].created_at.isoformat(), rows[-1].id])
        return Page(rows, token)

    def list_messages(
        self,
        conn: Connection,
        scope: str,
        thread_id: str,
        *,
        view: str,
        order: str,
        after_message_id: str | None,
        before_message_id: str | None,
        through_position: int | None,
        limit: int,
        page_token: str,
    ) -> Page[MessageRecord]:
        """A page of messages by view, order and exclusive id bounds, capped at an anchor."""
        if order not in ("asc", "desc"):
            raise ValueError(f"unknown order {order!r}")
        query: dict[str, JsonValue] = {
            "op": "messages",
            "thread": thread_id,
            "view": view,
            "order": order,
            "after": after_message_id,
            "before": before_message_id,
            "through": through_position,
        }
        cursor = decode_position_cursor(page_token, query)
        limit = page_limit(limit)
        self._require_thread(conn, scope, thread_id)
        conds: list[ColumnElement[bool]] = [messages.c.thread_id == thread_id]
        conds.extend(view_conditions(view))
        if after_message_id:
            conds.append(messages.c.position > self._position_of(conn, thread_id, after_message_id))
        if before_message_id:
            conds.append(
                messages.c.position < self._position_of(conn, thread_id, before_message_id)
            )
        if through_position is not None:
            conds.append(messages.c.position <= through_position)
        if cursor is not None:
            conds.append(
                messages.c.position > cursor if order == "asc" else messages.c.position < cursor
            )
        col = messages.c.position
        stmt = (
            select(messages)
            .where(*conds)
            .order_by(col.asc() if order == "asc" else col.desc())
            .limit(limit + 1)
        )
        rows = [message_record(r) for r in conn.execute(stmt).all()]
        token = ""
        if len(rows) > limit:
            rows = rows[:limit]
            token = encode_page_token(query, rows[-1].position)
        return Page(rows, token)

    def context(
        self, conn: Connection, scope: str, thread_id: str, view: str, from_position: int = 0
    ) -> tuple[ThreadRecord, list[MessageRecord]]:
        """The thread head and the messages of ``view`` below it, read consistently.

        ``from_position`` skips messages a caller already holds (valid while
        the head's ``history_epoch`` is unchanged).
        """
        row = self._execute(
            conn, self._thread_stmt(), {"p_id": thread_id, "p_scope": scope}
        ).first()
        if row is None:
            raise NotFound("thread", thread_id)
        head = thread_record(row)
        stmt = self._stmt(
            ("context", view),
            lambda: (
                select(messages)
                .where(
                    messages.c.thread_id == bindparam("p_thread"),
                    messages.c.position >= bindparam("p_from"),
                    messages.c.position < bindparam("p_count"),
                    *view_conditions(view),
                )
                .order_by(messages.c.position)
            ),
        )
        params = {"p_thread": thread_id, "p_count": head.message_count, "p_from": from_position}
        return head, [message_record(r) for r in self._execute(conn, stmt, params).all()]

    def get_messages(
        self, conn: Connection, scope: str, thread_id: str, message_ids: Sequence[str]
    ) -> list[MessageRecord]:
        """The named messages of the thread that exist, chronologically."""
        self._require_thread(conn, scope, thread_id)
        stmt = self._stmt(
            "get_messages",
            lambda: (
                select(messages)
                .where(
                    messages.c.thread_id == bindparam("p_thread"),
                    messages.c.id.in_(bindparam("p_ids", expanding=True)),
                )
                .order_by(messages.c.position)
            ),
        )
        params = {"p_thread": thread_id, "p_ids": list(message_ids)}
        return [message_record(r) for r in self._execute(conn, stmt, params).all()]

    def get_run(self, conn: Connection, scope: str, run_id: str) -> RunRecord | None:
        """A run of ``scope``."""
        stmt = self._stmt(
            "get_run",
            lambda: select(runs).where(
                runs.c.id == bindparam("p_id"), runs.c.scope == bindparam("p_scope")
            ),
        )
        row = self._execute(conn, stmt, {"p_id": run_id, "p_scope": scope}).first()
        return run_record(row) if row else None

    def list_runs(
        self, conn: Connection, scope: str, thread_id: str, limit: int, page_token: str
    ) -> Page[RunRecord]:
        """The thread's runs, newest first."""
        query: dict[str, JsonValue] = {"op": "runs", "thread": thread_id}
        cursor = decode_position_cursor(page_token, query)
        limit = page_limit(limit)
        self._require_thread(conn, scope, thread_id)
        stmt = select(runs).where(runs.c.thread_id == thread_id, runs.c.scope == scope)
        if cursor is not None:
            stmt = stmt.where(runs.c.thread_seq < cursor)
        stmt = stmt.order_by(runs.c.thread_seq.desc()).limit(limit + 1)
        rows = [run_record(r) for r in conn.execute(stmt).all()]
        token = ""
        if len(rows) > limit:
            rows = rows[:limit]
            token = encode_page_token(query, rows[-1].thread_seq)
        return Page(rows, token)

    def list_pending_actions(
        self, conn: Connection, scope: str, run_id: str, status: str | None
    ) -> list[PendingActionRecord]:
        """The run's pending actions in creation order."""
        stmt = (
            select(pending_actions)
            .join(runs, runs.c.id == pending_actions.c.run_id)
            .where(pending_actions.c.run_id == run_id, runs.c.scope == scope)
        )
        if status is not None:
            stmt = stmt.where(pending_actions.c.status == status)
        stmt = stmt.order_by(pending_actions.c.created_at, pending_actions.c.id)
        return [pending_record(r) for r in conn.execute(stmt).all()]

    def read_events(
        self, conn: Connection, scope: str, run_id: str, after_seq: int, limit: int
    ) -> list[EventRecord]:
        """Event-log entries with ``seq > after_seq``, in order."""
        stmt = self._stmt(
            "read_events",
            lambda: (
                select(run_events)
                .join(runs, runs.c.id == run_events.c.run_id)
                .where(
                    run_events.c.run_id == bindparam("p_run"), runs.c.scope == bindparam("p_scope")
                )
                .where(run_events.c.seq > bindparam("p_after"))
                .order_by(run_events.c.seq)
                .limit(bindparam("p_limit"))
            ),
        )
        params = {"p_run": run_id, "p_scope": scope, "p_after": after_seq, "p_limit": limit}
        return [event_record(r) for r in self._execute(conn, stmt, params).all()]

    def get_idempotency(self, conn: Connection, scope: str, key: str) -> IdempotencyRecord | None:
        """The stored result of request ``key``."""
        stmt = self._stmt(
            "get_idempotency",
            lambda: select(idempotency_keys).where(
                idempotency_keys.c.scope == bindparam("p_scope"),
                idempotency_keys.c.key == bindparam("p_key"),
            ),
        )
        row = self._execute(conn, stmt, {"p_scope": scope, "p_key": key}).first()
        if row is None:
            return None
        m = row._mapping
        created = aware(m["created_at"])
        ttl = self.idempotency_ttl
        if ttl is not None and created is not None and created <= self.now(conn) - ttl:
            # Expired: the request counts as new (the sweeper deletes the row later).
            return None
        return IdempotencyRecord(key=m["key"], fingerprint=m["fingerprint"], result=m["result"])

    def runnable_count(self, conn: Connection) -> int:
        """Runs waiting for a runner."""
        now = self.now(conn)
        stmt = (
            select(func.count())
            .select_from(threads.join(runs, runs.c.id == threads.c.active_run_id))
            .where(
                _one_of(runs.c.status, ACTIVE_RUN_STATUSES),
                or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_at <= now),
            )
        )
        return int(conn.execute(stmt).scalar_one())

    # ---- write sets --------------------------------------------------------

    def commit(
        self,
        conn: Connection,
        ws: WriteSet,
        events_after: Callable[[CommitResult], list[NewEvent]] | None,
    ) -> CommitResult:
        """Apply one write set (the caller owns the transaction)."""
        # Lock order is run -> thread in every transaction that takes both (claims
        # and heartbeats touch runs only), so PostgreSQL never deadlocks on them.
        quota = ws.new_thread is None and bool(ws.insert_runs) and ws.max_active_runs > 0
        # The quota check comes first and reads the clock itself, after the scope's
        # lock it may wait for (one statement fewer than reading it separately).
        # On PostgreSQL a commit that updates runs takes the clock from the first
        # update (its now() is the transaction's, as SELECT now() would read).
        # A commit that updates only the thread root (and what hangs off it, as a
        # Send does) takes the clock from the root update, once it holds the row.
        run_updates = ws.update_runs
        notes: Sequence[tuple[str, str]] = ws.notify
        riding: Sequence[tuple[str, str]] = ()
        clock: datetime | None = None
        # Without run updates (a Send) the count is a guard of the root update,
        # which inserting runs always makes: one statement fewer.
        counted = quota and not run_updates
        if counted:
            if self.postgres:
                self._lock_scope(conn, ws.scope)
            else:
                clock = self.now(conn)
        elif quota:
            clock = self._check_active_runs(conn, ws)
        elif self.postgres and ws.new_thread is None and run_updates:
            clock = self._update_run(conn, ws.scope, run_updates[0], None)
            run_updates = run_updates[1:]
        elif not (self.postgres and ws.new_thread is None and (ws.touches_root or ws.insert_runs)):
            clock = self.now(conn)
        now = clock
        # On PostgreSQL the commit's inserts wait for its events, to go as one statement.
        inserts: list[tuple[_DriverInsert, list[tuple[Any, ...]]]] = []
        if ws.new_thread is not None:
            assert now is not None
            result = self._create_thread(conn, ws, now)
        else:
            for patch in run_updates:
                self._update_run(conn, ws.scope, patch, now)
            thread: ThreadRecord | None = None
            removed: list[str] = []
            appended: list[MessageRecord] = []
            inserted: list[RunRecord] = []
            if ws.touches_root or ws.insert_runs:
                truncate_at, removed = self._prepare_root(conn, ws)
                # On PostgreSQL the commit's notifications ride on the root update
                # (NOTIFY is delivered on commit either way): one round trip fewer.
                if self.postgres:
                    riding, notes = notes[:_NOTIFY_BATCH], notes[_NOTIFY_BATCH:]
                root = self._update_root(conn, ws, clock, truncate_at, riding, counted)
                if self.postgres:
                    # The update may have waited for the thread row (or run after a
                    # change it would have waited for): what it starts and appends
                    # is stamped no earlier than the row was locked.
                    m = root._mapping
                    now = m["updated_at"] if clock is None else max(clock, m["locked_at"])
                assert now is not None
                thread = thread_record(root)
                first_position = thread.message_count - len(ws.append_messages)
                first_seq = root._mapping["next_run_seq"] - len(ws.insert_runs)
                if truncate_at is not None:
                    conn.execute(
                        delete(messages).where(
                            messages.c.thread_id == ws.thread_id,
                            messages.c.position >= truncate_at,
                        )
                    )
                inserted = self._run_records(ws, first_seq, now)
                appended = self._message_records(ws, first_position, now)
                if inserted:
                    inserts.append((self._insert_run_rows, self._insert_run_rows.encode(inserted)))
                if appended:
                    inserts.append(
                        (self._insert_message_rows, self._insert_message_rows.encode(appended))
                    )
                if not self.postgres or ws.update_messages or ws.insert_pending:
                    # What follows may name these rows (a pending action its run).
                    insert_together(conn, inserts, self._cache)
                    inserts = []
                self._update_messages(conn, ws)
            # Set by now: without a clock read up front, the root update read it.
            assert now is not None
            self._write_pending(conn, ws, now)
            self._store_idempotency(conn, ws, now)
            result = CommitResult(
                thread=thread, messages=appended, removed_message_ids=removed, runs=inserted
            )
        # The write set's events and those describing its result go in one statement.
        events = ws.events
        if events_after is not None:
            events = [*events, *events_after(result)]
        if events:
            inserts.append((self._insert_event_rows, self._event_rows(events)))
        insert_together(conn, inserts, self._cache)
        if ws.notify_if_promoted and result.thread is not None and result.thread.active_run_id:
            notes = [*notes, *ws.notify_if_promoted]
        self.notify(conn, notes)
        return result

    def _check_active_runs(self, conn: Connection, ws: WriteSet) -> datetime:
        """Refuse new runs that would take the scope past ``ws.max_active_runs``.

        The count runs in the transaction that inserts the runs, so the quota
        holds across processes. SQLite's ``BEGIN IMMEDIATE`` already serialises
        every write. On PostgreSQL, READ COMMITTED would let concurrent
        transactions of one scope each count the same total and all insert, so
        a transaction-scoped advisory lock keyed by the scope serialises the
        run-creating commits of that scope (only those, only while a quota is
        set; other scopes and runner commits never wait on it). It is taken
        before any row lock, so it cannot join a lock cycle. The cost is that
        one scope's Sends commit one at a time: a commit is one short
        transaction, well above any per-scope Send rate worth allowing. The
        caller must not read the clock before this, since the lock may have been
        waited for: the count's own statement time is returned as the commit's
        clock (on PostgreSQL; the app clock on SQLite, as :meth:`now`).

        A write set that updates no run (a Send) counts in its root update's
        guard instead (see :meth:`_update_root`), one statement fewer.
        """
        if self.postgres:
            self._lock_scope(conn, ws.scope)
        # statement_timestamp(): this statement began after the lock was granted.
        clock = [func.statement_timestamp()] if self.postgres else []
        stmt = self._stmt("active_runs_in_scope", lambda: _active_runs(*clock))
        row = self._execute(conn, stmt, {"p_scope": ws.scope}).one()
        self._refuse_past_quota(ws, int(row[0]))
        return required(row[1]) if self.postgres else datetime.now(UTC)

    @staticmethod
    def _refuse_past_quota(ws: WriteSet, active: int) -> None:
        if active + len(ws.insert_runs) > ws.max_active_runs:
            raise ActiveRunLimit(ws.scope, ws.max_active_runs, active)

    def _lock_scope(self, conn: Connection, scope: str) -> None:
        """PostgreSQL: serialise the commits that create runs in ``scope`` (see the quota)."""
        self._execute(
            conn,
            self._stmt(
                "scope_quota_lock",
                lambda: select(func.pg_advisory_xact_lock(bindparam("p_key", type_=BigInteger))),
            ),
            {"p_key": _scope_lock_key(scope)},
        )

    def notify(self, conn: Connection, notes: Sequence[tuple[str, str]]) -> None:
        """NOTIFY is transactional: listeners hear it only when (and if) this commits."""
        if not self.postgres or not notes:
            return
        # Several per statement: each statement is a round trip of its own. Batches
        # of at most _NOTIFY_BATCH keep the number of cached statement shapes small.
        for start in range(0, len(notes), _NOTIFY_BATCH):
            batch = notes[start : start + _NOTIFY_BATCH]
            n = len(batch)
            stmt = self._stmt(("notify", n), partial(_notify_stmt, n))
            params: dict[str, Any] = {}
            _notify_params(batch, params)
            self._execute(conn, stmt, params)

    def _create_thread(self, conn: Connection, ws: WriteSet, now: datetime) -> CommitResult:
        nt = ws.new_thread
        assert nt is not None
        if ws.append_messages or ws.insert_runs or ws.update_runs or ws.events:
            raise ValueError("a write set that creates a thread carries nothing else")
        row = conn.execute(
            insert(threads)
            .values(
                id=nt.id,
                scope=ws.scope,
                agent=nt.agent,
                status="idle",
                version=1,
                metadata=nt.metadata,
                private_metadata=nt.private_metadata,
                active_run_id=None,
                next_position=0,
                next_run_seq=0,
                history_epoch=0,
                created_at=now,
                updated_at=now,
            )
            .returning(*threads.c)
        ).one()
        self._store_idempotency(conn, ws, now)
        return CommitResult(thread=thread_record(row), messages=[], removed_message_ids=[], runs=[])

    def _store_idempotency(self, conn: Connection, ws: WriteSet, now: datetime) -> None:
        if ws.idempotency is None:
            return
        rec = ws.idempotency
        if self.idempotency_ttl is not None:
            # An expired record of the key gives way to this new request.
            conn.execute(
                self._stmt(
                    "expired_key",
                    lambda: delete(idempotency_keys).where(
                        idempotency_keys.c.scope == bindparam("p_scope"),
                        idempotency_keys.c.key == bindparam("p_key"),
                        idempotency_keys.c.created_at
                        <= bindparam("p_cutoff", type_=idempotency_keys.c.created_at.type),
                    ),
                ),
                {"p_scope": ws.scope, "p_key": rec.key, "p_cutoff": now - self.idempotency_ttl},
            )
        conn.execute(
            insert(idempotency_keys).values(
                scope=ws.scope,
                key=rec.key,
                fingerprint=rec.fingerprint,
                result=rec.result,
                created_at=now,
                thread_id=ws.thread_id,
            )
        )

    def _prepare_root(self, conn: Connection, ws: WriteSet) -> tuple[int | None, list[str]]:
        """Checks that need the current root (private-metadata CAS, truncation).

        Most write sets skip this: their guards live in the root UPDATE itself.
        """
        if ws.expected_private_metadata is None and ws.truncate_from_message_id is None:
            return None, []
        row = conn.execute(
            self._lock(
                select(threads.c.private_metadata).where(
                    threads.c.id == ws.thread_id, threads.c.scope == ws.scope
                )
            )
        ).first()
        if row is None:
            raise NotFound("thread", ws.thread_id)
        if ws.expected_private_metadata is not None and row[0] != ws.expected_private_metadata:
            raise VersionConflict(ws.thread_id, ws.expected_private_metadata, row[0])
        if ws.truncate_from_message_id is None:
            return None, []
        position = self._position_of(conn, ws.thread_id, ws.truncate_from_message_id)
        gone = conn.execute(
            select(messages.c.id)
            .where(messages.c.thread_id == ws.thread_id, messages.c.position >= position)
            .order_by(messages.c.position)
        ).all()
        return position, [r[0] for r in gone]

    def _update_root(
        self,
        conn: Connection,
        ws: WriteSet,
        now: datetime | None,
        truncate_at: int | None,
        notes: Sequence[tuple[str, str]] = (),
        counted: bool = False,
    ) -> Row[Any]:
        """One guarded ``UPDATE ... RETURNING`` bumps the version and allocates positions.

        Without ``now`` (PostgreSQL only) the update stamps the thread with the
        time it locked the row, which it returns as ``locked_at`` in any case.
        ``notes`` (PostgreSQL only) are sent by the same statement; a refused
        guard sends none. ``counted``: the scope's active runs are a guard too
        (the write set's quota; on PostgreSQL the caller holds the scope's lock,
        and this statement's snapshot is taken after it was granted).
        """
        patch = ws.thread
        fields_set: tuple[str, ...] = ()
        promote = False
        params: dict[str, Any] = {
            "p_id": ws.thread_id,
            "p_scope": ws.scope,
            "p_n_append": len(ws.append_messages),
            "p_n_runs": len(ws.insert_runs),
            "p_rewrite": int(bool(ws.update_messages or truncate_at is not None)),
        }
        if patch is not None:
            for name in ("status", "metadata", "private_metadata", "active_run_id"):
                value = getattr(patch, name)
                if value is UNSET:
                    continue
                if value is PROMOTE_NEXT:
                    promote = True
                    continue
                fields_set += (name,)
                params[f"v_{name}"] = value
        if now is not None:
            params["v_updated_at"] = now
        _notify_params(notes, params)
        if truncate_at is not None:
            params["p_truncate"] = truncate_at
        if ws.expected_version is not None:
            params["p_version"] = ws.expected_version
        statuses = (
            None if ws.expected_status is None else _status_params(ws.expected_status, params)
        )
        if ws.expected_message_count is not None:
            params["p_count"] = ws.expected_message_count
        by_active = ws.expected_active_run is not UNSET
        if by_active:
            params["p_active"] = ws.expected_active_run
        if counted:
            params["p_quota"] = ws.max_active_runs - len(ws.insert_runs)
        shape = (
            "update_root",
            fields_set,
            promote,
            truncate_at is not None,
            ws.expected_version is not None,
            statuses,
            ws.expected_message_count is not None,
            now is None,
            len(notes),
            counted,
            by_active,
        )
        stmt = self._stmt(shape, lambda: self._build_update_root(shape, self.postgres))
        row = self._execute(conn, stmt, params).first()
        if row is not None:
            return self._promote_again(conn, ws, row) if promote and self.postgres else row
        if counted:
            active = self._stmt("active_runs", _active_runs)
            self._refuse_past_quota(
                ws, self._execute(conn, active, {"p_scope": ws.scope}).scalar_one()
            )
        current = self._execute(
            conn,
            self._stmt(
                "root_guards",
                lambda: select(threads.c.version, threads.c.status, threads.c.active_run_id).where(
                    threads.c.id == bindparam("p_id"), threads.c.scope == bindparam("p_scope")
                ),
            ),
            {"p_id": ws.thread_id, "p_scope": ws.scope},
        ).first()
        if current is None:
            raise NotFound("thread", ws.thread_id)
        if ws.expected_version is not None and current[0] != ws.expected_version:
            raise VersionConflict(ws.thread_id, ws.expected_version, current[0])
        if ws.expected_status is not None and current[1] not in ws.expected_status:
            raise VersionConflict(ws.thread_id, ws.expected_status, current[1])
        if by_active and current[2] != ws.expected_active_run:
            raise VersionConflict(ws.thread_id, ws.expected_active_run, current[2])
        raise VersionConflict(ws.thread_id, ws.expected_message_count, "a different message count")

    @staticmethod
    def _build_update_root(shape: tuple[Any, ...], postgres: bool) -> Any:
        (
            _,
            fields_set,
            promote,
            truncate,
            by_version,
            by_status,
            by_count,
            sql_clock,
            n_notes,
            by_quota,
            by_active,
        ) = shape
        base = bindparam("p_truncate", type_=Integer) if truncate else threads.c.next_position
        values: dict[str, Any] = {
            "version": threads.c.version + 1,
            "updated_at": (
                func.clock_timestamp()
                if sql_clock
                else bindparam("v_updated_at", type_=threads.c.updated_at.type)
            ),
            "next_position": base + bindparam("p_n_append", type_=Integer),
            "next_run_seq": threads.c.next_run_seq + bindparam("p_n_runs", type_=Integer),
            "history_epoch": threads.c.history_epoch + bindparam("p_rewrite", type_=Integer),
        }
        for name in fields_set:
            values[name] = bindparam(f"v_{name}", type_=threads.c[name].type)
        if promote:
            values.update(_promotion("status" not in fields_set))
        conds: list[ColumnElement[bool]] = [
            threads.c.id == bindparam("p_id"),
            threads.c.scope == bindparam("p_scope"),
        ]
        if by_version:
            conds.append(threads.c.version == bindparam("p_version"))
        if by_status is not None:
            conds.append(_status_guard(threads.c.status, by_status))
        if by_count:
            conds.append(threads.c.next_position == bindparam("p_count"))
        if by_quota:
            conds.append(_active_runs().scalar_subquery() <= bindparam("p_quota", type_=Integer))
        if by_active:
            conds.append(threads.c.active_run_id.is_not_distinct_from(bindparam("p_active")))
        # clock_timestamp() in RETURNING is read once the row is locked (now() is
        # the transaction's start, which may precede a change the update waited for).
        locked = [func.clock_timestamp().label("locked_at")] if postgres else []
        if promote and postgres:
            # The version this statement's snapshot shows: not the one it updated
            # when it waited for a commit that changed the thread (see _promote_again).
            seen = threads.alias("seen")
            locked.append(
                select(seen.c.version)
                .where(seen.c.id == threads.c.id)
                .scalar_subquery()
                .label("seen_version")
            )
        return (
            update(threads)
            .where(*conds)
            .values(**values)
            .returning(*threads.c, *locked, *_notify_columns(n_notes))
        )

    def _promote_again(self, conn: Connection, ws: WriteSet, root: Row[Any]) -> Row[Any]:
        """PostgreSQL: promote again after waiting for a commit that changed the thread.

        A statement reads the database as of its start. A root update that
        promotes the next queued run and waits for the thread's row, held by a
        commit that changes the thread's queue (a Send queueing a run, a queued
        run cancelled: each takes the row), then updates the row as that commit
        left it, but its search for the next queued run still reads as of
        before it: it would leave the thread idle with a new run queued behind
        nothing, or make a cancelled run active. The row tells: the version
        the statement saw is not the one it updated. A second statement, which
        sees every commit before it, promotes again. An update that did not
        wait costs no statement more.
        """
        if root._mapping["seen_version"] == root._mapping["version"] - 1:
            return root
        status = ws.thread is None or ws.thread.status is UNSET
        stmt = self._stmt(
            ("promote_again", status),
            lambda: (
                update(threads)
                .where(threads.c.id == bindparam("p_id"))
                .values(**_promotion(status))
                .returning(
                    *threads.c,
                    func.clock_timestamp().label("locked_at"),
                    threads.c.version.label("seen_version"),
                )
            ),
        )
        row: Row[Any] = self._execute(conn, stmt, {"p_id": ws.thread_id}).one()
        return row

    def _event_rows(self, events: Sequence[NewEvent]) -> list[tuple[Any, ...]]:
        """Events as rows of :attr:`_insert_event_rows`.

        The hottest insert: its rows are built here, where only SQLite's
        timestamp needs encoding, not column by column.
        """
        if self.postgres:
            return [(e.run_id, e.seq, e.body, e.kind, e.time) for e in events]
        return [(e.run_id, e.seq, e.body, e.kind, sqlite_timestamp(e.time)) for e in events]

    @staticmethod
    def _run_records(ws: WriteSet, first_seq: int, now: datetime) -> list[RunRecord]:
        return [
            RunRecord(
                id=new.id,
                thread_id=ws.thread_id,
                scope=ws.scope,
                thread_seq=first_seq + offset,
                status="running" if new.lease_owner else new.status,
                outcome=None,
                reason=None,
                initiator=new.initiator,
                operation=new.operation,
                input=new.input,
                started_at=now if new.lease_owner else None,
                execution_started_at=now if new.lease_owner else None,
                metadata=new.metadata,
                private_metadata=new.private_metadata,
                usage={},
                step_count=0,
                attempts=1 if new.lease_owner else 0,
                error=None,
                hook_failures=[],
                lease_owner=new.lease_owner,
                lease_expires_at=now + timedelta(seconds=new.lease_seconds)
                if new.lease_owner
                else None,
                lease_epoch=1 if new.lease_owner else 0,
                last_seq=0,
                # Taken at once by a runner: its first block of sequence numbers.
                reserved_seq=SEQ_BLOCK if new.lease_owner else 0,
                created_at=now,
                updated_at=now,
                ended_at=None,
                cancel_requested_at=None,
                trace_context=new.trace_context,
            )
            for offset, new in enumerate(ws.insert_runs)
        ]

    def _update_run(
        self, conn: Connection, scope: str, patch: RunUpdate, now: datetime | None
    ) -> datetime:
        """Apply one guarded run update; returns the clock it used.

        ``now=None`` (PostgreSQL only): the statement uses the database's
        ``now()`` wherever the clock goes and returns it, so the commit needs
        no separate statement to read it.
        """
        server_clock = now is None
        params: dict[str, Any] = {"p_id": patch.id, "p_scope": scope}
        if not server_clock:
            params["v_updated_at"] = now
            if patch.lease is not None or patch.expect_unleased:
                params["p_now"] = now
        fields_set: tuple[str, ...] = ()
        clock_fields: tuple[str, ...] = ()
        for name in _RUN_FIELDS:
            value = getattr(patch, name)
            if value is UNSET:
                continue
            if value is NOW and server_clock:
                clock_fields += (name,)
                continue
            fields_set += (name,)
            params[f"v_{name}"] = now if value is NOW else value
        if patch.lease is not None:
            params.update(p_owner=patch.lease.owner, p_epoch=patch.lease.epoch)
        statuses = (
            None if patch.expect_status is None else _status_params(patch.expect_status, params)
        )
        if patch.expect_last_seq is not None:
            params["p_last_seq"] = patch.expect_last_seq
        shape = (
            "update_run",
            fields_set,
            patch.release_lease,
            patch.lease is not None,
            statuses,
            patch.expect_last_seq is not None,
            patch.expect_unleased,
            server_clock,
            clock_fields,
        )
        stmt = self._stmt(shape, lambda: self._build_update_run(shape))
        if server_clock:
            row = self._execute(conn, stmt, params).first()
            if row is not None:
                return required(row[0])
        elif self._execute(conn, stmt, params).rowcount == 1:
            assert now is not None
            return now
        exists = self._execute(
            conn,
            self._stmt(
                "run_status",
                lambda: select(runs.c.status).where(
                    runs.c.id == bindparam("p_id"), runs.c.scope == bindparam("p_scope")
                ),
            ),
            {"p_id": patch.id, "p_scope": scope},
        ).first()
        if exists is None:
            raise NotFound("run", patch.id)
        if patch.lease is not None:
            raise LeaseLost(patch.id)
        raise StateConflict("run", patch.id, f"status is {exists[0]}")

    @staticmethod
    def _build_update_run(shape: tuple[Any, ...]) -> Any:
        _, fields_set, release, leased, by_status, by_last_seq, unleased, server, at_now = shape
        values: dict[str, Any] = {
            "updated_at": func.now()
            if server
            else bindparam("v_updated_at", type_=runs.c.updated_at.type)
        }
        for name in fields_set:
            values[name] = bindparam(f"v_{name}", type_=runs.c[name].type)
        for name in at_now:
            values[name] = func.now()
        if release:
            values["lease_owner"] = None
            values["lease_expires_at"] = None
        conds: list[ColumnElement[bool]] = [
            runs.c.id == bindparam("p_id"),
            runs.c.scope == bindparam("p_scope"),
        ]
        now = func.now() if server else bindparam("p_now", type_=runs.c.lease_expires_at.type)
        if leased:
            conds += [
                runs.c.lease_owner == bindparam("p_owner"),
                runs.c.lease_epoch == bindparam("p_epoch"),
                runs.c.lease_expires_at > now,
            ]
        if by_status is not None:
            conds.append(_status_guard(runs.c.status, by_status))
        if by_last_seq:
            conds.append(runs.c.last_seq == bindparam("p_last_seq"))
        if unleased:
            conds.append(or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_at <= now))
        stmt = update(runs).where(*conds).values(**values)
        return stmt.returning(func.now()) if server else stmt

    @staticmethod
    def _message_records(ws: WriteSet, first_position: int, now: datetime) -> list[MessageRecord]:
        return [
            MessageRecord(
                id=m.id,
                thread_id=ws.thread_id,
                position=first_position + offset,
                role=m.role,
                parts=m.parts,
                metadata=m.metadata,
                private_metadata=m.private_metadata,
                visible_transcript=m.visible_transcript,
                visible_context=m.visible_context,
                run_id=m.run_id,
                step_index=m.step_index,
                created_at=now,
            )
            for offset, m in enumerate(ws.append_messages)
        ]

    @staticmethod
    def _update_messages(conn: Connection, ws: WriteSet) -> None:
        for patch in ws.update_messages:
            values: dict[str, Any] = {}
            for name in (
                "parts",
                "metadata",
                "private_metadata",
                "visible_transcript",
                "visible_context",
            ):
                value = getattr(patch, name)
                if value is not UNSET:
                    values[name] = value
            if not values:
                continue
            result = conn.execute(
                update(messages)
                .where(messages.c.id == patch.id, messages.c.thread_id == ws.thread_id)
                .values(**values)
            )
            if result.rowcount != 1:
                raise NotFound("message", patch.id)

    @staticmethod
    def _write_pending(conn: Connection, ws: WriteSet, now: datetime) -> None:
        if ws.insert_pending:
            conn.execute(
                insert(pending_actions),
                [
                    {
                        "id": p.id,
                        "run_id": p.run_id,
                        "thread_id": ws.thread_id,
                        "kind": p.kind,
                        "status": "open",
                        "tool_call_id": p.tool_call_id,
                        "tool_name": p.tool_name,
                        "input": p.input,
                        "request": p.request,
                        "resolution": None,
                        "message_id": p.message_id,
                        "created_at": now,
                        "resolved_at": None,
                    }
                    for p in ws.insert_pending
                ],
            )
        for pp in ws.update_pending:
            result = conn.execute(
                update(pending_actions)
                .where(
                    pending_actions.c.id == pp.id,
                    pending_actions.c.thread_id == ws.thread_id,
                    pending_actions.c.status.in_(pp.expect_status),
                )
                .values(status=pp.status, resolution=pp.resolution, resolved_at=now)
            )
            if result.rowcount != 1:
                raise StateConflict("pending action", pp.id, "is not open")

    def broken_queues(self, conn: Connection, limit: int) -> list[tuple[str, str, str | None]]:
        """Threads whose queue no commit will move: (scope, thread id, active run id).

        Idle with a queued run (nothing promotes it), or running or waiting with
        an active run that ended (no runner takes it). No commit leaves either
        behind; promotions that raced a queue change before the fix of
        :meth:`_promote_again` did, on PostgreSQL.
        """
        active = runs.alias("active")
        idle = (
            select(threads.c.scope, threads.c.id, threads.c.active_run_id)
            .where(
                threads.c.status == "idle",
                select(runs.c.id)
                .where(runs.c.thread_id == threads.c.id, runs.c.status == "queued")
                .exists(),
            )
            .limit(limit)
        )
        ended = (
            select(threads.c.scope, threads.c.id, threads.c.active_run_id)
            .select_from(threads.join(active, active.c.id == threads.c.active_run_id))
            .where(
                _one_of(threads.c.status, ("running", "waiting")),
                active.c.status.not_in(QUOTA_RUN_STATUSES),
            )
            .limit(limit)
        )
        found = [tuple(r) for r in conn.execute(idle).all()]
        found += [tuple(r) for r in conn.execute(ended).all()]
        return found[:limit]

    def delete_thread(
        self, conn: Connection, scope: str, thread_id: str, expected_version: int | None
    ) -> None:
        """Delete an idle thread and everything in it."""
        row = conn.execute(
            self._lock(
                select(threads.c.version, threads.c.status).where(
                    threads.c.id == thread_id, threads.c.scope == scope
                )
            )
        ).first()
        if row is None:
            raise NotFound("thread", thread_id)
        if expected_version is not None and row[0] != expected_version:
            raise VersionConflict(thread_id, expected_version, row[0])
        if row[1] != "idle":
            raise StateConflict("thread", thread_id, f"is {row[1]}")
        # Messages, runs, pending actions and events go with it (ON DELETE CASCADE).
        conn.execute(delete(threads).where(threads.c.id == thread_id))
        conn.execute(delete(idempotency_keys).where(idempotency_keys.c.thread_id == thread_id))

    # ---- claims and leases -------------------------------------------------

    def claim_runs(
        self, conn: Connection, owner: str, lease_seconds: float, limit: int
    ) -> list[ClaimedRun]:
        """Take the leases of up to ``limit`` runnable runs, oldest first."""
        out: list[ClaimedRun] = []
        for _ in range(limit):
            claimed = self.claim_run(conn, owner, lease_seconds)
            if claimed is None:
                break
            out.append(claimed)
        return out

    def claim_run(self, conn: Connection, owner: str, lease_seconds: float) -> ClaimedRun | None:
        """Pick the oldest runnable run and take its lease in one statement."""
        now = self.now(conn)
        params: dict[str, Any] = {"p_now": now, "p_owner": owner}
        if self.postgres:
            params["p_lease"] = float(lease_seconds)
        else:
            params["p_expires"] = now + timedelta(seconds=lease_seconds)
        row = self._execute(conn, self._stmt("claim", self._build_claim), params).first()
        if row is None:
            return None
        run = run_record(row)
        expires = required(run.lease_expires_at)
        return ClaimedRun(run=run, lease=Lease(run.id, owner, run.lease_epoch, expires))

    def _build_claim(self) -> Any:
        now = bindparam("p_now", type_=runs.c.lease_expires_at.type)
        # The claim is stamped with its own statement's time on PostgreSQL, not the
        # transaction's: the transaction may have begun before the run it takes became
        # runnable (the thread's previous run ended and promoted it meanwhile), and a
        # run must never seem to start before the one it queued behind ended. SQLite
        # serialises its writers, so the time read at the start is the claim's.
        stamp: Any = now
        expires: Any = bindparam("p_expires", type_=runs.c.lease_expires_at.type)
        if self.postgres:
            stamp = func.statement_timestamp()
            lease = bindparam("p_lease", type_=Float)
            expires = stamp + func.make_interval(0, 0, 0, 0, 0, 0, lease)
        candidate = (
            select(runs.c.id)
            .select_from(threads.join(runs, runs.c.id == threads.c.active_run_id))
            .where(
                _one_of(runs.c.status, ACTIVE_RUN_STATUSES),
                or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_at <= now),
            )
            .order_by(runs.c.created_at, runs.c.id)
            .limit(1)
        )
        if self.postgres:
            candidate = candidate.with_for_update(of=runs, skip_locked=True)
        # One statement: pick and take the lease (no window between them).
        return (
            update(runs)
            .where(runs.c.id == candidate.scalar_subquery())
            .values(
                lease_owner=bindparam("p_owner"),
                lease_epoch=runs.c.lease_epoch + 1,
                lease_expires_at=expires,
                attempts=runs.c.attempts + 1,
                # A block above every number a previous execution may have published.
                reserved_seq=case(
                    (runs.c.reserved_seq > runs.c.last_seq, runs.c.reserved_seq),
                    else_=runs.c.last_seq,
                )
                + SEQ_BLOCK,
                status="running",
                started_at=func.coalesce(runs.c.started_at, stamp),
                execution_started_at=stamp,
                updated_at=stamp,
            )
            .returning(*runs.c)
        )

    def heartbeat(self, conn: Connection, lease: Lease, lease_seconds: float) -> Heartbeat:
        """Extend a held lease (and report a pending cancellation request)."""
        now = self.now(conn)
        expires = now + timedelta(seconds=lease_seconds)
        row = conn.execute(
            update(runs)
            .where(runs.c.id == lease.run_id, *fence(lease, now))
            .values(lease_expires_at=expires)
            .returning(runs.c.cancel_requested_at)
        ).first()
        if row is None:
            raise LeaseLost(lease.run_id)
        return Heartbeat(Lease(lease.run_id, lease.owner, lease.epoch, expires), row[0] is not None)

    def release(self, conn: Connection, lease: Lease) -> None:
        """Give a lease up early."""
        now = self.now(conn)
        conn.execute(
            update(runs)
            .where(runs.c.id == lease.run_id, *fence(lease, now))
            .values(lease_owner=None, lease_expires_at=None, updated_at=now)
        )


def _promotion(status: bool) -> dict[str, Any]:
    """The root's values that make the thread's next queued run active (idle if none).

    ``status``: set the thread's status too (running, or idle without a queued run).
    """
    next_queued = (
        select(runs.c.id)
        .where(runs.c.thread_id == threads.c.id, runs.c.status == "queued")
        .order_by(runs.c.thread_seq)
        .limit(1)
        .scalar_subquery()
    )
    values: dict[str, Any] = {"active_run_id": next_queued}
    if status:
        values["status"] = case((next_queued.is_(None), "idle"), else_="running")
    return values


def _active_runs(*also: Any) -> Any:
    """``SELECT count(*)`` of the runs of scope ``:p_scope`` that count against its quota."""
    return (
        select(func.count(), *also)
        .select_from(runs)
        .where(runs.c.scope == bindparam("p_scope"), _one_of(runs.c.status, QUOTA_RUN_STATUSES))
    )


def _scope_lock_key(scope: str) -> int:
    """A stable signed 64-bit advisory-lock key for a scope (the same in every process).

    Two scopes sharing a key only share the lock: never wrong, at worst slower.
    """
    digest = hashlib.blake2b(f"pai.scope_quota:{scope}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
