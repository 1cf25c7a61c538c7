"""Helpers for storage tests: building threads, runs and claims directly through write sets."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event as sa_event

from pai_grpc.domain import new_id
from storage import (
    PROMOTE_NEXT,
    ClaimedRun,
    NewEvent,
    NewMessage,
    NewRun,
    NewThread,
    RunUpdate,
    Store,
    ThreadPatch,
    WriteSet,
)

SCOPE = "tenant-a"
OTHER = "tenant-b"


def event(run_id: str, seq: int, kind: str = "status") -> NewEvent:
    """An event-log entry with an opaque body naming it (storage never reads bodies)."""
    return NewEvent(run_id, seq, f"{run_id}:{seq}:{kind}".encode(), kind, datetime.now(UTC))


async def make_thread(store: Store, scope: str = SCOPE, **meta: Any) -> str:
    thread_id = new_id("thr")
    await store.commit(
        WriteSet(
            scope=scope,
            thread_id=thread_id,
            new_thread=NewThread(id=thread_id, agent="default", metadata=dict(meta)),
        )
    )
    return thread_id


def text_message(text: str, **kw: Any) -> NewMessage:
    return NewMessage(id=new_id("msg"), role="user", parts=[{"type": "text", "text": text}], **kw)


def send_on_idle(
    thread_id: str, messages: list[NewMessage], runs: list[NewRun], scope: str = SCOPE
) -> WriteSet:
    """What Send commits on an idle thread: its messages and runs, the first run active."""
    return WriteSet(
        scope=scope,
        thread_id=thread_id,
        expected_status=("idle",),
        thread=ThreadPatch(status="running", active_run_id=runs[0].id),
        append_messages=messages,
        insert_runs=runs,
    )


async def start_run(store: Store, thread_id: str, scope: str = SCOPE) -> str:
    """Commit a user message and an active run on an idle thread (as Send does)."""
    run_id = new_id("run")
    run = NewRun(id=run_id, status="queued", initiator="send", operation="send")
    await store.commit(send_on_idle(thread_id, [text_message("hi", run_id=run_id)], [run], scope))
    return run_id


async def queue_run(store: Store, thread_id: str, scope: str = SCOPE) -> str:
    """Queue a run behind the active one (as Send on a busy thread does)."""
    run_id = new_id("run")
    await store.commit(
        WriteSet(
            scope=scope,
            thread_id=thread_id,
            insert_runs=[NewRun(id=run_id, status="queued", initiator="send", operation="send")],
        )
    )
    return run_id


async def claim(store: Store, owner: str = "r1", lease: float = 30.0) -> ClaimedRun:
    claimed = await store.claim_run(owner, lease_seconds=lease)
    assert claimed is not None, "expected a runnable run"
    return claimed


def finish_and_promote(
    current: ClaimedRun, thread_id: str, scope: str = SCOPE, **fields: Any
) -> WriteSet:
    """End the claimed run (completed, lease released) and promote the thread's next run."""
    return WriteSet(
        scope=scope,
        thread_id=thread_id,
        thread=ThreadPatch(active_run_id=PROMOTE_NEXT),
        update_runs=[
            RunUpdate(
                id=current.run.id,
                lease=current.lease,
                status="completed",
                release_lease=True,
                **fields,
            )
        ],
    )


async def state(store: Store, thread_id: str, scope: str = SCOPE) -> tuple[Any, ...]:
    """Everything durable about a thread, to compare before/after a rejected write set."""
    thread = await store.get_thread(scope, thread_id)
    messages = await store.list_messages(scope, thread_id, view="all", limit=1000)
    runs = await store.list_runs(scope, thread_id, limit=1000)
    pending = [await store.list_pending_actions(scope, r.id) for r in runs.items]
    events = [await store.read_events(scope, r.id) for r in runs.items]
    return thread, messages.items, runs.items, pending, events


@contextmanager
def statements_sent(store: Store) -> Iterator[list[str]]:
    """The SQL statements a PostgreSQL ``store`` sends while the block runs (each a round trip)."""
    engine = store.engines.async_engine
    assert engine is not None, "PostgreSQL only"
    sent: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    sa_event.listen(engine.sync_engine, "before_cursor_execute", seen)
    try:
        yield sent
    finally:
        sa_event.remove(engine.sync_engine, "before_cursor_execute", seen)
