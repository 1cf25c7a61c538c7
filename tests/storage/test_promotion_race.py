"""A run queued while the active run finishes is promoted, whichever commit waits for the other.

On PostgreSQL a statement reads the database as of its start. A finish
that promotes the thread's next queued run can start its update of the
thread while a Send that queues a run holds the thread's row: it waits,
and then updates the row as that Send left it, but its search for the next
queued run still reads as of before the Send committed. It must not leave
the thread idle with the Send's run queued behind nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg

from pai_grpc.domain import new_id
from storage import IdempotencyRecord, NewRun, Store, WriteSet
from tests.conftest import POSTGRES_URL, _asyncpg_dsn, private_schema
from tests.storage.helpers import SCOPE, claim, finish_and_promote, make_thread, start_run


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
        from storage import upgrade

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
