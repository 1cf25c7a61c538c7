"""The per-scope active-run quota of a write set, on each backend."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text

from pai_grpc.domain import new_id
from storage import ActiveRunLimit, NewRun, RunUpdate, Store, ThreadPatch, WriteSet
from storage._sql import _active_runs
from tests.conftest import open_store
from tests.storage.helpers import (
    OTHER,
    SCOPE,
    make_thread,
    send_on_idle,
    start_run,
    state,
    statements_sent,
    text_message,
)


def start(thread_id: str, scope: str = SCOPE, *, quota: int) -> WriteSet:
    run_id = new_id("run")
    return WriteSet(
        scope=scope,
        thread_id=thread_id,
        expected_status=("idle",),
        thread=ThreadPatch(status="running", active_run_id=run_id),
        append_messages=[text_message("hi", run_id=run_id)],
        insert_runs=[NewRun(id=run_id, status="queued", initiator="send", operation="send")],
        max_active_runs=quota,
    )


async def test_queued_running_and_waiting_runs_count_and_ended_ones_do_not(store: Store) -> None:
    first = await make_thread(store)
    run_id = await start_run(store, first)
    second = await make_thread(store)
    for status in ("queued", "running", "waiting"):
        await store.commit(
            WriteSet(
                scope=SCOPE,
                thread_id=first,
                update_runs=[RunUpdate(id=run_id, status=status)],
            )
        )
        before = await state(store, second)
        with pytest.raises(ActiveRunLimit) as refused:
            await store.commit(start(second, quota=1))
        assert (refused.value.scope, refused.value.limit, refused.value.active) == (SCOPE, 1, 1)
        assert await state(store, second) == before  # nothing was written
    # Another scope has its own count; 0 means no quota.
    await store.commit(start(await make_thread(store, OTHER), OTHER, quota=1))
    await store.commit(start(await make_thread(store), quota=0))
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=first,
            update_runs=[RunUpdate(id=run_id, status="completed", outcome="completed")],
        )
    )
    # The completed run no longer counts; the quota=0 run above still does.
    with pytest.raises(ActiveRunLimit) as again:
        await store.commit(start(second, quota=1))
    assert again.value.active == 1
    await store.commit(start(second, quota=2))


async def test_a_send_counts_in_its_root_update_on_postgresql(tmp_path: Path) -> None:
    # The scope's lock, then the root update guarded by the count, then the inserts.
    async with open_store("postgresql", tmp_path) as store:
        first, second = await make_thread(store), await make_thread(store)
        with statements_sent(store) as sent:
            await store.commit(start(first, quota=1))
            assert [s.split()[0] for s in sent] == ["SELECT", "UPDATE", "WITH"]
            sent.clear()
            with pytest.raises(ActiveRunLimit) as refused:
                await store.commit(start(second, quota=1))
            assert refused.value.active == 1
            # Refused by the guard: the lock, the update, and the count that names the cause.
            assert [s.split()[0] for s in sent] == ["SELECT", "UPDATE", "SELECT"]


async def end_runs(store: Store, count: int) -> None:
    """Leave ``count`` completed runs in the scope (one Send's worth of queued runs, then ended)."""
    thread = await make_thread(store)
    ids = [new_id("run") for _ in range(count)]
    new = [NewRun(id=i, status="queued", initiator="send", operation="send") for i in ids]
    await store.commit(send_on_idle(thread, [text_message("hi", run_id=ids[0])], new))
    # Each status a run passes through leaves a dead row version behind, as real runs do.
    for status in ("running", "completed"):
        update = [RunUpdate(id=i, status=status) for i in ids]
        await store.commit(WriteSet(scope=SCOPE, thread_id=thread, update_runs=update))


async def pages_the_count_reads(store: Store) -> int:
    """Buffers PostgreSQL touches to count the scope's active runs (EXPLAIN ANALYZE).

    Counted twice: the first count after a burst of status changes passes over
    the index entries of the row versions they left behind (and marks them
    dead, as any scan does). A scope's Sends count at every run, so what the
    second count reads is what each Send pays.
    """
    engine = store.engines.async_engine
    assert engine is not None
    async with engine.connect() as conn:
        await conn.execute(text(str(_active_runs())), {"p_scope": SCOPE})
        explain = text(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {_active_runs()}")
        plan = (await conn.execute(explain, {"p_scope": SCOPE})).scalar_one()
    plan = json.loads(plan) if isinstance(plan, str) else plan
    top = plan[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


async def test_the_quota_count_does_not_grow_with_ended_runs_on_postgresql(
    tmp_path: Path,
) -> None:
    # Every Send of a scope counts its active runs while holding the scope's lock.
    # Ended runs must not make that count slower, whatever the planner knows
    # about the table: a fresh table has no statistics (nor does any table while
    # autovacuum is off), and then the count read every run the scope ever had.
    async with open_store("postgresql", tmp_path) as store:
        await end_runs(store, 20)
        few = await pages_the_count_reads(store)
        await end_runs(store, 600)
        assert await pages_the_count_reads(store) <= few
        await store.run_in_transaction(lambda c: c.execute(text("ANALYZE runs")))
        assert await pages_the_count_reads(store) <= few


async def test_the_quota_count_searches_an_index_of_active_runs_on_sqlite(tmp_path: Path) -> None:
    async with open_store("sqlite", tmp_path) as store:
        await end_runs(store, 5)
    with sqlite3.connect(tmp_path / "store.db") as db:
        plan = db.execute(f"EXPLAIN QUERY PLAN {_active_runs()}", {"p_scope": SCOPE}).fetchall()
    assert [row[3] for row in plan] == ["SEARCH runs USING INDEX ix_runs_scope_active (scope=?)"]
