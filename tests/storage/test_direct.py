"""The hot statements run straight on the driver, and read and fail as Core's do.

A run's write transactions (on SQLite their BEGIN IMMEDIATE too; guarded
updates, inserts, the lookups around them) skip SQLAlchemy's execution
machinery (see :mod:`storage._direct`). Nothing a caller sees may change:
rows carry the same values and names (JSON decoded, timestamps parsed,
booleans as booleans), JSON ``None`` is stored as JSON ``null`` as Core
stores it, driver errors arrive as Core's exceptions, and the connection's
statement listeners still see every statement. A locked SQLite database
still raises ``OperationalError`` and moves the write to the writer thread
(``tests/storage/test_inline_writes.py`` holds the lock from another
process); a lost PostgreSQL connection is still an outage
(``tests/storage/test_outage.py`` stops the server).
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from sqlalchemy import bindparam, event, select, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import IntegrityError, NoResultFound

from pai_grpc.domain import new_id
from storage import NewRun, Store, upgrade
from storage._direct import DirectStatement, direct_execute
from storage._schema import messages, runs, threads
from tests.conftest import POSTGRES_URL, private_schema
from tests.storage.helpers import (
    SCOPE,
    claim,
    finish_and_promote,
    make_thread,
    send_on_idle,
    text_message,
)


class _Rollback(Exception):
    """Ends a test's transaction without committing it."""


async def _a_finished_run(store: Store) -> tuple[str, str]:
    """A thread with messages of every column shape and a run that ran and ended."""
    thread_id = await make_thread(store, team="ünï")
    run_id = new_id("run")
    await store.commit(
        send_on_idle(
            thread_id,
            [text_message("hi", run_id=run_id, metadata={"k": None}, visible_context=False)],
            [
                NewRun(
                    id=run_id,
                    status="queued",
                    initiator="send",
                    operation="send",
                    input={"n": [1, 2.5]},
                )
            ],
        )
    )
    claimed = await claim(store)
    await store.commit(finish_and_promote(claimed, thread_id, usage={"input_tokens": 3}))
    return thread_id, run_id


async def test_rows_read_through_the_driver_are_cores(store: Store) -> None:
    thread_id, run_id = await _a_finished_run(store)
    statements = [
        (select(threads).where(threads.c.id == bindparam("p_id")), {"p_id": thread_id}),
        (select(runs).where(runs.c.id == bindparam("p_id")), {"p_id": run_id}),
        (
            select(messages).where(messages.c.thread_id == bindparam("p_id")),
            {"p_id": thread_id},
        ),
    ]

    def both(conn: Any) -> list[tuple[Any, Any]]:
        pairs = []
        for stmt, params in statements:
            compiled = DirectStatement.compile(stmt, conn.dialect)
            assert compiled is not None
            pairs.append((conn.execute(stmt, params).all(), compiled.execute(conn, params).all()))
        return pairs

    for core, driver in await store.run_in_transaction(both):
        assert core
        assert driver == core
        assert [r._mapping for r in driver] == [r._mapping for r in core]
        assert [type(v) for v in driver[0]] == [type(v) for v in core[0]]


async def test_an_update_returns_what_core_reads_back(store: Store) -> None:
    thread_id, _ = await _a_finished_run(store)
    stmt = (
        update(threads)
        .where(threads.c.id == bindparam("p_id"))
        .values(version=threads.c.version + 1, metadata=bindparam("v_metadata"))
        .returning(*threads.c)
    )

    def run(conn: Any) -> tuple[Any, Any, Any]:
        compiled = DirectStatement.compile(stmt, conn.dialect)
        assert compiled is not None
        # None in a JSON column is JSON null, as Core binds it: not SQL NULL.
        returned = compiled.execute(conn, {"p_id": thread_id, "v_metadata": None}).one()
        sql_null = conn.execute(
            select(threads.c.metadata.is_(None)).where(threads.c.id == thread_id)
        ).scalar_one()
        read = conn.execute(select(threads).where(threads.c.id == thread_id)).one()
        return returned, sql_null, read

    returned, sql_null, read = await store.run_in_transaction(run)
    assert returned == read
    assert returned._mapping["version"] == read.version
    assert returned.metadata is None
    assert not sql_null


async def test_driver_errors_are_cores(store: Store) -> None:
    _, run_id = await _a_finished_run(store)
    missing = select(runs.c.id).where(runs.c.id == bindparam("p_id"))
    # A run's status is NOT NULL: the database refuses the update.
    unset = update(runs).where(runs.c.id == bindparam("p_id")).values(status=bindparam("v"))

    def run(conn: Any) -> None:
        found = DirectStatement.compile(missing, conn.dialect)
        refused = DirectStatement.compile(unset, conn.dialect)
        assert found is not None
        assert refused is not None
        with pytest.raises(NoResultFound):
            found.execute(conn, {"p_id": "run_none"}).one()
        with pytest.raises(IntegrityError) as caught:
            refused.execute(conn, {"p_id": run_id, "v": None})
        assert isinstance(caught.value.orig, conn.dialect.loaded_dbapi.IntegrityError)
        assert not caught.value.connection_invalidated
        assert refused.sql in str(caught.value)
        raise _Rollback

    with pytest.raises(_Rollback):
        await store.run_in_transaction(run)
    got = await store.get_run(SCOPE, run_id)
    assert got is not None
    assert got.status == "completed"


def test_statements_that_need_core_keep_its_path() -> None:
    expanding = select(messages).where(messages.c.id.in_(bindparam("p_ids", expanding=True)))
    assert DirectStatement.compile(expanding, sqlite.dialect()) is None  # type: ignore[no-untyped-call]


async def test_a_run_sends_its_statements_straight_to_the_driver(store: Store) -> None:
    """Listeners see every statement of a run, each without Core's execution context."""
    engines = store.engines
    seen: list[tuple[str, bool]] = []

    def note(
        _conn: Any, _cursor: Any, statement: str, _params: Any, context: Any, _many: Any
    ) -> None:
        seen.append((" ".join(statement.split()[:3]), context is None))

    watched = (
        [engines.async_engine.sync_engine]
        if engines.async_engine is not None
        else [e for e in (engines._sync_inline, engines._sync_write) if e is not None]
    )
    for engine in watched:
        event.listen(engine, "before_cursor_execute", note)
    try:
        await _a_finished_run(store)
    finally:
        for engine in watched:
            event.remove(engine, "before_cursor_execute", note)
    # Creating the thread goes through Core (once per thread, not per run).
    through_core = [s for s, direct in seen if not direct and s != "INSERT INTO threads"]
    assert through_core == []
    assert len([s for s, direct in seen if direct]) >= 4


@pytest.mark.postgres
async def test_a_statement_cut_short_by_a_cancellation_leaves_no_transaction_open() -> None:
    """A cancelled task's connection is invalidated, as Core does, not pooled as it was.

    A runner whose lease is lost cancels the execution, which may be waiting
    on the first statement of a commit: the driver has sent BEGIN and the
    server is in a transaction, but the adapter has not recorded it yet, so
    the rollback that follows does nothing. Pooled as it was, the connection
    sat idle in a transaction the pool did not know of (under the topology
    test's faults: runs stuck behind locks, events lost). Here the task is
    cancelled exactly then: at the first wait after its statement was handed
    to the driver.
    """
    async with private_schema() as schema:
        store = Store.open(POSTGRES_URL, schema=schema, pool_size=1)
        try:
            await upgrade(store)
            engine = store.engines.async_engine
            assert engine is not None

            def cancel_here(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
                if "cancel-here" in statement:
                    task = asyncio.current_task()
                    assert task is not None
                    task.cancel()

            event.listen(engine.sync_engine, "before_cursor_execute", cancel_here)
            try:
                cancelled = asyncio.create_task(
                    store.run_in_transaction(
                        lambda conn: direct_execute(conn, "SELECT 1 AS cancel_here -- cancel-here")
                    )
                )
                with pytest.raises(asyncio.CancelledError):
                    await cancelled
            finally:
                event.remove(engine.sync_engine, "before_cursor_execute", cancel_here)
            # Nothing of this schema's pool may be left inside a transaction.
            watcher = await asyncpg.connect(POSTGRES_URL)
            try:
                for _ in range(20):
                    open_ = await watcher.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'"
                        " AND query LIKE '%BEGIN%' AND datname = current_database()"
                        " AND pid <> pg_backend_pid()"
                    )
                    if open_ == 0:
                        break
                    await asyncio.sleep(0.1)
                assert open_ == 0
            finally:
                await watcher.close()
            one = await store.run_in_transaction(lambda c: c.exec_driver_sql("SELECT 1").scalar())
            assert one == 1
        finally:
            await store.close()
