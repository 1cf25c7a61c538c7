"""Retention on both backends: compaction, key expiry, idle threads, DeleteThread, two sweepers."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select

from pai_grpc.domain import new_id
from storage import (
    NOW,
    CompactionMarker,
    IdempotencyRecord,
    NewEvent,
    NewPendingAction,
    RetentionPolicy,
    RunUpdate,
    Store,
    SweepReport,
    ThreadPatch,
    WriteSet,
)
from storage._retention import compaction_stretches
from storage._schema import metadata, run_events
from tests.conftest import open_store
from tests.storage.helpers import SCOPE, claim, make_thread, start_run

COMPACT_NOW = RetentionPolicy(
    events_after_terminal=timedelta(0), idempotency_ttl=None, idle_threads_after=None
)
#: Event times: seq n happened at T0 + n seconds (a marker takes its last event's time).
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seq: int) -> datetime:
    return T0 + timedelta(seconds=seq)


def marker_body(m: CompactionMarker) -> bytes:
    """Storage stores whatever the caller encodes: here a readable stand-in."""
    return f"compacted {m.first_seq}-{m.last_seq} ({m.removed_events}) {m.time:%H:%M:%S}".encode()


async def sweep(store: Store, policy: RetentionPolicy = COMPACT_NOW) -> SweepReport:
    return await store.sweep(policy, encode_marker=marker_body)


def body(seq: int, kind: str) -> bytes:
    """An opaque event body (storage never reads it)."""
    return f"event {seq} {kind}".encode()


#: A step with text, a tool call whose input streamed, and a reasoning block (event kinds).
LOG: list[str] = [
    "status",  # 1
    "start-step",  # 2
    "text-start",  # 3
    *["text-delta"] * 5,  # 4..8
    "text-end",  # 9
    "tool-input-start",  # 10
    *["tool-input-delta"] * 3,  # 11..13
    "tool-input-end",  # 14
    "reasoning-start",  # 15
    "reasoning-delta",  # 16
    "reasoning-end",  # 17
    "finish-step",  # 18
]


def new_events(run_id: str, kinds: list[str], first: int = 1) -> list[NewEvent]:
    return [NewEvent(run_id, s, body(s, k), k, at(s)) for s, k in enumerate(kinds, first)]


async def running_run(store: Store, events: list[str]) -> tuple[str, str, Any]:
    """A claimed run whose log holds events of these kinds (seq 1..n)."""
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    claimed = await claim(store)
    assert claimed.run.id == run_id
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            events=new_events(run_id, events),
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
            events=new_events(run_id, ["status"], first=seq),
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


async def finished_run(store: Store, events: list[str] = LOG) -> tuple[str, str]:
    thread_id, run_id, lease = await running_run(store, events)
    await finish(store, thread_id, run_id, lease, len(events) + 1)
    return thread_id, run_id


async def log_of(store: Store, run_id: str, after: int = 0) -> list[tuple[int, str, bytes]]:
    """``(seq, kind, body)`` of each event: compaction must keep bodies byte for byte."""
    out = []
    for e in await store.read_events(SCOPE, run_id, after_seq=after):
        assert e.event is None
        assert e.kind is not None
        assert e.body is not None
        out.append((e.seq, e.kind, e.body))
    return out


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
    before = {seq: (kind, b) for seq, kind, b in await log_of(store, run_id)}
    report = await sweep(store)
    assert (report.ran, report.compacted_runs, report.removed_events) == (True, 1, 9)
    after = await log_of(store, run_id)
    assert [seq for seq, _, _ in after] == [1, 2, 3, 8, 9, 10, 13, 14, 15, 16, 17, 18, 19]
    marks = {seq: b for seq, kind, b in after if kind == "compacted"}
    # Each marker is the caller's encoding, at its stretch's last seq and with its time.
    assert marks == {
        8: b"compacted 4-8 (5) 00:00:08",
        13: b"compacted 11-13 (3) 00:00:13",
        16: b"compacted 16-16 (1) 00:00:16",
    }
    # Every kept event is unchanged, byte for byte, the final status included.
    for seq, kind, b in after:
        if seq not in marks:
            assert (kind, b) == before[seq]
    assert after[-1][1:] == ("status", body(19, "status"))
    # Resuming inside a stretch gets its marker next.
    assert (await log_of(store, run_id, after=5))[0] == (8, "compacted", marks[8])
    assert (await log_of(store, run_id, after=8))[0][0] == 9
    # A second pass finds nothing left to do.
    again = await sweep(store)
    assert (again.compacted_runs, again.removed_events) == (0, 0)


async def test_compaction_reads_json_rows_logged_before_binary_events(store: Store) -> None:
    # A run upgraded mid-way: seqs 1..6 were logged as JSON (no kind, no body),
    # the rest in binary, and a stretch of deltas spans the two.
    thread_id, run_id, lease = await running_run(store, [])

    def chunk(kind: str) -> dict[str, Any]:
        return {"kind": "chunk", "chunk": {"type": kind, "id": "t", "text": "w"}}

    legacy = [{"kind": "status", "status": "running"}, chunk("text-start")]
    legacy += [chunk("text-delta")] * 4
    await store.run_in_transaction(
        lambda c: c.execute(
            insert(run_events),
            [
                {"run_id": run_id, "seq": s, "event": e, "created_at": at(s)}
                for s, e in enumerate(legacy, 1)
            ],
        )
    )
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            events=new_events(run_id, ["text-delta", "text-delta", "text-end"], first=7),
            update_runs=[RunUpdate(id=run_id, lease=lease, last_seq=9)],
        )
    )
    await finish(store, thread_id, run_id, lease, 10)
    report = await sweep(store)
    assert (report.compacted_runs, report.removed_events) == (1, 6)
    rows = await store.read_events(SCOPE, run_id)
    assert [r.seq for r in rows] == [1, 2, 8, 9, 10]
    # Kept JSON rows stay JSON; the marker, like every new row, is binary.
    assert [r.event for r in rows[:2]] == legacy[:2]
    assert all(r.body is None and r.kind is None for r in rows[:2])
    assert (rows[2].kind, rows[2].body, rows[2].event) == (
        "compacted",
        b"compacted 3-8 (6) 00:00:08",
        None,
    )
    assert [(r.kind, r.body) for r in rows[3:]] == [
        ("text-end", body(9, "text-end")),
        ("status", body(10, "status")),
    ]


async def test_compaction_never_touches_running_waiting_or_recent_runs(store: Store) -> None:
    thread_id, run_id, lease = await running_run(store, LOG)
    assert (await sweep(store)).compacted_runs == 0
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
    assert (await sweep(store)).compacted_runs == 0
    assert len(await log_of(store, run_id)) == len(LOG)
    # Ended, but within the window.
    _, recent = await finished_run(store)
    hour = RetentionPolicy(events_after_terminal=timedelta(hours=1), idempotency_ttl=None)
    assert (await sweep(store, hour)).compacted_runs == 0
    assert len(await log_of(store, recent)) == len(LOG) + 1


async def test_idempotency_keys_expire_after_their_ttl(store: Store) -> None:
    # Whether a key is still fresh is asked under a TTL no pause of a busy
    # machine reaches (a 0.3 s TTL once ran out between a commit and the read
    # after it, on PostgreSQL in CI); expiry is asked after sleeping past it.
    fresh, short = timedelta(minutes=1), timedelta(seconds=0.3)
    store.idempotency_ttl = fresh
    record = IdempotencyRecord("req-1", "f" * 64, {"thread_id": "first"})
    first = new_id("thr")
    await store.commit(WriteSet(scope=SCOPE, thread_id=first, idempotency=record, **_new(first)))
    stored = await store.get_idempotency(SCOPE, "req-1")
    assert stored is not None
    assert stored.result == {"thread_id": "first"}
    await asyncio.sleep(0.5)
    store.idempotency_ttl = short
    assert await store.get_idempotency(SCOPE, "req-1") is None
    # The key is free again: a replay after expiry is a new request.
    second = new_id("thr")
    again = IdempotencyRecord("req-1", "e" * 64, {"thread_id": "second"})
    await store.commit(WriteSet(scope=SCOPE, thread_id=second, idempotency=again, **_new(second)))
    store.idempotency_ttl = fresh
    stored = await store.get_idempotency(SCOPE, "req-1")
    assert stored is not None
    assert stored.result == {"thread_id": "second"}
    assert (await counts(store))["idempotency_keys"] == 1
    await asyncio.sleep(0.5)
    policy = RetentionPolicy(
        events_after_terminal=None, idempotency_ttl=timedelta(seconds=0.3), batch_rows=1
    )
    assert (await sweep(store, policy)).expired_keys == 1
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
    report = await sweep(store, policy)
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
                blocked = await sweep(second)
                assert not blocked.ran
                assert blocked.compacted_runs == 0
            one_run = RetentionPolicy(
                events_after_terminal=timedelta(0), idempotency_ttl=None, batch_rows=9
            )
            a, b = await asyncio.gather(sweep(first, one_run), sweep(second, one_run))
            assert sorted([a.compacted_runs, b.compacted_runs]) == [0, len(runs)]
            assert a.ran or b.ran
            for run_id in runs:
                assert any(kind == "compacted" for _, kind, _ in await log_of(first, run_id))
            # The lock was given back: a later pass runs.
            assert (await sweep(second)).ran
        finally:
            await second.close()
