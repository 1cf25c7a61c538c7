"""Retention on both backends: compaction, key expiry, idle threads, DeleteThread, two sweepers."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from pai_grpc.domain import new_id
from storage import (
    NOW,
    IdempotencyRecord,
    NewEvent,
    NewPendingAction,
    RetentionPolicy,
    RunUpdate,
    Store,
    ThreadPatch,
    WriteSet,
)
from storage._retention import compaction_stretches
from storage._schema import metadata
from tests.conftest import open_store
from tests.storage.helpers import SCOPE, claim, make_thread, start_run

COMPACT_NOW = RetentionPolicy(
    events_after_terminal=timedelta(0), idempotency_ttl=None, idle_threads_after=None
)


def chunk(kind: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "chunk", "chunk": {"type": kind, **fields}}


def status(value: str) -> dict[str, Any]:
    return {"kind": "status", "status": value}


#: A step with text, a tool call whose input streamed, and a reasoning block.
LOG: list[dict[str, Any]] = [
    status("running"),  # 1
    chunk("start-step"),  # 2
    chunk("text-start", id="t"),  # 3
    *[chunk("text-delta", id="t", text=f"w{i} ") for i in range(5)],  # 4..8
    chunk("text-end", id="t"),  # 9
    chunk("tool-input-start", id="c", toolName="f"),  # 10
    *[chunk("tool-input-delta", id="c", delta="{") for _ in range(3)],  # 11..13
    chunk("tool-input-end", id="c"),  # 14
    chunk("reasoning-start", id="r"),  # 15
    chunk("reasoning-delta", id="r", text="hmm"),  # 16
    chunk("reasoning-end", id="r"),  # 17
    chunk("finish-step"),  # 18
]


async def running_run(store: Store, events: list[dict[str, Any]]) -> tuple[str, str, Any]:
    """A claimed run whose log holds ``events`` (seq 1..n)."""
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    claimed = await claim(store)
    assert claimed.run.id == run_id
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            events=[NewEvent(run_id, i + 1, e) for i, e in enumerate(events)],
            update_runs=[RunUpdate(id=run_id, lease=claimed.lease, last_seq=len(events))],
        )
    )
    return thread_id, run_id, claimed.lease


async def finish(store: Store, thread_id: str, run_id: str, lease: Any, seq: int) -> None:
    """End the run (completed) and leave the thread idle, as the runtime does."""
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            thread=ThreadPatch(status="idle", active_run_id=None),
            events=[NewEvent(run_id, seq, status("completed"))],
            update_runs=[
                RunUpdate(
                    id=run_id,
                    lease=lease,
                    status="completed",
                    outcome="completed",
                    last_seq=seq,
                    ended_at=NOW,
                    release_lease=True,
                )
            ],
        )
    )


async def finished_run(store: Store, events: list[dict[str, Any]] = LOG) -> tuple[str, str]:
    thread_id, run_id, lease = await running_run(store, events)
    await finish(store, thread_id, run_id, lease, len(events) + 1)
    return thread_id, run_id


async def log_of(store: Store, run_id: str, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
    return [(e.seq, e.event) for e in await store.read_events(SCOPE, run_id, after_seq=after)]


async def counts(store: Store) -> dict[str, int]:
    """Rows in every table of the schema."""

    def read(conn: Any) -> dict[str, int]:
        return {
            t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
            for t in metadata.sorted_tables
        }

    return await store.run_in_transaction(read)


def test_stretches_are_maximal_runs_of_deltas() -> None:
    rows = [(1, None), (2, "text-delta"), (3, "text-delta"), (5, "text-end"), (9, "text-delta")]
    assert compaction_stretches(rows) == [(2, 3, 2), (9, 9, 1)]
    assert compaction_stretches([(1, "start"), (2, None)]) == []


async def test_compaction_replaces_each_stretch_of_deltas_with_one_marker(store: Store) -> None:
    _, run_id = await finished_run(store)
    before = dict(await log_of(store, run_id))
    report = await store.sweep(COMPACT_NOW)
    assert (report.ran, report.compacted_runs, report.removed_events) == (True, 1, 9)
    after = await log_of(store, run_id)
    assert [seq for seq, _ in after] == [1, 2, 3, 8, 9, 10, 13, 14, 15, 16, 17, 18, 19]
    marks = {seq: e for seq, e in after if e["kind"] == "compacted"}
    assert marks == {
        8: {"kind": "compacted", "first_seq": 4, "last_seq": 8, "removed_events": 5},
        13: {"kind": "compacted", "first_seq": 11, "last_seq": 13, "removed_events": 3},
        16: {"kind": "compacted", "first_seq": 16, "last_seq": 16, "removed_events": 1},
    }
    # Every kept event is unchanged, the final status included.
    for seq, event in after:
        if seq not in marks:
            assert event == before[seq]
    assert after[-1][1] == status("completed")
    # Resuming inside a stretch gets its marker next.
    assert (await log_of(store, run_id, after=5))[0] == (8, marks[8])
    assert (await log_of(store, run_id, after=8))[0][0] == 9
    # A second pass finds nothing left to do.
    again = await store.sweep(COMPACT_NOW)
    assert (again.compacted_runs, again.removed_events) == (0, 0)


async def test_compaction_never_touches_running_waiting_or_recent_runs(store: Store) -> None:
    thread_id, run_id, lease = await running_run(store, LOG)
    assert (await store.sweep(COMPACT_NOW)).compacted_runs == 0
    # Waiting on a pending action, with no lease.
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            thread=ThreadPatch(status="waiting"),
            insert_pending=[
                NewPendingAction(
                    id=new_id("act"),
                    run_id=run_id,
                    kind="approval",
                    tool_call_id="c",
                    tool_name="f",
                )
            ],
            update_runs=[RunUpdate(id=run_id, lease=lease, status="waiting", release_lease=True)],
        )
    )
    assert (await store.sweep(COMPACT_NOW)).compacted_runs == 0
    assert len(await log_of(store, run_id)) == len(LOG)
    # Ended, but within the window.
    _, recent = await finished_run(store)
    hour = RetentionPolicy(events_after_terminal=timedelta(hours=1), idempotency_ttl=None)
    assert (await store.sweep(hour)).compacted_runs == 0
    assert len(await log_of(store, recent)) == len(LOG) + 1


async def test_idempotency_keys_expire_after_their_ttl(store: Store) -> None:
    store.idempotency_ttl = timedelta(seconds=0.3)
    record = IdempotencyRecord("req-1", "f" * 64, {"thread_id": "first"})
    first = new_id("thr")
    await store.commit(WriteSet(scope=SCOPE, thread_id=first, idempotency=record, **_new(first)))
    stored = await store.get_idempotency(SCOPE, "req-1")
    assert stored is not None
    assert stored.result == {"thread_id": "first"}
    await asyncio.sleep(0.5)
    assert await store.get_idempotency(SCOPE, "req-1") is None
    # The key is free again: a replay after expiry is a new request.
    second = new_id("thr")
    again = IdempotencyRecord("req-1", "e" * 64, {"thread_id": "second"})
    await store.commit(WriteSet(scope=SCOPE, thread_id=second, idempotency=again, **_new(second)))
    stored = await store.get_idempotency(SCOPE, "req-1")
    assert stored is not None
    assert stored.result == {"thread_id": "second"}
    assert (await counts(store))["idempotency_keys"] == 1
    await asyncio.sleep(0.5)
    policy = RetentionPolicy(
        events_after_terminal=None, idempotency_ttl=timedelta(seconds=0.3), batch_rows=1
    )
    assert (await store.sweep(policy)).expired_keys == 1
    assert (await counts(store))["idempotency_keys"] == 0


def _new(thread_id: str) -> dict[str, Any]:
    from storage import NewThread

    return {"new_thread": NewThread(id=thread_id, agent="default")}


async def test_delete_thread_removes_every_row_of_the_thread(store: Store) -> None:
    empty = await counts(store)
    kept, _ = await finished_run(store)
    with_one = await counts(store)
    thread_id, run_id = await finished_run(store)
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            thread=ThreadPatch(metadata={"k": "v"}),
            insert_pending=[
                NewPendingAction(
                    id=new_id("act"), run_id=run_id, kind="data", tool_call_id="x", tool_name="y"
                )
            ],
            idempotency=IdempotencyRecord("req-del", "a" * 64, {}),
        )
    )
    full = await counts(store)
    assert all(full[t] > with_one[t] for t in full), full
    await store.delete_thread(SCOPE, thread_id)
    assert await counts(store) == with_one
    await store.delete_thread(SCOPE, kept)
    assert await counts(store) == empty


async def test_idle_threads_are_deleted_after_their_ttl(store: Store) -> None:
    old, _ = await finished_run(store)
    busy, _, _ = await running_run(store, LOG[:2])
    await asyncio.sleep(0.5)
    fresh = await make_thread(store)
    policy = RetentionPolicy(
        events_after_terminal=None,
        idempotency_ttl=None,
        idle_threads_after=timedelta(seconds=0.4),
        batch_rows=1,
    )
    report = await store.sweep(policy)
    assert report.deleted_threads == 1
    assert await store.get_thread(SCOPE, old) is None
    assert await store.get_thread(SCOPE, busy) is not None  # running, never idle-deleted
    assert await store.get_thread(SCOPE, fresh) is not None


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_one_sweeper_works_at_a_time_and_both_finish(backend: str, tmp_path: Path) -> None:
    async with open_store(backend, tmp_path) as first:
        runs = [(await finished_run(first))[1] for _ in range(6)]
        second = Store.open(str(first.engines.url), schema=first.engines.schema)
        try:
            # While one holds the lock, the other's pass does nothing.
            async with first.sweep_lock() as taken:
                assert taken
                blocked = await second.sweep(COMPACT_NOW)
                assert not blocked.ran
                assert blocked.compacted_runs == 0
            one_run = RetentionPolicy(
                events_after_terminal=timedelta(0), idempotency_ttl=None, batch_rows=9
            )
            a, b = await asyncio.gather(first.sweep(one_run), second.sweep(one_run))
            assert sorted([a.compacted_runs, b.compacted_runs]) == [0, len(runs)]
            assert a.ran or b.ran
            for run_id in runs:
                assert any(e["kind"] == "compacted" for _, e in await log_of(first, run_id))
            # The lock was given back: a later pass runs.
            assert (await second.sweep(COMPACT_NOW)).ran
        finally:
            await second.close()
