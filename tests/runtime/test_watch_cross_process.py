"""WatchThread delivers the same head events in every deployment shape.

Single process: the API and the runner share one process (local signals).
Split: the API and the runner are separate apps sharing only the database,
so every change the runner commits reaches watchers through PostgreSQL
LISTEN/NOTIFY. The split shape here runs both apps in this test process but
with nothing shared except PostgreSQL, which is exactly the cross-process
path (`serve --no-runner` + `runner`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import threads_pb2
from pai_grpc.config import Settings
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import RunnerProcess
from pai_grpc.testing import InProcessServer, migrated_store, serve_in_process
from tests.runtime.support import new_thread, send, wait_run
from tests.runtime.test_watch_and_scope import Watcher

#: (change, roles of the named messages) of one WatchThread event.
Event = tuple[str, tuple[str, ...]]


def _model() -> ScriptedModel:
    return ScriptedModel(["one two three"], chunk_delay=0.02)


@asynccontextmanager
async def _shape(name: str, url: str) -> AsyncIterator[InProcessServer]:
    if name == "single":
        async with serve_in_process(url, model=_model()) as srv:
            yield srv
        return
    async with serve_in_process(url, embedded_runner=False) as srv:
        runner = RunnerProcess(
            Settings(database_url=url),
            AgentRegistry([Agent(name=DEFAULT_AGENT, model=_model())]),
            store=await migrated_store(url),
        )
        await runner.start()
        try:
            yield srv
        finally:
            await runner.stop(grace=1)


async def _scenario(srv: InProcessServer) -> list[Event]:
    """Watch a thread through two runs and a metadata update; the events, normalised."""
    thread_id = await new_thread(srv)
    watch = Watcher(srv.threads.WatchThread(tpb.WatchThreadRequest(thread_id=thread_id)))
    raw: list[tpb.WatchThreadResponse] = []
    try:
        # The snapshot first: a Send committed before the watch is live would be
        # folded into the snapshot instead of arriving as its own event.
        snapshot = await watch.next(timeout=10)
        assert snapshot is not None
        assert snapshot.change == tpb.THREAD_CHANGE_SNAPSHOT, snapshot
        raw.append(snapshot)
        for runs, word in enumerate(("hi", "again"), start=1):
            handle = await send(srv, thread_id, word)
            await wait_run(srv, handle.run_id)
            # Each run commits its input and its answer. Send the next only once the
            # watcher has seen both: a watcher still behind would report the two
            # runs' commits as one change (correct, but not what is compared here).
            while sum(e.change == tpb.THREAD_CHANGE_MESSAGES_COMMITTED for e in raw) < 2 * runs:
                event = await watch.next(timeout=10)
                assert event is not None, f"watch stalled after {raw}"
                raw.append(event)
        # A last, distinct event marks the end of what the runs produced.
        await srv.threads.UpdateThreadMetadata(
            tpb.UpdateThreadMetadataRequest(thread_id=thread_id, metadata={"done": True})  # type: ignore[arg-type]
        )
        while not raw or raw[-1].change != tpb.THREAD_CHANGE_METADATA:
            event = await watch.next(timeout=10)
            assert event is not None, f"watch stalled after {raw}"
            raw.append(event)
    finally:
        watch.cancel()
    page = await srv.threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_id))
    roles = {m.id: {2: "user", 3: "assistant"}[m.role] for m in page.messages}
    out: list[Event] = []
    for event in raw:
        for message_id in event.message_ids:
            assert message_id in roles, f"unknown message {message_id} in {event}"
        out.append(
            (tpb.ThreadChange.Name(event.change), tuple(roles[i] for i in event.message_ids))
        )
    assert raw[-1].thread.status == threads_pb2.THREAD_STATUS_IDLE
    return out


def _committed(events: list[Event]) -> list[str]:
    return [
        r for kind, roles in events if kind == "THREAD_CHANGE_MESSAGES_COMMITTED" for r in roles
    ]


@pytest.mark.postgres
async def test_watch_events_are_the_same_in_one_process_and_across_processes(
    pg_schema: str,
) -> None:
    from tests.conftest import POSTGRES_URL

    url = f"{POSTGRES_URL}?schema={pg_schema}"
    seen: dict[str, list[Event]] = {}
    for shape in ("single", "split"):
        async with _shape(shape, url) as srv:
            seen[shape] = await _scenario(srv)
    for shape, events in seen.items():
        # Every commit names its messages exactly once: the two user messages and
        # the two answers, each in one MESSAGES_COMMITTED event, no duplicates.
        assert _committed(events) == ["user", "assistant", "user", "assistant"], (shape, events)
        assert all(kind != "THREAD_CHANGE_MESSAGES_REMOVED" for kind, _ in events), events
    assert seen["split"] == seen["single"]


async def test_a_watcher_going_away_is_not_an_error(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve_in_process(database_url, model=_model()) as srv:
        thread_id = await new_thread(srv)
        with caplog.at_level(logging.INFO):
            watchers = [
                Watcher(srv.threads.WatchThread(tpb.WatchThreadRequest(thread_id=thread_id)))
                for _ in range(3)
            ]
            for watch in watchers:
                assert await watch.next() is not None  # the snapshot: the stream is live
            for watch in watchers:
                watch.cancel()
            await asyncio.sleep(0.5)  # the server notices the cancellations
            handle = await send(srv, thread_id, "still fine")
            await wait_run(srv, handle.run_id)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
