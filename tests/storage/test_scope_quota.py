"""The per-scope active-run quota of a write set, on each backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from pai_grpc.domain import new_id
from storage import ActiveRunLimit, NewRun, RunUpdate, Store, ThreadPatch, WriteSet
from tests.conftest import open_store
from tests.storage.helpers import (
    OTHER,
    SCOPE,
    make_thread,
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
