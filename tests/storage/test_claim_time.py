"""A claim is stamped with the time it took the run, not when its transaction began."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from sqlalchemy import Connection

from pai_grpc.domain import new_id
from storage import NOW, ClaimedRun, NewRun, Store, upgrade
from tests.conftest import POSTGRES_URL
from tests.storage.helpers import (
    SCOPE,
    claim,
    finish_and_promote,
    make_thread,
    queue_run,
    send_on_idle,
    start_run,
    text_message,
)


def _finish_elsewhere(schema: str, current: ClaimedRun, thread_id: str) -> None:
    """End ``current`` (promoting the next run) from another process's view: own loop, own pool."""

    async def finish() -> None:
        other = Store.open(POSTGRES_URL, schema=schema)
        try:
            await other.commit(
                finish_and_promote(current, thread_id, outcome="completed", ended_at=NOW)
            )
        finally:
            await other.close()

    asyncio.run(finish())


async def test_a_run_never_starts_before_the_run_it_queued_behind_ended(pg_schema: str) -> None:
    """On PostgreSQL a claim's transaction may begin before its run becomes runnable.

    The claiming transaction reads the clock, then the thread's current run
    ends elsewhere and promotes the next one, then the claim takes it: the
    claimed run's start must not precede the end of the run before it.
    """
    store = Store.open(POSTGRES_URL, schema=pg_schema)
    try:
        await upgrade(store)
        thread_id = await make_thread(store)
        first = await start_run(store, thread_id)
        second = await queue_run(store, thread_id)
        current = await claim(store, "r1")
        assert current.run.id == first

        def claim_late(conn: Connection) -> ClaimedRun | None:
            store._sql.now(conn)  # the transaction's clock is read here
            done = threading.Thread(target=_finish_elsewhere, args=(pg_schema, current, thread_id))
            done.start()
            done.join()
            return store._sql.claim_run(conn, "r2", 30.0)

        claimed = await store.engines.write(claim_late)
        assert claimed is not None
        assert claimed.run.id == second
        ended = (await store.get_run(SCOPE, first)).ended_at  # type: ignore[union-attr]
        assert ended is not None
        assert claimed.run.started_at is not None
        assert ended <= claimed.run.started_at
        assert claimed.lease.expires_at == claimed.run.lease_expires_at
    finally:
        await store.close()


async def test_a_run_a_send_starts_on_a_thread_that_just_went_idle_starts_after_it(
    pg_schema: str,
) -> None:
    """A Send commits to an idle thread without reading it first (its guard decides).

    Its transaction reads the clock, then the thread's run ends elsewhere,
    then the Send's guarded update (which waited for that run's row lock, or
    simply ran after it) starts the new run: that run must not seem to start
    before the previous one ended.
    """
    store = Store.open(POSTGRES_URL, schema=pg_schema)
    try:
        await upgrade(store)
        thread_id = await make_thread(store)
        first = await start_run(store, thread_id)
        current = await claim(store, "r1")
        assert current.run.id == first
        real = store._sql._update_root

        def update_root_late(conn: Connection, *args: Any) -> Any:
            done = threading.Thread(target=_finish_elsewhere, args=(pg_schema, current, thread_id))
            done.start()
            done.join()
            return real(conn, *args)

        store._sql._update_root = update_root_late  # type: ignore[method-assign]
        run_id = new_id("run")
        run = NewRun(
            id=run_id,
            status="queued",
            initiator="send",
            operation="send",
            lease_owner="r2",
            lease_seconds=30.0,
        )
        result = await store.commit(
            send_on_idle(thread_id, [text_message("again", run_id=run_id)], [run])
        )
        ended = (await store.get_run(SCOPE, first)).ended_at  # type: ignore[union-attr]
        started = result.runs[0].started_at
        assert ended is not None
        assert started is not None
        assert ended <= started
        assert ended <= result.messages[0].created_at
    finally:
        await store.close()
