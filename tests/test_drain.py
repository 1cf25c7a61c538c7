"""Graceful drain: in-flight runs finish within the grace period, or are handed back."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai.v1 import parts_pb2, run_service_pb2, run_service_pb2_grpc, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc.config import Settings
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import App
from pai_grpc.testing import migrated_store, serve_in_process
from tests.processes import free_port


def text(s: str) -> parts_pb2.MessagePart:
    return parts_pb2.MessagePart(text=parts_pb2.TextPart(text=s))


async def start_slow_run(srv) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    thread_id = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    sent = await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("go")]))
    for _ in range(200):  # wait until the runner holds it
        run = await srv.store.get_run("default", sent.run.run_id)
        if run is not None and run.lease_owner:
            break
        await asyncio.sleep(0.01)
    return thread_id, sent.run.run_id


async def test_drain_lets_in_flight_runs_finish(sqlite_url: str) -> None:
    model = ScriptedModel(["a b c d e"], chunk_delay=0.1)
    async with serve_in_process(sqlite_url, model=model) as srv:
        run_id = (await start_slow_run(srv))[1]
        await srv.app.stop(grace=10)
        store = await migrated_store(sqlite_url)
        run = await store.get_run("default", run_id)
        await store.close()
        assert run is not None
        assert run.status == "completed"
        # serve_in_process stops the app again on exit: App.stop is idempotent.


async def test_drain_hands_back_runs_that_outlive_the_grace(sqlite_url: str) -> None:
    model = ScriptedModel(["slow " * 50], chunk_delay=0.2)
    async with serve_in_process(sqlite_url, model=model) as srv:
        thread_id, run_id = await start_slow_run(srv)
        await srv.app.stop(grace=0.2)
        # serve_in_process stops the app again on exit: App.stop is idempotent.

    store = await migrated_store(sqlite_url)
    run = await store.get_run("default", run_id)
    assert run is not None
    assert run.status == "running"
    assert run.lease_owner is None  # released: claimable at once, not after lease expiry
    # A new server picks it up and finishes it.
    fast = ScriptedModel(["done"])
    app = App(
        Settings(address="127.0.0.1:0", database_url=sqlite_url),
        AgentRegistry([Agent(name=DEFAULT_AGENT, model=fast)]),
        store=store,
    )
    await app.start()
    try:
        for _ in range(500):
            run = await store.get_run("default", run_id)
            assert run is not None
            if run.status == "completed":
                break
            await asyncio.sleep(0.02)
        assert run.status == "completed"
        assert run.attempts == 2
        page = await store.list_messages("default", thread_id)
        assert [m.role for m in page.items] == ["user", "assistant"]
    finally:
        await app.stop(grace=1)


# ---- SIGTERM on a real `serve` process ----------------------------------------


def _spawn(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=log)


@pytest.mark.slow
async def test_sigterm_reports_not_serving_while_streams_finish(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    config = tmp_path / "pai.toml"
    config.write_text("[runner]\ngrace_seconds = 20\n\n[offline]\nchunk_delay = 0.05\n")
    env = {
        **os.environ,
        "PAI_DATABASE_URL": f"sqlite:///{tmp_path / 'pai.db'}",
        "PAI_CONFIG": str(config),
    }
    env.pop("ANTHROPIC_API_KEY", None)
    exe = [sys.executable, "-m", "pai_grpc.cli"]
    migrated = subprocess.run([*exe, "migrate"], env=env, capture_output=True, timeout=60)
    assert migrated.returncode == 0, migrated.stderr
    log_path = tmp_path / "server.log"
    proc = _spawn([*exe, "serve", "--address", address], env, log_path)
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            threads = tgrpc.ThreadServiceStub(channel)
            runs = run_service_pb2_grpc.RunServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            await channel.channel_ready()
            for _ in range(300):  # the server is up once health answers SERVING
                try:
                    got = await health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                    if got.status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.1)
            thread_id = (await threads.CreateThread(tpb.CreateThreadRequest())).thread.id
            long_text = " ".join(f"word{i}" for i in range(60))  # ~3 s of streaming
            handle = (
                await threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text(long_text)]))
            ).run
            stream = runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=handle.run_id))
            events: list[runs_pb2.RunEvent] = []
            async for response in stream:
                events.append(response.event)
                if response.event.chunk.WhichOneof("chunk") == "text_delta":
                    break
            proc.send_signal(signal.SIGTERM)

            # Health turns NOT_SERVING (and keeps answering) while the run drains.
            statuses = []
            for _ in range(100):
                got = await health.Check(health_pb2.HealthCheckRequest(), timeout=2)
                statuses.append(got.status)
                if got.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                    break
                await asyncio.sleep(0.05)
            assert statuses[-1] == health_pb2.HealthCheckResponse.NOT_SERVING, statuses
            for service in ("pai.v1.ThreadService", "pai.v1.RunService"):
                got = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
                assert got.status == health_pb2.HealthCheckResponse.NOT_SERVING
            seen_before = len(events)
            # ...and the existing stream keeps receiving events until the run completes.
            async for response in stream:
                events.append(response.event)
            assert len(events) > seen_before + 5
            last = events[-1]
            assert last.WhichOneof("event") == "status", last
            assert last.status.status == runs_pb2.RUN_STATUS_COMPLETED
        assert await asyncio.to_thread(proc.wait, 30) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = log_path.read_text()
    assert " ERROR " not in output, output
