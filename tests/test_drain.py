"""Graceful drain: in-flight runs finish within the grace period, or are handed back."""

from __future__ import annotations

import asyncio

from pai.v1 import parts_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.config import Settings
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import App
from pai_grpc.testing import migrated_store, serve_in_process


def text(s: str) -> parts_pb2.MessagePart:
    return parts_pb2.MessagePart(text=parts_pb2.TextPart(text=s))


async def start_slow_run(srv, delay: float) -> tuple[str, str]:  # type: ignore[no-untyped-def]
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
        _, run_id = await start_slow_run(srv, 0.1)
        await srv.app.stop(grace=10)
        store = await migrated_store(sqlite_url)
        run = await store.get_run("default", run_id)
        await store.close()
        assert run is not None
        assert run.status == "completed"
        # serve_in_process stops the app again on exit; that must be harmless
        srv.app.stop = _noop  # type: ignore[method-assign]


async def _noop(grace: float | None = None) -> None:
    return None


async def test_drain_hands_back_runs_that_outlive_the_grace(sqlite_url: str) -> None:
    model = ScriptedModel(["slow " * 50], chunk_delay=0.2)
    async with serve_in_process(sqlite_url, model=model) as srv:
        thread_id, run_id = await start_slow_run(srv, 0.2)
        await srv.app.stop(grace=0.2)
        srv.app.stop = _noop  # type: ignore[method-assign]

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
