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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from pai_grpc.domain import new_id
from storage import (
    NOW,
    IdempotencyRecord,
    NewEvent,
    NewRun,
    RetentionPolicy,
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


class _Holder:
    """A connection of its own that holds a row lock, to stop a commit at a chosen point."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self._held: Any = None

    async def hold(self, sql: str, *args: Any) -> None:
        """Write ``sql`` in a transaction left open: a commit writing the same key waits."""
        self._held = self.conn.transaction()
        await self._held.start()
        await self.conn.execute(sql, *args)

    async def release(self) -> None:
        """Roll the held write back: the commit waiting for it goes on."""
        await self._held.rollback()

    async def waiting(self, count: int) -> None:
        """Until ``count`` backends wait for a lock."""
        for _ in range(500):
            if await self.conn.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted") >= count:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"fewer than {count} backends came to wait for a lock")


@asynccontextmanager
async def _contended() -> AsyncIterator[tuple[Store, _Holder]]:
    """A migrated PostgreSQL store, and a holder on the same schema."""
    async with private_schema() as schema:
        store = Store.open(POSTGRES_URL, schema=schema, pool_size=10)
        conn = await asyncpg.connect(
            _asyncpg_dsn(POSTGRES_URL), server_settings={"search_path": schema}
        )
        try:
            await upgrade(store)
            yield store, _Holder(conn)
        finally:
            await conn.close()
            await store.close()


#: An event the stopped commit logs, written first by the holder.
HELD_EVENT = "INSERT INTO run_events (run_id, seq, created_at) VALUES ($1, 1, now())"


async def test_a_finish_waiting_for_a_queueing_send_promotes_its_run() -> None:
    async with _contended() as (store, holder):
        thread_id = await make_thread(store)
        await start_run(store, thread_id)
        active = await claim(store)
        # Another request holds the key the Send stores its result under, so the
        # Send stops after its update of the thread, holding the thread's row.
        key = "send:held"
        await holder.hold(
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
        await holder.waiting(1)
        # The finish comes to wait for the thread's row the Send holds.
        finish = asyncio.create_task(store.commit(finish_and_promote(active, thread_id)))
        await holder.waiting(2)
        await holder.release()
        await send
        await finish
        thread = await store.get_thread(SCOPE, thread_id)
        assert thread is not None
        assert (thread.status, thread.active_run_id) == ("running", queued)


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


async def test_a_cancel_that_a_waiting_finish_follows_is_not_promoted() -> None:
    # The cancel holds the thread's row; the finish waits for it, then promotes.
    async with _contended() as (store, holder):
        thread_id = await make_thread(store)
        first = await start_run(store, thread_id)
        active = await claim(store)
        cancelled, after = await queue_run(store, thread_id), await queue_run(store, thread_id)
        # The cancel stops after its update of the thread: an event it logs is held.
        await holder.hold(HELD_EVENT, cancelled)
        cancel = asyncio.create_task(
            store.commit(_cancel(thread_id, cancelled, first, event(cancelled, 1)))
        )
        await holder.waiting(1)
        finish = asyncio.create_task(store.commit(finish_and_promote(active, thread_id)))
        await holder.waiting(2)
        await holder.release()
        await cancel
        await finish
        thread = await store.get_thread(SCOPE, thread_id)
        assert thread is not None
        assert (thread.status, thread.active_run_id) == ("running", after)


async def test_a_cancel_that_follows_a_promotion_of_its_run_is_refused() -> None:
    # The finish holds the thread's row, having promoted the run being cancelled.
    async with _contended() as (store, holder):
        thread_id = await make_thread(store)
        first = await start_run(store, thread_id)
        active = await claim(store)
        nxt = await queue_run(store, thread_id)
        # The finish stops after its update of the thread: an event it logs is held.
        await holder.hold(HELD_EVENT, first)
        ws = finish_and_promote(active, thread_id)
        ws.events = [event(first, 1)]
        finish = asyncio.create_task(store.commit(ws))
        await holder.waiting(1)
        # The cancel read the thread before the promotion: it expects the old run active.
        cancel = asyncio.create_task(store.commit(_cancel(thread_id, nxt, first)))
        await holder.waiting(2)
        await holder.release()
        await finish
        with pytest.raises(VersionConflict):
            await cancel
        thread = await store.get_thread(SCOPE, thread_id)
        run = await store.get_run(SCOPE, nxt)
        assert thread is not None
        assert run is not None
        # Consistent: the promoted run is active and still to run (CancelRun looks again).
        assert (thread.status, thread.active_run_id, run.status) == ("running", nxt, "queued")


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


#: A sweep that removes nothing: only the queue repair has work.
NOTHING_TO_REMOVE = RetentionPolicy(events_after_terminal=None, idempotency_ttl=None)


async def test_a_sweep_sets_stuck_queues_moving(store: Store) -> None:
    # Left behind by the races above before their fix: an idle thread with a
    # queued run, and a running thread whose active run was cancelled.
    idle = await make_thread(store)
    stranded = await queue_run(store, idle)  # queued on an idle thread: nothing promotes it
    stuck = await make_thread(store)
    ended = await start_run(store, stuck)
    behind = await queue_run(store, stuck)
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=stuck,
            update_runs=[
                RunUpdate(id=ended, status="cancelled", outcome="cancelled", ended_at=NOW)
            ],
        )
    )
    healthy = await make_thread(store)
    await start_run(store, healthy)
    before = await store.get_thread(SCOPE, healthy)
    report = await store.sweep(NOTHING_TO_REMOVE, encode_marker=lambda m: b"")
    assert report.repaired_queues == 2
    for thread_id, run_id in ((idle, stranded), (stuck, behind)):
        thread = await store.get_thread(SCOPE, thread_id)
        assert thread is not None
        assert (thread.status, thread.active_run_id) == ("running", run_id)
    assert await store.get_thread(SCOPE, healthy) == before
    # The promoted runs are the ones a runner takes.
    assert {(await claim(store)).run.id, (await claim(store)).run.id} == {stranded, behind}
    assert (await store.sweep(NOTHING_TO_REMOVE, encode_marker=lambda m: b"")).repaired_queues == 0
