"""The storage provider: one implementation over SQLAlchemy Core for SQLite and PostgreSQL.

The provider applies write sets mechanically and enforces scope, strict
JSON, version compare-and-swap and lease fencing. It never invents agent
behaviour: every transition is computed by the runtime.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Row, and_, case, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from storage._engine import Engines, create_engines
from storage._json import JsonObject, JsonValue, check_strict_json
from storage._listen import Listener
from storage._pages import decode_page_token, encode_page_token
from storage._records import (
    NOW,
    PROMOTE_NEXT,
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
    RunPatch,
    RunRecord,
    ThreadRecord,
    WriteSet,
)
from storage._schema import idempotency_keys, messages, pending_actions, run_events, runs, threads
from storage.errors import (
    InvalidPageToken,
    LeaseLost,
    NotFound,
    StateConflict,
    VersionConflict,
)

MAX_PAGE_SIZE = 1000
ACTIVE_RUN_STATUSES = ("queued", "running")


class DuplicateRequest(StateConflict):
    """A write set carried an idempotency key that is already stored."""

    def __init__(self, key: str) -> None:
        super().__init__("request", key, "already committed")


def _aware(value: datetime | None) -> datetime | None:
    # SQLite hands back naive datetimes; everything stored is UTC.
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def _req(value: datetime | None) -> datetime:
    out = _aware(value)
    assert out is not None
    return out


def _thread(row: Row[Any]) -> ThreadRecord:
    m = row._mapping
    return ThreadRecord(
        id=m["id"],
        scope=m["scope"],
        agent=m["agent"],
        status=m["status"],
        version=m["version"],
        metadata=m["metadata"],
        private_metadata=m["private_metadata"],
        active_run_id=m["active_run_id"],
        message_count=m["next_position"],
        created_at=_req(m["created_at"]),
        updated_at=_req(m["updated_at"]),
    )


def _message(row: Row[Any]) -> MessageRecord:
    m = row._mapping
    return MessageRecord(
        id=m["id"],
        thread_id=m["thread_id"],
        position=m["position"],
        role=m["role"],
        parts=m["parts"],
        metadata=m["metadata"],
        private_metadata=m["private_metadata"],
        visible_transcript=m["visible_transcript"],
        visible_context=m["visible_context"],
        run_id=m["run_id"],
        step_index=m["step_index"],
        created_at=_req(m["created_at"]),
    )


def _run(row: Row[Any]) -> RunRecord:
    m = row._mapping
    return RunRecord(
        id=m["id"],
        thread_id=m["thread_id"],
        scope=m["scope"],
        thread_seq=m["thread_seq"],
        status=m["status"],
        outcome=m["outcome"],
        reason=m["reason"],
        initiator=m["initiator"],
        operation=m["operation"],
        input=m["input"],
        started_at=_aware(m["started_at"]),
        execution_started_at=_aware(m["execution_started_at"]),
        metadata=m["metadata"],
        private_metadata=m["private_metadata"],
        usage=m["usage"],
        step_count=m["step_count"],
        attempts=m["attempts"],
        error=m["error"],
        hook_failures=m["hook_failures"],
        lease_owner=m["lease_owner"],
        lease_expires_at=_aware(m["lease_expires_at"]),
        lease_epoch=m["lease_epoch"],
        last_seq=m["last_seq"],
        created_at=_req(m["created_at"]),
        updated_at=_req(m["updated_at"]),
        ended_at=_aware(m["ended_at"]),
        cancel_requested_at=_aware(m["cancel_requested_at"]),
    )


def _pending(row: Row[Any]) -> PendingActionRecord:
    m = row._mapping
    return PendingActionRecord(
        id=m["id"],
        run_id=m["run_id"],
        thread_id=m["thread_id"],
        kind=m["kind"],
        status=m["status"],
        tool_call_id=m["tool_call_id"],
        tool_name=m["tool_name"],
        input=m["input"],
        request=m["request"],
        resolution=m["resolution"],
        message_id=m["message_id"],
        created_at=_req(m["created_at"]),
        resolved_at=_aware(m["resolved_at"]),
    )


def _set(values: dict[str, Any], name: str, value: object, now: datetime) -> None:
    """Add ``name`` to an UPDATE's values unless it is UNSET; NOW means the provider clock."""
    if value is UNSET:
        return
    values[name] = now if value is NOW else value


def _check_json(ws: WriteSet) -> None:
    """Reject non-strict JSON anywhere in the write set, before any I/O."""

    def check(value: object, path: str) -> None:
        if value is not UNSET:
            check_strict_json(value, path=path)

    if ws.new_thread is not None:
        check(ws.new_thread.metadata, "thread.metadata")
        check(ws.new_thread.private_metadata, "thread.private_metadata")
    if ws.expected_private_metadata is not None:
        check(ws.expected_private_metadata, "expected_private_metadata")
    if ws.thread is not None:
        check(ws.thread.metadata, "thread.metadata")
        check(ws.thread.private_metadata, "thread.private_metadata")
    for i, m in enumerate(ws.append_messages):
        check(m.parts, f"messages[{i}].parts")
        check(m.metadata, f"messages[{i}].metadata")
        check(m.private_metadata, f"messages[{i}].private_metadata")
    for i, mp in enumerate(ws.update_messages):
        check(mp.parts, f"update_messages[{i}].parts")
        check(mp.metadata, f"update_messages[{i}].metadata")
        check(mp.private_metadata, f"update_messages[{i}].private_metadata")
    for i, r in enumerate(ws.insert_runs):
        check(r.input, f"runs[{i}].input")
        check(r.metadata, f"runs[{i}].metadata")
        check(r.private_metadata, f"runs[{i}].private_metadata")
    for i, rp in enumerate(ws.update_runs):
        for name in ("input", "metadata", "private_metadata", "usage", "error", "hook_failures"):
            check(getattr(rp, name), f"update_runs[{i}].{name}")
    for i, p in enumerate(ws.insert_pending):
        check(p.input, f"pending[{i}].input")
        check(p.request, f"pending[{i}].request")
    for i, pp in enumerate(ws.update_pending):
        check(pp.resolution, f"update_pending[{i}].resolution")
    for i, e in enumerate(ws.events):
        check(e.event, f"events[{i}]")
    if ws.idempotency is not None:
        check(ws.idempotency.result, "idempotency.result")


class Store:
    """A storage provider bound to one database (SQLite or PostgreSQL)."""

    def __init__(self, engines: Engines) -> None:
        self._engines = engines

    def channel(self, name: str) -> str:
        """The NOTIFY channel ``name`` of this store (namespaced by schema)."""
        return f"pai_{self._engines.schema or 'public'}_{name}"

    def listener(self, handlers: dict[str, Callable[[str], None]]) -> Listener | None:
        """A listener for ``{channel name: handler}`` (``None`` on SQLite, which polls)."""
        if self.dialect != "postgresql":
            return None
        url = self._engines.write.url.set(drivername="postgresql")
        settings = {"search_path": self._engines.schema} if self._engines.schema else {}
        return Listener(
            url.render_as_string(hide_password=False),
            {self.channel(name): handler for name, handler in handlers.items()},
            server_settings=settings,
        )

    @classmethod
    def open(cls, url: str, *, pool_size: int = 10, schema: str | None = None) -> Store:
        """Create a provider for ``url`` (no I/O happens until first use)."""
        return cls(create_engines(url, pool_size=pool_size, schema=schema))

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._engines.dialect

    @property
    def engines(self) -> Engines:
        """The underlying engines (migrations and notifications use them)."""
        return self._engines

    async def close(self) -> None:
        """Release every connection."""
        await self._engines.dispose()

    # ---- transactions ------------------------------------------------------

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        async with self._engines.write.connect() as conn, conn.begin():
            yield conn

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        async with self._engines.read.connect() as conn, conn.begin():
            yield conn

    async def _now(self, conn: AsyncConnection) -> datetime:
        """The provider clock: ``now()`` on PostgreSQL, never the app clock there."""
        if self.dialect == "postgresql":
            return _req((await conn.execute(select(func.now()))).scalar_one())
        return datetime.now(UTC)

    async def now(self) -> datetime:
        """The provider's current time."""
        async with self._read() as conn:
            return await self._now(conn)

    def _lock(self, stmt: Any) -> Any:
        return stmt.with_for_update() if self.dialect == "postgresql" else stmt

    # ---- reads -------------------------------------------------------------

    async def get_thread(self, scope: str, thread_id: str) -> ThreadRecord | None:
        """A thread of ``scope``; ``None`` when absent or in another scope."""
        async with self._read() as conn:
            row = (
                await conn.execute(
                    select(threads).where(threads.c.id == thread_id, threads.c.scope == scope)
                )
            ).first()
        return _thread(row) if row else None

    async def list_threads(
        self, scope: str, *, limit: int = 50, page_token: str = ""
    ) -> Page[ThreadRecord]:
        """The scope's threads, newest first."""
        query: dict[str, JsonValue] = {"op": "threads", "scope": scope}
        stmt = select(threads).where(threads.c.scope == scope)
        if page_token:
            cursor = decode_page_token(page_token, query)
            if not (isinstance(cursor, list) and len(cursor) == 2):
                raise InvalidPageToken("page token is malformed")
            created = datetime.fromisoformat(str(cursor[0]))
            stmt = stmt.where(
                or_(
                    threads.c.created_at < created,
                    and_(threads.c.created_at == created, threads.c.id < str(cursor[1])),
                )
            )
        limit = _limit(limit)
        stmt = stmt.order_by(threads.c.created_at.desc(), threads.c.id.desc()).limit(limit + 1)
        async with self._read() as conn:
            rows = [_thread(r) for r in (await conn.execute(stmt)).all()]
        token = ""
        if len(rows) > limit:
            rows = rows[:limit]
            last = rows[-1]
            token = encode_page_token(query, [last.created_at.isoformat(), last.id])
        return Page(rows, token)

    async def _position_of(self, conn: AsyncConnection, thread_id: str, message_id: str) -> int:
        pos = (
            await conn.execute(
                select(messages.c.position).where(
                    messages.c.thread_id == thread_id, messages.c.id == message_id
                )
            )
        ).scalar()
        if pos is None:
            raise NotFound("message", message_id)
        return int(pos)

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
        cursor = decode_page_token(page_token, query) if page_token else None
        if cursor is not None and not isinstance(cursor, int):
            raise InvalidPageToken("page token is malformed")
        limit = _limit(limit)
        async with self._read() as conn:
            await self._require_thread(conn, scope, thread_id)
            conds: list[ColumnElement[bool]] = [messages.c.thread_id == thread_id]
            conds.extend(_view_conditions(view))
            if after_message_id:
                conds.append(
                    messages.c.position > await self._position_of(conn, thread_id, after_message_id)
                )
            if before_message_id:
                conds.append(
                    messages.c.position
                    < await self._position_of(conn, thread_id, before_message_id)
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
            rows = [_message(r) for r in (await conn.execute(stmt)).all()]
        token = ""
        if len(rows) > limit:
            rows = rows[:limit]
            token = encode_page_token(query, rows[-1].position)
        return Page(rows, token)

    async def get_messages(
        self, scope: str, thread_id: str, message_ids: Sequence[str]
    ) -> list[MessageRecord]:
        """The named messages of the thread that exist, in chronological order."""
        if not message_ids:
            return []
        async with self._read() as conn:
            await self._require_thread(conn, scope, thread_id)
            stmt = (
                select(messages)
                .where(messages.c.thread_id == thread_id, messages.c.id.in_(list(message_ids)))
                .order_by(messages.c.position)
            )
            return [_message(r) for r in (await conn.execute(stmt)).all()]

    async def last_message(self, scope: str, thread_id: str) -> MessageRecord | None:
        """The newest message of the thread (any view)."""
        page = await self.list_messages(scope, thread_id, view="all", order="desc", limit=1)
        return page.items[0] if page.items else None

    async def _require_thread(self, conn: AsyncConnection, scope: str, thread_id: str) -> None:
        found = (
            await conn.execute(
                select(threads.c.id).where(threads.c.id == thread_id, threads.c.scope == scope)
            )
        ).first()
        if found is None:
            raise NotFound("thread", thread_id)

    async def get_run(self, scope: str, run_id: str) -> RunRecord | None:
        """A run of ``scope``; ``None`` when absent or in another scope."""
        async with self._read() as conn:
            row = (
                await conn.execute(select(runs).where(runs.c.id == run_id, runs.c.scope == scope))
            ).first()
        return _run(row) if row else None

    async def list_runs(
        self, scope: str, thread_id: str, *, limit: int = 50, page_token: str = ""
    ) -> Page[RunRecord]:
        """The thread's runs, newest first."""
        query: dict[str, JsonValue] = {"op": "runs", "thread": thread_id}
        cursor = decode_page_token(page_token, query) if page_token else None
        if cursor is not None and not isinstance(cursor, int):
            raise InvalidPageToken("page token is malformed")
        limit = _limit(limit)
        async with self._read() as conn:
            await self._require_thread(conn, scope, thread_id)
            stmt = select(runs).where(runs.c.thread_id == thread_id, runs.c.scope == scope)
            if cursor is not None:
                stmt = stmt.where(runs.c.thread_seq < cursor)
            stmt = stmt.order_by(runs.c.thread_seq.desc()).limit(limit + 1)
            rows = [_run(r) for r in (await conn.execute(stmt)).all()]
        token = ""
        if len(rows) > limit:
            rows = rows[:limit]
            token = encode_page_token(query, rows[-1].thread_seq)
        return Page(rows, token)

    async def list_pending_actions(
        self, scope: str, run_id: str, *, status: str | None = None
    ) -> list[PendingActionRecord]:
        """The run's pending actions in creation order."""
        async with self._read() as conn:
            stmt = (
                select(pending_actions)
                .join(runs, runs.c.id == pending_actions.c.run_id)
                .where(pending_actions.c.run_id == run_id, runs.c.scope == scope)
            )
            if status is not None:
                stmt = stmt.where(pending_actions.c.status == status)
            stmt = stmt.order_by(pending_actions.c.created_at, pending_actions.c.id)
            return [_pending(r) for r in (await conn.execute(stmt)).all()]

    async def read_events(
        self, scope: str, run_id: str, *, after_seq: int = 0, limit: int = 500
    ) -> list[EventRecord]:
        """Event-log entries of the run with ``seq > after_seq``, in order."""
        async with self._read() as conn:
            stmt = (
                select(run_events)
                .join(runs, runs.c.id == run_events.c.run_id)
                .where(run_events.c.run_id == run_id, runs.c.scope == scope)
                .where(run_events.c.seq > after_seq)
                .order_by(run_events.c.seq)
                .limit(limit)
            )
            rows = (await conn.execute(stmt)).all()
        return [
            EventRecord(
                run_id=r._mapping["run_id"],
                seq=r._mapping["seq"],
                event=r._mapping["event"],
                created_at=_req(r._mapping["created_at"]),
            )
            for r in rows
        ]

    async def get_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        """The stored result of request ``key``, if it was committed."""
        async with self._read() as conn:
            row = (
                await conn.execute(
                    select(idempotency_keys).where(
                        idempotency_keys.c.scope == scope, idempotency_keys.c.key == key
                    )
                )
            ).first()
        if row is None:
            return None
        m = row._mapping
        return IdempotencyRecord(key=m["key"], fingerprint=m["fingerprint"], result=m["result"])

    # ---- write sets --------------------------------------------------------

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
            VersionConflict: the root compare-and-swap failed.
            LeaseLost: a fenced run update found the lease gone.
            StateConflict: a run or pending action is not in the expected state.
            DuplicateRequest: the idempotency key is already stored.
        """
        _check_json(ws)
        try:
            async with self._write() as conn:
                result = await self._apply(conn, ws)
                if events_after is not None:
                    extra = events_after(result)
                    for i, e in enumerate(extra):
                        check_strict_json(e.event, path=f"events_after[{i}]")
                    await self._insert_events(conn, extra)
                return result
        except IntegrityError as e:
            if ws.idempotency is not None and "idempotency" in str(e.orig).lower():
                raise DuplicateRequest(ws.idempotency.key) from e
            raise

    async def _apply(self, conn: AsyncConnection, ws: WriteSet) -> CommitResult:
        # Lock order is run -> thread in every transaction that takes both (claims
        # and heartbeats touch runs only), so PostgreSQL never deadlocks on them.
        now = await self._now(conn)
        if ws.new_thread is not None:
            return await self._create_thread(conn, ws, now)
        for patch in ws.update_runs:
            await self._update_run(conn, ws.scope, patch, now)
        thread: ThreadRecord | None = None
        removed: list[str] = []
        appended: list[MessageRecord] = []
        inserted_runs: list[RunRecord] = []
        if ws.touches_root or ws.insert_runs:
            truncate_at, removed = await self._prepare_root(conn, ws)
            root = await self._update_root(conn, ws, now, truncate_at)
            thread = _thread(root)
            first_position = thread.message_count - len(ws.append_messages)
            first_seq = root._mapping["next_run_seq"] - len(ws.insert_runs)
            if truncate_at is not None:
                await conn.execute(
                    delete(messages).where(
                        messages.c.thread_id == ws.thread_id, messages.c.position >= truncate_at
                    )
                )
            inserted_runs = await self._insert_runs(conn, ws, first_seq, now)
            appended = await self._append(conn, ws, first_position, now)
            await self._update_messages(conn, ws)
        await self._write_pending(conn, ws, now)
        await self._insert_events(conn, ws.events, now)
        await self._store_idempotency(conn, ws, now)
        await self._notify(conn, ws.notify)
        return CommitResult(
            thread=thread, messages=appended, removed_message_ids=removed, runs=inserted_runs
        )

    async def _create_thread(
        self, conn: AsyncConnection, ws: WriteSet, now: datetime
    ) -> CommitResult:
        nt = ws.new_thread
        assert nt is not None
        if ws.append_messages or ws.insert_runs or ws.update_runs or ws.events:
            raise ValueError("a write set that creates a thread carries nothing else")
        row = (
            await conn.execute(
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
                    created_at=now,
                    updated_at=now,
                )
                .returning(*threads.c)
            )
        ).one()
        await self._store_idempotency(conn, ws, now)
        return CommitResult(thread=_thread(row), messages=[], removed_message_ids=[], runs=[])

    async def _notify(self, conn: AsyncConnection, notes: Sequence[tuple[str, str]]) -> None:
        # NOTIFY is transactional: listeners hear it only if (and when) this commits.
        if self.dialect != "postgresql":
            return
        for channel, payload in notes:
            await conn.execute(select(func.pg_notify(channel, payload)))

    async def notify(self, notes: Sequence[tuple[str, str]]) -> None:
        """Send notifications outside a write set (PostgreSQL only)."""
        if self.dialect != "postgresql" or not notes:
            return
        async with self._write() as conn:
            await self._notify(conn, notes)

    async def _store_idempotency(self, conn: AsyncConnection, ws: WriteSet, now: datetime) -> None:
        if ws.idempotency is None:
            return
        rec = ws.idempotency
        await conn.execute(
            insert(idempotency_keys).values(
                scope=ws.scope,
                key=rec.key,
                fingerprint=rec.fingerprint,
                result=rec.result,
                created_at=now,
            )
        )

    async def _prepare_root(
        self, conn: AsyncConnection, ws: WriteSet
    ) -> tuple[int | None, list[str]]:
        """Checks that need the current root (private-metadata CAS, truncation).

        Most write sets skip this: their guards live in the root UPDATE itself.
        """
        if ws.expected_private_metadata is None and ws.truncate_from_message_id is None:
            return None, []
        row = (
            await conn.execute(
                self._lock(
                    select(threads.c.private_metadata).where(
                        threads.c.id == ws.thread_id, threads.c.scope == ws.scope
                    )
                )
            )
        ).first()
        if row is None:
            raise NotFound("thread", ws.thread_id)
        if ws.expected_private_metadata is not None and row[0] != ws.expected_private_metadata:
            raise VersionConflict(ws.thread_id, ws.expected_private_metadata, row[0])
        if ws.truncate_from_message_id is None:
            return None, []
        position = await self._position_of(conn, ws.thread_id, ws.truncate_from_message_id)
        gone = (
            await conn.execute(
                select(messages.c.id)
                .where(messages.c.thread_id == ws.thread_id, messages.c.position >= position)
                .order_by(messages.c.position)
            )
        ).all()
        return position, [r[0] for r in gone]

    async def _update_root(
        self, conn: AsyncConnection, ws: WriteSet, now: datetime, truncate_at: int | None
    ) -> Row[Any]:
        """One guarded ``UPDATE ... RETURNING`` bumps the version and allocates positions."""
        base = threads.c.next_position if truncate_at is None else truncate_at
        values: dict[str, Any] = {
            "version": threads.c.version + 1,
            "updated_at": now,
            "next_position": base + len(ws.append_messages),
            "next_run_seq": threads.c.next_run_seq + len(ws.insert_runs),
        }
        patch = ws.thread
        if patch is not None:
            _set(values, "status", patch.status, now)
            _set(values, "metadata", patch.metadata, now)
            _set(values, "private_metadata", patch.private_metadata, now)
            if patch.active_run_id is PROMOTE_NEXT:
                next_queued = (
                    select(runs.c.id)
                    .where(runs.c.thread_id == ws.thread_id, runs.c.status == "queued")
                    .order_by(runs.c.thread_seq)
                    .limit(1)
                    .scalar_subquery()
                )
                values["active_run_id"] = next_queued
                if patch.status is UNSET:
                    values["status"] = case((next_queued.is_(None), "idle"), else_="running")
            else:
                _set(values, "active_run_id", patch.active_run_id, now)
        conds: list[ColumnElement[bool]] = [
            threads.c.id == ws.thread_id,
            threads.c.scope == ws.scope,
        ]
        if ws.expected_version is not None:
            conds.append(threads.c.version == ws.expected_version)
        if ws.expected_status is not None:
            conds.append(threads.c.status.in_(ws.expected_status))
        if ws.expected_message_count is not None:
            conds.append(threads.c.next_position == ws.expected_message_count)
        row = (
            await conn.execute(update(threads).where(*conds).values(**values).returning(*threads.c))
        ).first()
        if row is not None:
            return row
        current = (
            await conn.execute(
                select(threads.c.version, threads.c.status).where(
                    threads.c.id == ws.thread_id, threads.c.scope == ws.scope
                )
            )
        ).first()
        if current is None:
            raise NotFound("thread", ws.thread_id)
        if ws.expected_version is not None and current[0] != ws.expected_version:
            raise VersionConflict(ws.thread_id, ws.expected_version, current[0])
        if ws.expected_status is not None and current[1] not in ws.expected_status:
            raise VersionConflict(ws.thread_id, ws.expected_status, current[1])
        raise VersionConflict(ws.thread_id, ws.expected_message_count, "a different message count")

    async def _insert_events(
        self, conn: AsyncConnection, events: Sequence[NewEvent], now: datetime | None = None
    ) -> None:
        if not events:
            return
        at = now or await self._now(conn)
        await conn.execute(
            insert(run_events),
            [
                {"run_id": e.run_id, "seq": e.seq, "event": e.event, "created_at": e.time or at}
                for e in events
            ],
        )

    async def _insert_runs(
        self, conn: AsyncConnection, ws: WriteSet, first_seq: int, now: datetime
    ) -> list[RunRecord]:
        out: list[RunRecord] = []
        for offset, new in enumerate(ws.insert_runs):
            seq = first_seq + offset
            row = (
                await conn.execute(
                    insert(runs)
                    .values(
                        id=new.id,
                        thread_id=ws.thread_id,
                        scope=ws.scope,
                        thread_seq=seq,
                        status=new.status,
                        outcome=None,
                        reason=None,
                        initiator=new.initiator,
                        operation=new.operation,
                        input=new.input,
                        started_at=None,
                        execution_started_at=None,
                        metadata=new.metadata,
                        private_metadata=new.private_metadata,
                        usage={},
                        step_count=0,
                        attempts=0,
                        error=None,
                        hook_failures=[],
                        lease_owner=None,
                        lease_expires_at=None,
                        lease_epoch=0,
                        last_seq=0,
                        created_at=now,
                        updated_at=now,
                        ended_at=None,
                        cancel_requested_at=None,
                    )
                    .returning(*runs.c)
                )
            ).one()
            out.append(_run(row))
        return out

    async def _update_run(
        self, conn: AsyncConnection, scope: str, patch: RunPatch, now: datetime
    ) -> None:
        values: dict[str, Any] = {"updated_at": now}
        for name in (
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
            "ended_at",
            "cancel_requested_at",
        ):
            _set(values, name, getattr(patch, name), now)
        if patch.release_lease:
            values["lease_owner"] = None
            values["lease_expires_at"] = None
        conds: list[ColumnElement[bool]] = [runs.c.id == patch.id, runs.c.scope == scope]
        if patch.lease is not None:
            conds += _fence(patch.lease, now)
        if patch.expect_status is not None:
            conds.append(runs.c.status.in_(patch.expect_status))
        if patch.expect_last_seq is not None:
            conds.append(runs.c.last_seq == patch.expect_last_seq)
        if patch.expect_unleased:
            conds.append(or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_at <= now))
        result = await conn.execute(update(runs).where(*conds).values(**values))
        if result.rowcount == 1:
            return
        exists = (
            await conn.execute(
                select(runs.c.status).where(runs.c.id == patch.id, runs.c.scope == scope)
            )
        ).first()
        if exists is None:
            raise NotFound("run", patch.id)
        if patch.lease is not None:
            raise LeaseLost(patch.id)
        raise StateConflict("run", patch.id, f"status is {exists[0]}")

    async def _append(
        self, conn: AsyncConnection, ws: WriteSet, first_position: int, now: datetime
    ) -> list[MessageRecord]:
        if not ws.append_messages:
            return []
        records = [
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
        await conn.execute(insert(messages), [asdict(r) for r in records])
        return records

    async def _update_messages(self, conn: AsyncConnection, ws: WriteSet) -> None:
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
            result = await conn.execute(
                update(messages)
                .where(messages.c.id == patch.id, messages.c.thread_id == ws.thread_id)
                .values(**values)
            )
            if result.rowcount != 1:
                raise NotFound("message", patch.id)

    async def _write_pending(self, conn: AsyncConnection, ws: WriteSet, now: datetime) -> None:
        if ws.insert_pending:
            await conn.execute(
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
            result = await conn.execute(
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

    async def delete_thread(
        self, scope: str, thread_id: str, *, expected_version: int | None = None
    ) -> None:
        """Delete an idle thread and everything in it."""
        async with self._write() as conn:
            row = (
                await conn.execute(
                    self._lock(
                        select(threads.c.version, threads.c.status).where(
                            threads.c.id == thread_id, threads.c.scope == scope
                        )
                    )
                )
            ).first()
            if row is None:
                raise NotFound("thread", thread_id)
            if expected_version is not None and row[0] != expected_version:
                raise VersionConflict(thread_id, expected_version, row[0])
            if row[1] != "idle":
                raise StateConflict("thread", thread_id, f"is {row[1]}")
            await conn.execute(delete(threads).where(threads.c.id == thread_id))

    # ---- claims and leases -------------------------------------------------

    async def claim_run(self, owner: str, *, lease_seconds: float) -> ClaimedRun | None:
        """Claim the next runnable run with a lease, or return ``None``.

        A run is runnable when it is its thread's active run (so at most one
        run per thread is ever claimed) and it is queued, or running with no
        live lease (recovery after a lost runner). Claims take the oldest
        runnable run first; on PostgreSQL concurrent claimers skip each
        other's locked rows.
        """
        async with self._write() as conn:
            now = await self._now(conn)
            candidate = (
                select(runs.c.id)
                .select_from(threads.join(runs, runs.c.id == threads.c.active_run_id))
                .where(
                    runs.c.status.in_(ACTIVE_RUN_STATUSES),
                    or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_at <= now),
                )
                .order_by(runs.c.created_at, runs.c.id)
                .limit(1)
            )
            if self.dialect == "postgresql":
                candidate = candidate.with_for_update(of=runs, skip_locked=True)
            expires = now + timedelta(seconds=lease_seconds)
            # One statement: pick and take the lease (no window between them).
            row = (
                await conn.execute(
                    update(runs)
                    .where(runs.c.id == candidate.scalar_subquery())
                    .values(
                        lease_owner=owner,
                        lease_epoch=runs.c.lease_epoch + 1,
                        lease_expires_at=expires,
                        attempts=runs.c.attempts + 1,
                        status="running",
                        started_at=func.coalesce(runs.c.started_at, now),
                        execution_started_at=now,
                        updated_at=now,
                    )
                    .returning(*runs.c)
                )
            ).first()
        if row is None:
            return None
        run = _run(row)
        return ClaimedRun(run=run, lease=Lease(run.id, owner, run.lease_epoch, expires))

    async def heartbeat(self, lease: Lease, *, lease_seconds: float) -> Heartbeat:
        """Extend a held lease; raises :class:`LeaseLost` when it is gone.

        The answer also says whether a cancellation was requested, so a holder
        in another process learns of it within one heartbeat even without
        notifications.
        """
        async with self._write() as conn:
            now = await self._now(conn)
            expires = now + timedelta(seconds=lease_seconds)
            row = (
                await conn.execute(
                    update(runs)
                    .where(runs.c.id == lease.run_id, *_fence(lease, now))
                    .values(lease_expires_at=expires)
                    .returning(runs.c.cancel_requested_at)
                )
            ).first()
            if row is None:
                raise LeaseLost(lease.run_id)
        return Heartbeat(Lease(lease.run_id, lease.owner, lease.epoch, expires), row[0] is not None)

    async def release(self, lease: Lease) -> None:
        """Give a lease up early so another runner can claim the run at once."""
        async with self._write() as conn:
            now = await self._now(conn)
            await conn.execute(
                update(runs)
                .where(runs.c.id == lease.run_id, *_fence(lease, now))
                .values(lease_owner=None, lease_expires_at=None, updated_at=now)
            )

    async def runnable_count(self) -> int:
        """How many runs are waiting for a runner (for wake-up decisions and metrics)."""
        async with self._read() as conn:
            now = await self._now(conn)
            stmt = (
                select(func.count())
                .select_from(threads.join(runs, runs.c.id == threads.c.active_run_id))
                .where(
                    runs.c.status.in_(ACTIVE_RUN_STATUSES),
                    or_(runs.c.lease_owner.is_(None), runs.c.lease_expires_at <= now),
                )
            )
            return int((await conn.execute(stmt)).scalar_one())


def _fence(lease: Lease, now: datetime) -> list[ColumnElement[bool]]:
    """``owner = me AND epoch = mine AND expires_at > provider now``."""
    return [
        runs.c.lease_owner == lease.owner,
        runs.c.lease_epoch == lease.epoch,
        runs.c.lease_expires_at > now,
    ]


def _view_conditions(view: str) -> Iterable[ColumnElement[bool]]:
    if view == "transcript":
        return [messages.c.visible_transcript.is_(True)]
    if view == "context":
        return [messages.c.visible_context.is_(True)]
    if view == "all":
        return []
    raise ValueError(f"unknown message view {view!r}")


def _limit(limit: int) -> int:
    return max(1, min(int(limit), MAX_PAGE_SIZE))


__all__ = ["MAX_PAGE_SIZE", "DuplicateRequest", "JsonObject", "Store"]
