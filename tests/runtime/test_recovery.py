"""Lease loss and recovery: a lost runner writes nothing more; another one finishes the run."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from sqlalchemy import update

from pai.v1 import run_service_pb2, run_service_pb2_grpc, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc.config import Settings
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import RunnerProcess
from pai_grpc.testing import migrated_store, serve_in_process
from storage._schema import runs
from tests.conftest import POSTGRES_URL, private_schema
from tests.processes import Processes
from tests.runtime.support import collect, kinds, new_thread, send, text, transcript, wait_run

SLOW = " ".join(f"w{i}" for i in range(60))


@pytest.mark.rule("RT-09")
@pytest.mark.rule("RT-05")
async def test_a_runner_that_lost_its_lease_writes_nothing_more(database_url: str) -> None:
    slow = ScriptedModel([SLOW], chunk_delay=0.05)
    async with serve_in_process(database_url, model=slow, lease_seconds=1.5) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "go")
        await wait_run(srv, handle.run_id, statuses={runs_pb2.RUN_STATUS_RUNNING})
        await asyncio.sleep(0.3)
        # Simulate a stalled runner: its lease runs out (as after a long pause or partition).
        await srv.store.run_in_transaction(
            lambda c: c.execute(
                update(runs)
                .where(runs.c.id == handle.run_id)
                .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
            )
        )
        other_store = await migrated_store(database_url)
        other = RunnerProcess(
            Settings(database_url=database_url, lease_seconds=5),
            AgentRegistry([Agent(name=DEFAULT_AGENT, model=ScriptedModel(["recovered"]))]),
            store=other_store,
        )
        await other.start()
        try:
            run = await wait_run(srv, handle.run_id)
            assert run.status == runs_pb2.RUN_STATUS_COMPLETED
            assert run.attempts == 2
            await asyncio.sleep(1.0)  # give the lost execution every chance to write
            assert await transcript(srv, thread_id) == [("user", "go"), ("assistant", "recovered")]
            events = await collect(srv, handle.run_id)
            assert "abort" in kinds(events)  # readers are told to drop the lost partial step
            assert kinds(events)[-1] == "status:completed"
            # Strictly increasing; the recovered attempt starts above every number
            # the lost one may have published live (the log skips the rest).
            seqs = [e.seq for e in events]
            assert seqs == sorted(set(seqs))
            record = await srv.store.get_run("default", handle.run_id)
            assert record is not None
            assert record.step_count == 1
        finally:
            await other.stop(grace=1)


# ---- separate processes on PostgreSQL ---------------------------------------


@pytest.fixture
def pg_url() -> Iterator[str]:
    async def make() -> tuple[str, object]:
        ctx = private_schema()
        schema = await ctx.__aenter__()
        return schema, ctx

    loop = asyncio.new_event_loop()
    schema, ctx = loop.run_until_complete(make())
    try:
        yield f"{POSTGRES_URL}?schema={schema}"
    finally:
        loop.run_until_complete(ctx.__aexit__(None, None, None))  # type: ignore[attr-defined]
        loop.close()


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.rule("RT-03")
@pytest.mark.rule("RT-04")
async def test_kill_9_of_a_runner_process_is_recovered_by_another(
    pg_url: str, tmp_path: Path
) -> None:
    ps = Processes(tmp_path, pg_url)
    try:
        ps.migrate()
        ps.start("serve", "--no-runner", "--address", ps.address, name="server")
        runner_a = ps.start("runner", name="runner-a")
        async with grpc.aio.insecure_channel(ps.address) as channel:
            threads = tgrpc.ThreadServiceStub(channel)
            runs_stub = run_service_pb2_grpc.RunServiceStub(channel)
            deadline = time.monotonic() + 30
            while True:
                try:
                    created = await threads.CreateThread(tpb.CreateThreadRequest(), timeout=2)
                    break
                except grpc.aio.AioRpcError:
                    assert time.monotonic() < deadline, ps.log("server")
                    await asyncio.sleep(0.2)
            thread_id = created.thread.id

            first = (
                await threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("short one")]))
            ).run
            async for _ in runs_stub.StreamRun(
                run_service_pb2.StreamRunRequest(run_id=first.run_id)
            ):
                pass

            long_text = " ".join(f"word{i}" for i in range(80))  # ~4 s of streaming
            second = (
                await threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text(long_text)]))
            ).run
            seen = []
            stream = runs_stub.StreamRun(run_service_pb2.StreamRunRequest(run_id=second.run_id))
            async for response in stream:
                seen.append(response.event)
                if sum(e.chunk.WhichOneof("chunk") == "text_delta" for e in seen) >= 5:
                    break
            stream.cancel()
            runner_a.send_signal(signal.SIGKILL)  # mid-run, mid-step
            runner_a.wait()
            ps.start("runner", name="runner-b")

            rest = []
            async for response in runs_stub.StreamRun(
                run_service_pb2.StreamRunRequest(run_id=second.run_id, after_seq=seen[-1].seq),
                timeout=60,
            ):
                rest.append(response.event)
            assert kinds(rest)[-1] == "status:completed", ps.log("runner-b")
            assert "abort" in kinds(rest)  # the lost partial step is voided for readers
            # Strictly increasing after the cursor; not dense across the recovery.
            seqs = [e.seq for e in rest]
            assert seqs == sorted(set(seqs))
            assert seqs[0] > seen[-1].seq

            run = (await runs_stub.GetRun(run_service_pb2.GetRunRequest(run_id=second.run_id))).run
            assert run.status == runs_pb2.RUN_STATUS_COMPLETED
            assert run.attempts == 2
            assert run.step_count == 1
            page = await threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_id))
            bodies = [
                ("user" if m.role == 2 else "assistant", m.parts[-1].text.text)
                for m in page.messages
            ]
            # No committed step lost, none duplicated.
            assert [r for r, _ in bodies] == ["user", "assistant", "user", "assistant"]
            assert bodies[0][1] == "short one"
            assert bodies[1][1].endswith("You said: short one")
            assert bodies[2][1] == long_text
            assert bodies[3][1].endswith(f"You said: {long_text}")
    finally:
        ps.stop_all()


@pytest.mark.postgres
@pytest.mark.slow
async def test_cancel_reaches_a_runner_in_another_process(pg_url: str, tmp_path: Path) -> None:
    # A 60 s lease: the runner's first heartbeat (which would also report the
    # cancellation) comes 20 s in, so only LISTEN/NOTIFY meets the bound below.
    ps = Processes(tmp_path, pg_url, lease_seconds=60.0)
    try:
        ps.migrate()
        ps.start("serve", "--no-runner", "--address", ps.address, name="server")
        ps.start("runner", name="runner")
        async with grpc.aio.insecure_channel(ps.address) as channel:
            threads = tgrpc.ThreadServiceStub(channel)
            runs_stub = run_service_pb2_grpc.RunServiceStub(channel)
            deadline = time.monotonic() + 30
            while True:
                try:
                    created = await threads.CreateThread(tpb.CreateThreadRequest(), timeout=2)
                    break
                except grpc.aio.AioRpcError:
                    assert time.monotonic() < deadline, ps.log("server")
                    await asyncio.sleep(0.2)
            long_text = " ".join(f"word{i}" for i in range(200))
            handle = (
                await threads.Send(
                    tpb.SendRequest(thread_id=created.thread.id, parts=[text(long_text)])
                )
            ).run
            stream = runs_stub.StreamRun(run_service_pb2.StreamRunRequest(run_id=handle.run_id))
            async for response in stream:
                if response.event.chunk.WhichOneof("chunk") == "text_delta":
                    break
            started = time.monotonic()
            run = (
                await runs_stub.CancelRun(
                    run_service_pb2.CancelRunRequest(run_id=handle.run_id, reason="stop please")
                )
            ).run
            assert run.status == runs_pb2.RUN_STATUS_CANCELLED, ps.log("runner")
            assert run.reason == "stop please"
            tail = [r.event async for r in stream]
            # The runner stopped streaming and wrote the cancellation by NOTIFY,
            # well before its first heartbeat (lease/3 = 20 s) could tell it.
            assert time.monotonic() - started < 5, ps.log("runner")
            assert kinds(tail)[-1] == "status:cancelled"
            page = await threads.ListMessages(tpb.ListMessagesRequest(thread_id=created.thread.id))
            assert len(page.messages) == 1  # the partial step was not committed
    finally:
        ps.stop_all()
