"""StreamRun resume across a kill -9 of the executing server: no mix, no gap, no duplicate.

Readers attached to the executing process see events before the chunk log
has them. After kill -9 the run is recovered by a new process; every reader
resumes from the last sequence number it received and must get exactly the
durable log after that cursor (the recovered attempt never reuses a number
the dead process may have published).
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import grpc
import pytest

from pai.v1 import run_service_pb2, run_service_pb2_grpc, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc.models import ScriptedModel
from pai_grpc.testing import serve_in_process
from storage import Store
from tests.processes import Processes
from tests.runtime.support import TERMINAL, collect, new_thread, send, text

READERS = 4


def _payload(event: runs_pb2.RunEvent) -> bytes:
    """The event without its timestamp (compared across live delivery and the log)."""
    copy = runs_pb2.RunEvent()
    copy.CopyFrom(event)
    copy.ClearField("time")
    return copy.SerializeToString(deterministic=True)


def _is_recovery_abort(event: runs_pb2.RunEvent) -> bool:
    return (
        event.WhichOneof("event") == "chunk"
        and event.chunk.WhichOneof("chunk") == "abort"
        and event.chunk.abort.reason == "recovery"
    )


async def _ready(threads: tgrpc.ThreadServiceStub, server: Processes, name: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            await threads.ListThreads(tpb.ListThreadsRequest(), timeout=2)
            return
        except grpc.aio.AioRpcError:
            assert time.monotonic() < deadline, server.log(name)
            await asyncio.sleep(0.1)


@pytest.mark.slow
async def test_readers_resume_after_kill_9_without_mix_gap_or_duplicate(
    database_url: str, tmp_path: Path
) -> None:
    server = Processes(tmp_path, database_url, chunk_delay=0.004)
    try:
        server.migrate()
        first = server.serve(name="server-a")
        async with grpc.aio.insecure_channel(server.address) as channel:
            threads = tgrpc.ThreadServiceStub(channel)
            runs = run_service_pb2_grpc.RunServiceStub(channel)
            await _ready(threads, server, "server-a")
            thread_id = (await threads.CreateThread(tpb.CreateThreadRequest())).thread.id
            long_text = " ".join(f"w{i}" for i in range(600))
            run_id = (
                await threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text(long_text)]))
            ).run.run_id

            live: list[list[runs_pb2.RunEvent]] = [[] for _ in range(READERS)]

            async def read(n: int) -> None:
                try:
                    async for response in runs.StreamRun(
                        run_service_pb2.StreamRunRequest(run_id=run_id), timeout=60
                    ):
                        live[n].append(response.event)
                except grpc.aio.AioRpcError:
                    pass  # the server died under the stream

            readers = [asyncio.create_task(read(n)) for n in range(READERS)]
            deadline = time.monotonic() + 30
            store = Store.open(database_url)
            try:
                while True:
                    assert time.monotonic() < deadline, server.log("server-a")
                    await asyncio.sleep(0.005)
                    deltas = sum(e.chunk.WhichOneof("chunk") == "text_delta" for e in live[0])
                    if deltas < 40:
                        continue
                    # Freeze the server so the log cannot move between the check and the
                    # kill (a flush lands every 50 ms), let the readers drain their sockets,
                    # then kill only while a reader holds events the log does not have yet.
                    first.send_signal(signal.SIGSTOP)
                    await asyncio.sleep(0.1)
                    record = await store.get_run("default", run_id)
                    assert record is not None
                    if live[0][-1].seq > record.last_seq:
                        break
                    first.send_signal(signal.SIGCONT)
            finally:
                await store.close()
            first.send_signal(signal.SIGKILL)  # mid-step: events are live but not all durable
            first.wait()
            await asyncio.gather(*readers)

        server.serve(name="server-b")
        async with grpc.aio.insecure_channel(server.address) as channel:
            threads = tgrpc.ThreadServiceStub(channel)
            runs = run_service_pb2_grpc.RunServiceStub(channel)
            await _ready(threads, server, "server-b")

            async def resume(cursor: int) -> list[runs_pb2.RunEvent]:
                return [
                    r.event
                    async for r in runs.StreamRun(
                        run_service_pb2.StreamRunRequest(run_id=run_id, after_seq=cursor),
                        timeout=60,
                    )
                ]

            cursors = [events[-1].seq if events else 0 for events in live]
            resumed = await asyncio.gather(*(resume(c) for c in cursors))
            run = (await runs.GetRun(run_service_pb2.GetRunRequest(run_id=run_id))).run
            assert run.status in TERMINAL
            assert run.status == runs_pb2.RUN_STATUS_COMPLETED, server.log("server-b")
            assert run.attempts >= 2
            log = await resume(0)

        log_seqs = [e.seq for e in log]
        assert log_seqs == sorted(set(log_seqs)), "the log is strictly increasing"
        by_seq = {e.seq: _payload(e) for e in log}
        beyond = 0
        for n in range(READERS):
            seen = live[n]
            seqs = [e.seq for e in seen]
            assert seqs == sorted(set(seqs)), f"reader {n}: live seqs strictly increasing"
            for e in seen:
                if e.seq in by_seq:
                    assert _payload(e) == by_seq[e.seq], (
                        f"reader {n}: seq {e.seq} was {e} live but differs in the log"
                    )
            cursor = cursors[n]
            expected = [_payload(e) for e in log if e.seq > cursor]
            got = [_payload(e) for e in resumed[n]]
            assert got == expected, f"reader {n}: resuming after {cursor} != the log after it"
            assert not set(seqs) & {e.seq for e in resumed[n]}, f"reader {n}: a seq twice"
            if cursor and cursor not in by_seq:
                beyond += 1
                # Live events beyond the durable log were a lost partial step: drop it.
                assert _is_recovery_abort(resumed[n][0]), f"reader {n}: {resumed[n][0]}"
        # Each live reader was ahead of the durable log when the server died (the case under test).
        assert beyond >= 1, (cursors, log_seqs[:5])
    finally:
        server.stop_all()


async def test_live_events_never_run_ahead_of_the_durable_reservation(database_url: str) -> None:
    # No delay: emission outruns the batched flushes, so publication must wait for them.
    words = " ".join(f"w{i}" for i in range(3000))
    async with serve_in_process(database_url, model=ScriptedModel([words])) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "go")).run_id
        reader = asyncio.create_task(collect(srv, run_id, timeout=60))
        broker = srv.app.runtime.broker
        while not reader.done():
            channel = broker.channel(run_id)
            kept = list(channel.since(0)) if channel is not None else []
            if kept:
                record = await srv.store.get_run("default", run_id)
                assert record is not None
                # Read after the channel: the reservation only grows while it executes.
                assert kept[-1].seq <= record.reserved_seq
            await asyncio.sleep(0)
        live = await reader
        log = await collect(srv, run_id)
        assert [_payload(e) for e in live] == [_payload(e) for e in log]
        assert [e.seq for e in log] == list(range(1, len(log) + 1))  # dense without a crash


@pytest.mark.parametrize("release", [True, False], ids=["last commit", "step commit"])
async def test_a_commit_publishes_live_in_order_what_it_made_durable(
    sqlite_url: str, release: bool
) -> None:
    """Events held above the reservation go out before the commit's own, with no gap.

    Deterministic form of the race above: five chunks are emitted with a
    reservation of two, so three wait in the sink; then a commit makes them
    durable with two events of its own. A live reader must see 1..7 in order.
    Before the fix it saw 1, 2, 6, 7 after the run's last commit (which
    releases the lease), and 1, 2, 6, 7, 3, 4, 5 after a step commit.
    """
    from datetime import UTC, datetime, timedelta

    from pai_grpc.domain import ChunkEvent, RunEvent, StatusEvent, TextDeltaChunk
    from pai_grpc.runtime._records import encode_event
    from pai_grpc.runtime._sink import EventSink
    from storage import Lease

    async with serve_in_process(sqlite_url) as srv:
        expires = datetime.now(UTC) + timedelta(minutes=1)
        sink = EventSink(
            services=srv.app.runtime.services,
            scope="default",
            thread_id="thr_x",
            run_id="run_x",
            lease=Lease("run_x", "owner", 1, expires),
            first_seq=1,
            reserved_seq=2,
        )
        try:
            for i in range(5):  # no await in between: no flush can run
                sink.emit(ChunkEvent(chunk=TextDeltaChunk(id="t", text=f"w{i}")))
            assert [e.seq for e in sink.channel.since(0)] == [1, 2]
            pending = sink.take_pending()
            assert [e.seq for e in pending] == [1, 2, 3, 4, 5]
            seqs = sink.allocate(2)
            now = datetime.now(UTC)
            built = [
                encode_event("run_x", RunEvent(seq=q, time=now, payload=StatusEvent(status=s)))[1]
                for q, s in zip(seqs, ["running", "completed"], strict=True)
            ]
            # As RunCommitter does once the releasing commit is durable.
            reserved = sink.reservation(seqs[-1], release=release)
            sink.mark_durable(seqs[-1], reserved=reserved, release=release)
            sink.published(built)
            assert [e.seq for e in sink.channel.since(0)] == [1, 2, 3, 4, 5, 6, 7]
        finally:
            await sink.close()
