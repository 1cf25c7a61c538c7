"""Hook calls on a run's timeline: one durable ``hook_call`` event per hook call.

Runs go through Send / StreamRun against a real store of each backend, with
an in-process hook composed with a remote plugin served by the plugin SDK
(and the fake plugin for failures), and the events are read live and again
from the durable log once the run is terminal.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pai.v1 import run_service_pb2, runs_pb2
from pai_grpc.lifecycle import (
    AfterStepInput,
    AgentLifecycle,
    Complete,
    Continue,
    PrepareModelStepInput,
    PrepareRunInput,
    RunPatch,
)
from pai_grpc.lifecycle import compose_lifecycle as compose
from pai_grpc.models import ScriptedModel
from pai_grpc.plugin_sdk import serve_plugin
from pai_grpc.plugins import HookHost, PhasePolicy, PluginConfig, RemoteLifecycle
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import InProcessServer, serve_in_process
from tests.plugins.fakes import Behaviour, Running, serve_fake
from tests.runtime.support import collect, new_thread, send

Call = tuple[str, str, str, str, int | None, str | None]


class Local(AgentLifecycle):
    """An in-process hook: patches the run, has nothing to say after the step."""

    name = "local"

    async def prepare_run(self, input: PrepareRunInput) -> Any:
        return Continue(patch=RunPatch(max_steps=3))

    async def after_step(self, input: AfterStepInput) -> Any:
        return None


class Guard(AgentLifecycle):
    """Served as a remote plugin: lets the step through, then completes the run."""

    async def prepare_model_step(self, input: PrepareModelStepInput) -> Any:
        return None

    async def after_step(self, input: AfterStepInput) -> Any:
        return Complete()


@contextlib.asynccontextmanager
async def server(
    database_url: str, *parts: AgentLifecycle, address: str = "", **plugin: Any
) -> AsyncIterator[InProcessServer]:
    """One agent whose lifecycle is ``parts`` then the plugin at ``address`` (if any)."""
    async with contextlib.AsyncExitStack() as stack:
        hooks = list(parts)
        if address:
            host = HookHost()
            stack.push_async_callback(host.close)
            remote = RemoteLifecycle(PluginConfig(address=address, **plugin), host)
            await remote.connect()
            stack.push_async_callback(remote.close)
            hooks.append(remote)
        agent = Agent(
            name=DEFAULT_AGENT,
            model=ScriptedModel(["hello world"]),
            lifecycle=compose(*hooks) if hooks else None,
        )
        yield await stack.enter_async_context(
            serve_in_process(database_url, agents=AgentRegistry([agent]))
        )


async def run_events(srv: InProcessServer) -> tuple[runs_pb2.Run, list[runs_pb2.RunEvent]]:
    """Run one turn; its events as streamed live, checked equal to the durable log's."""
    handle = await send(srv, await new_thread(srv), "hi")
    live = await collect(srv, handle.run_id)
    run = (await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=handle.run_id))).run
    logged = [
        r.event
        async for r in srv.runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=handle.run_id))
    ]
    assert [(e.seq, e.hook_call) for e in logged if e.HasField("hook_call")] == [
        (e.seq, e.hook_call) for e in live if e.HasField("hook_call")
    ]
    return run, live


def calls(events: list[runs_pb2.RunEvent]) -> list[Call]:
    """(phase, hook, outcome, decision, step, reason) of each hook_call event, in order."""
    out: list[Call] = []
    for e in events:
        if e.WhichOneof("event") == "hook_call":
            h = e.hook_call
            assert h.duration_ms >= 0
            step = h.step if h.HasField("step") else None
            out.append((h.phase, h.hook, h.outcome, h.decision, step, h.reason or None))
    return out


async def test_in_process_and_remote_hook_calls_are_on_the_timeline_in_order(
    database_url: str,
) -> None:
    plugin = await serve_plugin(Guard(), name="guard")
    try:
        async with server(database_url, Local(), address=plugin.address) as srv:
            run, events = await run_events(srv)
    finally:
        await plugin.stop(0.5)
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    assert calls(events) == [
        ("prepare_run", "local", "ok", "continue", None, None),
        ("prepare_model_step", "guard", "ok", "none", 0, None),
        ("after_step", "local", "ok", "none", 0, None),
        ("after_step", "guard", "ok", "complete", 0, None),
    ]
    kinds = [e.WhichOneof("event") for e in events]
    # Before the step's model output (prepare), after the committed step message (after_step).
    assert kinds.index("hook_call") < kinds.index("chunk")
    last_message = max(i for i, k in enumerate(kinds) if k == "message")
    assert kinds[last_message - 2 : last_message] == ["hook_call", "hook_call"]


async def test_an_agent_without_hooks_has_no_hook_call_events(database_url: str) -> None:
    async with server(database_url) as srv:
        run, events = await run_events(srv)
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    assert calls(events) == []


@pytest.fixture
async def fake() -> AsyncIterator[Running]:
    running = await serve_fake(Behaviour())
    yield running
    await running.stop()


async def test_a_plugin_failing_open_is_on_the_timeline_with_its_reason(
    database_url: str, fake: Running
) -> None:
    fake.behaviour.prepare_model_step = "sleep"
    policy = {"prepare_model_step": PhasePolicy(timeout=0.2, failure_mode="open")}
    async with server(database_url, address=fake.address, phases=policy) as srv:
        run, events = await run_events(srv)
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    failed = [c for c in calls(events) if c[0] == "prepare_model_step"]
    assert failed == [("prepare_model_step", "fake", "failed_open", "", 0, "HOOK_TIMEOUT")]
    assert ("prepare_run", "fake", "ok", "none", None, None) in calls(events)


async def test_a_plugin_timing_out_closed_is_on_the_timeline_before_the_failure(
    database_url: str, fake: Running
) -> None:
    fake.behaviour.prepare_model_step = "sleep"
    async with server(database_url, address=fake.address, timeout=0.2) as srv:
        run, events = await run_events(srv)
    assert run.error.reason == "HOOK_TIMEOUT"
    assert calls(events)[-1] == ("prepare_model_step", "fake", "timeout", "", 0, "HOOK_TIMEOUT")
    assert events[-1].status.status == runs_pb2.RUN_STATUS_FAILED


async def test_an_in_process_hook_that_raises_is_on_the_timeline_as_an_error(
    database_url: str,
) -> None:
    class Broken(AgentLifecycle):
        name = "broken"

        async def prepare_run(self, input: PrepareRunInput) -> Any:
            raise RuntimeError("boom")

    async with server(database_url, Broken()) as srv:
        run, events = await run_events(srv)
    assert run.error.reason == "HOOK_FAILED"
    assert calls(events) == [("prepare_run", "broken", "error", "", None, "HOOK_FAILED")]
