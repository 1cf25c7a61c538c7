"""Runners are woken (PostgreSQL NOTIFY) when a run becomes runnable, and only then.

A run's end promotes the thread's next queued run; when there is none, a
wake-up would send every runner looking for work that is not there (on each
run's end, a wasted claim transaction per runner). Notifications of one
session arrive in commit order, so a marker sent after the write tells
"none was sent" apart from "not yet delivered" without waiting on a clock.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy import event

from pai_grpc.runtime._signals import RUNNABLE
from pai_grpc.testing import serve_in_process
from storage import PROMOTE_NEXT, RunUpdate, Store, ThreadPatch, VersionConflict, WriteSet
from tests.conftest import POSTGRES_URL
from tests.runtime.support import new_thread, send, wait_run
from tests.storage.helpers import SCOPE, make_thread, queue_run, start_run

MARKER = "marker"


class Heard:
    """Payloads NOTIFY delivered on one channel, up to a marker sent after the writes."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.payloads: list[str] = []
        self._marked = asyncio.Event()
        self._conn: asyncpg.Connection | None = None

    def _on(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        if payload == MARKER:
            self._marked.set()
        else:
            self.payloads.append(payload)

    async def __aenter__(self) -> Heard:
        self._conn = await asyncpg.connect(POSTGRES_URL)
        await self._conn.add_listener(self.channel, self._on)
        return self

    async def until_marker(self) -> list[str]:
        """Everything committed before now has been heard."""
        assert self._conn is not None
        await self._conn.execute("SELECT pg_notify($1, $2)", self.channel, MARKER)
        await asyncio.wait_for(self._marked.wait(), 30)
        return self.payloads

    async def __aexit__(self, *exc: object) -> None:
        assert self._conn is not None
        await self._conn.close()


def _end(run_id: str, thread_id: str, note: tuple[str, str]) -> WriteSet:
    return WriteSet(
        scope=SCOPE,
        thread_id=thread_id,
        thread=ThreadPatch(active_run_id=PROMOTE_NEXT),
        update_runs=[RunUpdate(id=run_id, status="completed", outcome="success")],
        notify_if_promoted=[note],
    )


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"])
async def test_a_promoting_write_notifies_and_one_that_promotes_nothing_does_not(
    store: Store,
) -> None:
    channel = store.channel(RUNNABLE)
    busy = await make_thread(store)
    first = await start_run(store, busy)
    await queue_run(store, busy)
    idle = await make_thread(store)
    alone = await start_run(store, idle)
    async with Heard(channel) as heard:
        await store.commit(_end(alone, idle, (channel, "alone")))
        await store.commit(_end(first, busy, (channel, "promoted")))
        assert await heard.until_marker() == ["promoted"]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"])
async def test_a_run_ending_with_nothing_queued_wakes_no_runner(database_url: str) -> None:
    async with serve_in_process(database_url) as srv:
        thread_id = await new_thread(srv)
        async with Heard(srv.store.channel(RUNNABLE)) as heard:
            for _ in range(2):
                await wait_run(srv, (await send(srv, thread_id, "hi")).run_id)
            assert await heard.until_marker() == []


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgresql"])
async def test_notifications_ride_on_the_root_update_and_a_refused_guard_sends_none(
    store: Store,
) -> None:
    """A commit that updates the thread sends its notifications in that statement.

    Listeners hear them on commit as before; the commit sends no statement of
    its own for them; a write refused by the root guard notifies nobody. Ten
    notifications (more than one statement carries) all arrive, in order.
    """
    channel = "pai_test_ride"
    thread_id = await make_thread(store)
    statements: list[str] = []

    def seen(_c: object, _cur: object, sql: str, *_: object) -> None:
        statements.append(sql)

    engine = store.engines.async_engine
    assert engine is not None
    event.listen(engine.sync_engine, "before_cursor_execute", seen)
    try:
        async with Heard(channel) as heard:
            await store.commit(
                WriteSet(
                    scope=SCOPE,
                    thread_id=thread_id,
                    thread=ThreadPatch(metadata={"k": "v"}),
                    notify=[(channel, "one"), (channel, "two")],
                )
            )
            assert not any("pg_notify" in sql and "UPDATE" not in sql for sql in statements)
            with pytest.raises(VersionConflict):
                await store.commit(
                    WriteSet(
                        scope=SCOPE,
                        thread_id=thread_id,
                        expected_version=99,
                        thread=ThreadPatch(metadata={"k": "w"}),
                        notify=[(channel, "refused")],
                    )
                )
            many = [(channel, f"n{i}") for i in range(10)]
            await store.commit(
                WriteSet(
                    scope=SCOPE,
                    thread_id=thread_id,
                    append_messages=[],
                    notify=many,
                    thread=ThreadPatch(metadata={"k": "x"}),
                )
            )
            assert await heard.until_marker() == ["one", "two"] + [f"n{i}" for i in range(10)]
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", seen)
