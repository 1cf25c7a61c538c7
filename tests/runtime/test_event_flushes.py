"""The chunk log is flushed every FLUSH_EVENTS events, not only every FLUSH_INTERVAL.

The first event of a batch schedules a flush after the interval; a full
batch must bring it forward. It did not: the flush already scheduled
slept on, so a step that streamed faster than the interval logged nothing
until its final commit (2,000 deltas at once, ~9 ms of inline SQLite work
with its live readers stalled), and an event above the seq reservation,
whose flush is forced, waited the interval too. Here the interval is an hour:
only the count can flush.
"""

from __future__ import annotations

import asyncio

import pytest

from pai.v1 import run_service_pb2, runs_pb2
from pai_grpc.models import HeldStep, ScriptedModel
from pai_grpc.runtime import _sink
from pai_grpc.server._scope import DEV_SCOPE
from pai_grpc.testing import InProcessServer, serve_in_process
from storage import SEQ_BLOCK
from tests.runtime.support import collect, new_thread, send, wait_run


async def _logged(srv: InProcessServer, run_id: str, at_least: int, timeout: float = 30) -> int:
    """How many events the log holds once it holds ``at_least`` (or the deadline passes)."""
    store = srv.store
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        count = len(await store.read_events(DEV_SCOPE, run_id, limit=100_000))
        if count >= at_least or asyncio.get_running_loop().time() > deadline:
            return count
        await asyncio.sleep(0.02)


async def test_a_burst_is_logged_batch_by_batch(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sink, "FLUSH_INTERVAL", 3600.0)
    release = asyncio.Event()
    batch = _sink.FLUSH_EVENTS
    words = 2 * batch + 50
    model = ScriptedModel([HeldStep(" ".join(["w"] * words), release, streamed=words)])
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "go")).run_id
        # Held after its text start and its deltas: every full batch is logged.
        logged = await _logged(srv, run_id, at_least=2 * batch)
        assert logged >= 2 * batch
        release.set()
        assert (await wait_run(srv, run_id)).status == runs_pb2.RUN_STATUS_COMPLETED


async def test_live_readers_get_events_past_the_reservation_while_the_model_holds(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events above the claim's reservation wait for a flush, which is forced at once."""
    monkeypatch.setattr(_sink, "FLUSH_INTERVAL", 3600.0)
    release = asyncio.Event()
    words = SEQ_BLOCK + 100
    model = ScriptedModel([HeldStep(" ".join(["w"] * words), release, streamed=words)])
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "go")).run_id
        deltas = 0

        async def read() -> list[runs_pb2.RunEvent]:
            nonlocal deltas
            events = []
            request = run_service_pb2.StreamRunRequest(run_id=run_id)
            async for response in srv.runs.StreamRun(request, timeout=60):
                events.append(response.event)
                if response.event.chunk.WhichOneof("chunk") == "text_delta":
                    deltas += 1
                    if deltas == words:
                        release.set()  # every held delta arrived live
            return events

        events = await asyncio.wait_for(read(), 60)
        assert deltas == words
        assert events[-1].status.status == runs_pb2.RUN_STATUS_COMPLETED
        assert [e.seq for e in events] == sorted({e.seq for e in events})
        assert [e.seq for e in await collect(srv, run_id)] == [e.seq for e in events]
