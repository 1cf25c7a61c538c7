"""A busy PostgreSQL pool keeps the connections it opened.

Each new connection costs the server process a TLS probe, the driver's type
introspection and a fresh prepare of every statement it runs. A pool that
closed the connections above its kept size on every return reopened them
on the next burst: under steady load (16 clients) about one connection
every 20 runs.
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import Connection

from storage import Store
from tests.conftest import POSTGRES_URL, private_schema

#: Transactions in flight at once: more than half the default pool, within all of it.
BURST = 16


def _backend_pid(conn: Connection) -> int:
    # The sleep keeps the connection checked out, so the burst's transactions overlap.
    return int(conn.exec_driver_sql("SELECT pg_backend_pid() FROM pg_sleep(0.1)").scalar_one())


@pytest.mark.postgres
async def test_bursts_of_transactions_reuse_the_connections_the_first_burst_opened() -> None:
    async with private_schema() as schema:
        # Sized as a server opens it.
        store = Store.open(POSTGRES_URL, schema=schema)
        try:
            bursts: list[set[int]] = []
            for _ in range(3):
                pids = await asyncio.gather(
                    *(store.engines.write(_backend_pid) for _ in range(BURST // 2)),
                    *(store.engines.read(_backend_pid) for _ in range(BURST // 2)),
                )
                bursts.append(set(pids))
            assert len(bursts[0]) == BURST
            # The later bursts ran on the first one's connections, and opened none.
            assert bursts[1] == bursts[0]
            assert bursts[2] == bursts[0]
        finally:
            await store.close()
