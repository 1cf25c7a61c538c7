"""The thread's next queued run is promoted right, whichever commit waits for the other.

On PostgreSQL a statement reads the database as of its start. A finish
that promotes the thread's next queued run can start its update of the
thread while another commit that changes the queue holds the thread's row
(a Send queueing a run, a queued run cancelled): it waits, then updates the
row as that commit left it, but its search for the next queued run still
reads as of before. It must not leave the thread idle with a run queued
behind nothing, nor make a cancelled run active. And a cancel that read the
thread before a promotion of its run must be refused (CancelRun looks
again and cancels the run as the active one).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from pai_grpc.domain import new_id
from storage import (
    NOW,
    IdempotencyRecord,
    NewEvent,
    NewRun,
    RunUpdate,
    Store,
    VersionConflict,
    WriteSet,
    upgrade,
)
from tests.conftest import POSTGRES_URL, _asyncpg_dsn, private_schema
from tests.storage.helpers import (
    SCOPE,
    claim,
    event,
    finish_and_promote,
    make_thread,
    queue_run,
    start_run,
)


async def _waiting(conn: asyncpg.Connection, count: int) -> None:
    """Until ``count`` backends wait for a lock."""
    for _ in range(500):
        waiting = await conn.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted")
        if waiting >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"fewer than {count} backends came to wait for a lock")


async def test_a_finish_waiting_for_a_queueing_send_promotes_its_run(tmp_path: Path) -> None:
    async with private_schema() as schema:
        store = Store.open(POSTGRES_URL, schema=schema, pool_size=5)
        await upgrade(store)
        blocker = await asyncpg.connect(
            _asyncpg_dsn(POSTGRES_URL), server_settings={"search_path": schema}
        )
        try:
            thread_id = await make_thread(store)
            await start_run(store, thread_id)
            active = await claim(store)
            # Another request holds the key the Send stores its result under, so the
            # Send stops after its update of the thread, holding the thread's row.
            key = "send:held"
            blocking = blocker.transaction()
            await blocking.start()
            await blocker.execute(
                "INSERT INTO idempotency_keys (scope, key, fingerprint, result, created_at)"
                " VALUES ($1, $2, 'other', '{}', now())",
                SCOPE,
                key,
            )
            queued = new_id("run")
            send = asyncio.create_task(
                store.commit(
                    WriteSet(
                        scope=SCOPE,
                        thread_id=thread_id,
                        expected_status=("running", "waiting"),
                        insert_runs=[
                            NewRun(id=queued, status="queued", initiator="send", operation="send")
                        ],
                        idempotency=IdempotencyRecord(key=key, fingerprint="f", result={}),
                    )
                )
            )
            await _waiting(blocker, 1)
            # The finish comes to wait for the thread's row the Send holds.
            finish = asyncio.create_task(store.commit(finish_and_promote(active, thread_id)))
            await _waiting(blocker, 2)
            await blocking.rollback()
            await send
            await finish
            thread = await store.get_thread(SCOPE, thread_id)
            assert thread is not None
            assert (thread.status, thread.active_run_id) == ("running", queued)
        finally:
            await blocker.close()
            await store.close()


def _cancel(thread_id: str, run_id: str, active: str | None, *events: NewEvent) -> WriteSet:
    """Cancel a queued run nobody executes, as CancelRun does: guarded by the active run."""
    return WriteSet(
        scope=SCOPE,
        thread_id=thread_id,
        update_runs=[
            RunUpdate(
                id=run_id,
                expect_status=("queued",),
                expect_unleased=True,
                status="cancelled",
                outcome="cancelled",
                ended_at=NOW,
                release_lease=True,
            )
        ],
        events=list(events),
        expected_active_run=active,
    )


async def test_a_cancel_that_a_waiting_finish_follows_is_not_promoted(tmp_path: Path) -> None:
    # The cancel holds the thread's row; the finish waits for it, then promotes.
    async with private_schema() as schema:
        store = Store.open(POSTGRES_URL, schema=schema, pool_size=5)
        await upgrade(store)
        blocker = await asyncpg.connect(
            _asyncpg_dsn(POSTGRES_URL), server_settings={"search_path": schema}
        )
        try:
            thread_id = await make_thread(store)
            first = await start_run(store, thread_id)
            active = await claim(store)
            cancelled, after = await queue_run(store, thread_id), await queue_run(store, thread_id)
            # The cancel stops after its update of the thread: an event it logs is held.
            blocking = blocker.transaction()
            await blocking.start()
            await blocker.execute(
                "INSERT INTO run_events (run_id, seq, created_at) VALUES ($1, 1, now())",
                cancelled,
            )
            cancel = asyncio.create_task(
                store.commit(_cancel(thread_id, cancelled, first, event(cancelled, 1)))
            )
            await _waiting(blocker, 1)
            finish = asyncio.create_task(store.commit(finish_and_promote(active, thread_id)))
            await _waiting(blocker, 2)
            await blocking.rollback()
            await cancel
            await finish
            thread = await store.get_thread(SCOPE, thread_id)
            assert thread is not None
            assert (thread.status, thread.active_run_id) == ("running", after)
        finally:
            await blocker.close()
            await store.close()


async def test_a_cancel_that_follows_a_promotion_of_its_run_is_refused(tmp_path: Path) -> None:
    # The finish holds the thread's row, having promoted the run being cancelled.
    async with private_schema() as schema:
        store = Store.open(POSTGRES_URL, schema=schema, pool_size=5)
        await upgrade(store)
        blocker = await asyncpg.connect(
            _asyncpg_dsn(POSTGRES_URL), server_settings={"search_path": schema}
        )
        try:
            thread_id = await make_thread(store)
            first = await start_run(store, thread_id)
            active = await claim(store)
            nxt = await queue_run(store, thread_id)
            # The finish stops after its update of the thread: an event it logs is held.
            blocking = blocker.transaction()
            await blocking.start()
            await blocker.execute(
                "INSERT INTO run_events (run_id, seq, created_at) VALUES ($1, 1, now())", first
            )
            ws = finish_and_promote(active, thread_id)
            ws.events = [event(first, 1)]
            finish = asyncio.create_task(store.commit(ws))
            await _waiting(blocker, 1)
            # The cancel read the thread before the promotion: it expects the old run active.
            cancel = asyncio.create_task(store.commit(_cancel(thread_id, nxt, first)))
            await _waiting(blocker, 2)
            await blocking.rollback()
            await finish
            with pytest.raises(VersionConflict):
                await cancel
            thread = await store.get_thread(SCOPE, thread_id)
            run = await store.get_run(SCOPE, nxt)
            assert thread is not None
            assert run is not None
            # Consistent: the promoted run is active and still to run (CancelRun looks again).
            assert (thread.status, thread.active_run_id, run.status) == ("running", nxt, "queued")
        finally:
            await blocker.close()
            await store.close()


async def test_the_active_run_guard_on_each_backend(store: Store) -> None:
    thread_id = await make_thread(store)
    first = await start_run(store, thread_id)
    nxt = await queue_run(store, thread_id)
    for wrong in (None, nxt):
        with pytest.raises(VersionConflict):
            await store.commit(_cancel(thread_id, nxt, wrong))
    assert (run := await store.get_run(SCOPE, nxt)) is not None
    assert run.status == "queued"
    await store.commit(_cancel(thread_id, nxt, first))
    assert (run := await store.get_run(SCOPE, nxt)) is not None
    assert run.status == "cancelled"
