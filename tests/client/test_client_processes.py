"""The Python client against real `pai-grpc serve` processes: kill -9 and restart mid-stream."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import grpc
import pytest

from pai.v1 import run_service_pb2, run_service_pb2_grpc
from pai_grpc.client import (
    InvalidArgumentError,
    NotFoundError,
    PaiClient,
    RetryPolicy,
    is_recovery_abort,
)
from pai_grpc.convert import run_event_from_proto
from pai_grpc.domain import ChunkEvent, RunEvent, StatusEvent, TextDeltaChunk
from tests.client.proxy import CuttableProxy
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


async def test_a_send_whose_reply_was_lost_is_retried_into_the_same_run(
    sqlite_url: str, tmp_path: Path
) -> None:
    server = Processes(tmp_path, sqlite_url, chunk_delay=0)
    server.migrate()
    server.serve(name="server")
    proxy = CuttableProxy(server.address)
    try:
        through = await proxy.start()
        async with (
            PaiClient(through, retry=PATIENT) as client,
            PaiClient(server.address, retry=PATIENT) as direct,
        ):
            thread = await client.create_thread()  # retried until the server is up
            proxy.holding = True
            sending = asyncio.create_task(thread.send("only once"))
            deadline = time.monotonic() + 30
            while not [r async for r in direct.runs(thread.id)]:
                assert time.monotonic() < deadline, server.log("server")
                await asyncio.sleep(0.05)
            proxy.cut()  # committed on the server; the client sees its connection reset
            run = await asyncio.wait_for(sending, 60)
            assert proxy.connections == 2, "the Send was retried on a new connection"
            assert [r.id async for r in direct.runs(thread.id)] == [run.id]
            assert (await run.wait()).status == "completed"
            users = [m async for m in thread.messages() if m.role == "user"]
            assert [m.id for m in users] == [run.message_id]

            # Errors from a real process are typed and carry their reasons.
            with pytest.raises(NotFoundError) as missing:
                await client.get_run("run_01J00000000000000000000000")
            assert missing.value.reason == "RUN_NOT_FOUND"
            with pytest.raises(InvalidArgumentError) as bad:
                await thread.send([])
            assert bad.value.reason
            assert [v.field for v in bad.value.violations]
    finally:
        await proxy.close()
        server.stop_all()
