"""Pooled PostgreSQL connections the server dropped are replaced on first use, not reported.

Connections are not pinged on checkout (that costs three round trips per
transaction); a connection the server closed while it sat in the pool (a
restart, an idle timeout, an administrator) must still not fail the next
request that picks it up.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy import Connection

from storage import RunUpdate, Store, WriteSet
from tests.conftest import POSTGRES_URL
from tests.storage.helpers import SCOPE, make_thread, start_run


def _backend_pid(conn: Connection) -> int:
    # The sleep keeps the connection checked out so concurrent reads take distinct ones.
    return int(conn.exec_driver_sql("SELECT pg_backend_pid() FROM pg_sleep(0.2)").scalar_one())


async def _terminate(pids: set[int]) -> None:
    admin = await asyncpg.connect(POSTGRES_URL)
    try:
        for pid in pids:
            await admin.execute("SELECT pg_terminate_backend($1)", pid)
        for _ in range(100):
            alive = await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = any($1::int[])", list(pids)
            )
            if alive == 0:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"backends {pids} still alive")
    finally:
        await admin.close()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"])
async def test_reads_and_writes_succeed_after_the_server_dropped_every_pooled_connection(
    store: Store,
) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    pids = set(await asyncio.gather(*(store.engines.read(_backend_pid) for _ in range(4))))
    assert len(pids) == 4
    await _terminate(pids)

    # Not inside a patient block: an outage would raise Unavailable at once.
    thread = await store.get_thread(SCOPE, thread_id)
    assert thread is not None
    assert thread.active_run_id == run_id
    await _terminate(
        set(await asyncio.gather(*(store.engines.read(_backend_pid) for _ in range(4))))
    )
    await store.commit(
        WriteSet(
            scope=SCOPE, thread_id=thread_id, update_runs=[RunUpdate(id=run_id, status="running")]
        )
    )
    run = await store.get_run(SCOPE, run_id)
    assert run is not None
    assert run.status == "running"
    fresh = set(await asyncio.gather(*(store.engines.read(_backend_pid) for _ in range(4))))
    assert not fresh & pids
