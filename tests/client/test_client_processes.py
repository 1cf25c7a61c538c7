"""The Python client against real `pai-grpc serve` processes: kill -9 and restart mid-stream."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import grpc
import pytest

from pai.v1 import run_service_pb2, run_service_pb2_grpc
from pai_grpc.client import PaiClient, RetryPolicy, is_recovery_abort
from pai_grpc.convert import run_event_from_proto
from pai_grpc.domain import ChunkEvent, RunEvent, StatusEvent, TextDeltaChunk
from tests.processes import Processes

pytestmark = pytest.mark.slow

#: Patient enough to outlast a server restart (a few seconds), still bounded.
PATIENT = RetryPolicy(max_attempts=80, initial_backoff=0.05, max_backoff=0.5)


def _comparable(event: RunEvent) -> tuple[int, str]:
    # Live delivery and the log may stamp an event differently; the content is the contract.
    return event.seq, event.payload.model_dump_json()


async def _durable_log(address: str, run_id: str) -> list[RunEvent]:
    """The run's log, read with a plain stub (not the client under test)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = run_service_pb2_grpc.RunServiceStub(channel)
        request = run_service_pb2.StreamRunRequest(run_id=run_id)
        return [run_event_from_proto(r.event) async for r in stub.StreamRun(request, timeout=30)]


async def test_a_run_stream_survives_kill_9_and_a_server_restart(
    database_url: str, tmp_path: Path
) -> None:
    server = Processes(tmp_path, database_url, chunk_delay=0.02)
    server.migrate()
    first = server.serve(name="server-a")
    words = " ".join(f"w{i}" for i in range(100))
    try:
        async with PaiClient(server.address, retry=PATIENT) as client:
            thread = await client.create_thread()  # retried until the server is up
            run = await thread.send(words)
            received: list[RunEvent] = []
            killed = False
            async for event in run.stream():
                received.append(event)
                deltas = sum(
                    isinstance(e.payload, ChunkEvent)
                    and isinstance(e.payload.chunk, TextDeltaChunk)
                    for e in received
                )
                if not killed and deltas >= 20:
                    first.kill()  # SIGKILL mid-step: no drain, no goodbye
                    await asyncio.to_thread(first.wait)
                    server.serve(name="server-b")
                    killed = True
            assert killed
            finished = await run.get()
            assert finished.status == "completed", server.log("server-b")
            assert finished.attempts >= 2  # the lost execution was recovered
            reply = await run.text()
        log = await _durable_log(server.address, run.id)
    finally:
        server.stop_all()

    last = received[-1].payload
    assert isinstance(last, StatusEvent)
    assert last.status == "completed"
    seqs = [e.seq for e in received]
    assert seqs == sorted(set(seqs)), "strictly increasing: no event twice"
    assert any(is_recovery_abort(e) for e in received), "the kill landed mid-step"
    # Dense, apart from the documented skip right before a recovery abort.
    for before, after in itertools.pairwise(received):
        assert after.seq == before.seq + 1 or is_recovery_abort(after), (before, after)
    # Equal to the durable log: every durable event arrived, identical ...
    by_seq = {e.seq: _comparable(e) for e in received}
    for event in log:
        assert by_seq.get(event.seq) == _comparable(event), f"seq {event.seq} missing or differs"
    # ... and whatever arrived beyond it was a lost partial step, voided by a recovery abort.
    durable = {e.seq for e in log}
    for i, event in enumerate(received):
        if event.seq not in durable:
            following = next(e for e in received[i:] if e.seq in durable)
            assert is_recovery_abort(following), (event, following)
    assert reply.endswith(f"You said: {words}")
