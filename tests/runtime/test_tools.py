"""Tools through the gRPC API: backend, remote and client tools, approvals, data, recovery."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from pydantic import BaseModel
from sqlalchemy import update

from pai.v1 import run_service_pb2, runs_pb2
from pai_grpc.config import Settings
from pai_grpc.domain import (
    ErrorTextOutput,
    ExecutionDeniedOutput,
    JsonOutput,
    ToolModelMessage,
)
from pai_grpc.models import ModelCall, ScriptedModel, last_user_text, tool_call_step
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import RunnerProcess
from pai_grpc.testing import InProcessServer, migrated_store, serve_in_process
from pai_grpc.tools import Tool, ToolContext, client_tool, tool
from pai_grpc.toolservice import RemoteToolServer, serve_tools
from storage._schema import runs as runs_table
from tests.conftest import rich_status
from tests.runtime.support import collect, kinds, new_thread, rpc_error, send, wait_run


class City(BaseModel):
    city: str


@tool(description="Current weather in a city.")
async def weather(value: City, ctx: ToolContext) -> dict[str, Any]:
    if value.city == "Atlantis":
        ctx.fail("no weather under the sea", data={"city": value.city})
    if value.city == "Crash":
        raise RuntimeError("sensor exploded")
    return {"city": value.city, "celsius": 21}


def tool_results(call: ModelCall) -> dict[str, Any]:
    """tool_call_id -> model-visible output of the tool messages in a model call."""
    out: dict[str, Any] = {}
    for message in call.messages:
        if isinstance(message, ToolModelMessage):
            for part in message.content:
                out[part.tool_call_id] = part.output
    return out


def answer_with_results(call: ModelCall) -> Any:
    results = tool_results(call)
    if results:
        return "done: " + ", ".join(f"{k}={v.type}" for k, v in sorted(results.items()))
    return None


def scripted_tools(*first_step: tuple[str, str, Any]) -> ScriptedModel:
    """A model that calls tools first, then answers by describing the results it saw."""

    def script(call: ModelCall) -> Any:
        return answer_with_results(call) or tool_call_step(*first_step)

    return ScriptedModel(script)


@asynccontextmanager
async def server_with(
    database_url: str, model: ScriptedModel, tools: list[Tool], **kw: Any
) -> AsyncIterator[InProcessServer]:
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model, tools=tools)])
    async with serve_in_process(database_url, agents=agents, **kw) as srv:
        yield srv


async def message_parts(srv: InProcessServer, thread_id: str) -> list[list[dict[str, Any]]]:
    page = await srv.store.list_messages("default", thread_id, view="all")
    return [m.parts for m in page.items]  # type: ignore[misc]


@pytest.mark.rule("RT-05")
@pytest.mark.rule("RT-07")
async def test_backend_tool_round_trip_commits_each_step(database_url: str) -> None:
    model = scripted_tools(("c1", "weather", {"city": "Oslo"}))
    async with server_with(database_url, model, [weather]) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "weather in Oslo?")
        events = await collect(srv, handle.run_id)
        assert kinds(events)[-1] == "status:completed"
        assert "tool_result" in kinds(events)
        run = await wait_run(srv, handle.run_id)
        assert run.step_count == 2
        parts = await message_parts(srv, thread_id)
        assert len(parts) == 3  # user, the tool step, the answer step
        tool_part = next(p for p in parts[1] if p["type"] == "tool")
        assert tool_part["state"] == "output-available"
        assert tool_part["output"] == {"city": "Oslo", "celsius": 21}
        assert parts[2][-1]["text"] == "done: c1=json"
        second = model.calls[1]
        assert tool_results(second)["c1"] == JsonOutput(value={"city": "Oslo", "celsius": 21})
        assert [t.name for t in model.calls[0].tools] == ["weather"]
        assert model.calls[0].tools[0].input_schema["required"] == ["city"]


@pytest.mark.rule("TH-04")
async def test_fail_and_throw_are_tool_errors_the_model_sees(database_url: str) -> None:
    model = scripted_tools(
        ("a", "weather", {"city": "Atlantis"}), ("b", "weather", {"city": "Crash"})
    )
    async with server_with(database_url, model, [weather]) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "go")
        await wait_run(srv, handle.run_id)
        results = tool_results(model.calls[1])
        assert results["a"] == ErrorTextOutput(value="no weather under the sea")
        assert isinstance(results["b"], ErrorTextOutput)
        assert "sensor exploded" in results["b"].value
        parts = await message_parts(srv, thread_id)
        states = {p["tool_call_id"]: p["state"] for p in parts[1] if p["type"] == "tool"}
        assert states == {"a": "output-error", "b": "output-error"}


@pytest.mark.rule("TV-02")
async def test_invalid_input_never_reaches_the_tool(database_url: str) -> None:
    executed: list[Any] = []

    @tool()
    async def strict(value: City) -> str:
        executed.append(value)
        return "ran"

    model = scripted_tools(("c1", "strict", {"town": 3}))
    async with server_with(database_url, model, [strict]) as srv:
        thread_id = await new_thread(srv)
        await wait_run(srv, (await send(srv, thread_id, "go")).run_id)
        assert executed == []
        result = tool_results(model.calls[1])["c1"]
        assert isinstance(result, ErrorTextOutput)
        assert "city" in result.value  # model-visible: which field is wrong


@pytest.mark.rule("TV-04")
async def test_a_tool_the_request_did_not_advertise_never_executes(database_url: str) -> None:
    model = scripted_tools(("c1", "rm_rf", {}))
    async with server_with(database_url, model, [weather]) as srv:
        thread_id = await new_thread(srv)
        await wait_run(srv, (await send(srv, thread_id, "go")).run_id)
        result = tool_results(model.calls[1])["c1"]
        assert isinstance(result, ErrorTextOutput)
        assert "not available" in result.value


async def test_concurrent_tool_calls_run_together(database_url: str) -> None:
    started = {"a": asyncio.Event(), "b": asyncio.Event()}

    class Name(BaseModel):
        name: str

    @tool()
    async def rendezvous(value: Name) -> str:
        started[value.name].set()
        other = "b" if value.name == "a" else "a"
        # Deadlocks (and times out) unless both calls run at the same time.
        await asyncio.wait_for(started[other].wait(), 5)
        return f"met {other}"

    model = scripted_tools(("a", "rendezvous", {"name": "a"}), ("b", "rendezvous", {"name": "b"}))
    async with server_with(database_url, model, [rendezvous]) as srv:
        thread_id = await new_thread(srv)
        await wait_run(srv, (await send(srv, thread_id, "go")).run_id)
        results = tool_results(model.calls[1])
        assert results == {"a": JsonOutput(value="met b"), "b": JsonOutput(value="met a")}


async def events_until(srv: InProcessServer, run_id: str, status: int) -> list[runs_pb2.RunEvent]:
    out = []
    async for response in srv.runs.StreamRun(
        run_service_pb2.StreamRunRequest(run_id=run_id), timeout=20
    ):
        out.append(response.event)
        if (
            response.event.WhichOneof("event") == "status"
            and response.event.status.status == status
        ):
            return out
    return out


async def test_client_tool_waits_for_the_client_result(database_url: str) -> None:
    picker = client_tool(
        "pick_color",
        description="Ask the user to pick a color",
        input_schema={"type": "object", "properties": {"palette": {"type": "array"}}},
    )
    model = scripted_tools(("c1", "pick_color", {"palette": ["red", "blue"]}))
    async with server_with(database_url, model, [picker]) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "pick one")
        events = await events_until(srv, handle.run_id, runs_pb2.RUN_STATUS_WAITING)
        pending = [e.pending_action for e in events if e.WhichOneof("event") == "pending_action"]
        assert len(pending) == 1
        action = pending[0]
        assert action.kind == runs_pb2.PENDING_ACTION_KIND_CLIENT_TOOL
        assert action.tool_name == "pick_color"
        assert action.tool_call_id == "c1"
        got = await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=handle.run_id))
        assert got.run.status == runs_pb2.RUN_STATUS_WAITING
        assert [a.id for a in got.pending_actions] == [action.id]

        output = struct_pb2.Value()
        output.string_value = "blue"
        resolved = await srv.runs.ResolvePendingAction(
            run_service_pb2.ResolvePendingActionRequest(
                run_id=handle.run_id,
                action_id=action.id,
                tool_result=run_service_pb2.ClientToolResult(output=output),
            )
        )
        assert resolved.run.status in (runs_pb2.RUN_STATUS_RUNNING, runs_pb2.RUN_STATUS_COMPLETED)
        tail = await collect(srv, handle.run_id, after_seq=events[-1].seq)
        assert kinds(tail)[-1] == "status:completed"
        run = await wait_run(srv, handle.run_id)
        assert run.start_time == got.run.start_time  # stable across waiting/resume (LC-02)
        assert run.execution.operation == runs_pb2.RUN_OPERATION_RESUME
        assert tool_results(model.calls[-1])["c1"] == JsonOutput(value="blue")

        # Resolving the same action twice is rejected and changes nothing.
        before = await srv.store.list_pending_actions("default", handle.run_id)
        err = await rpc_error(
            srv.runs.ResolvePendingAction(
                run_service_pb2.ResolvePendingActionRequest(
                    run_id=handle.run_id,
                    action_id=action.id,
                    tool_result=run_service_pb2.ClientToolResult(output=output),
                )
            )
        )
        code, reason, _ = rich_status(err)
        assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "PENDING_ACTION_NOT_OPEN")
        assert await srv.store.list_pending_actions("default", handle.run_id) == before


approvals: list[Any] = []


@tool(approval=True)
async def delete_file(value: City, ctx: ToolContext) -> str:
    approvals.append((value.city, ctx.entry))
    return f"deleted {value.city}"


@pytest.mark.rule("TH-05")
@pytest.mark.parametrize("approved", [True, False])
async def test_approval_suspends_and_resumes(database_url: str, approved: bool) -> None:
    approvals.clear()
    model = scripted_tools(("c1", "delete_file", {"city": "notes.txt"}))
    async with server_with(database_url, model, [delete_file]) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "clean up")
        events = await events_until(srv, handle.run_id, runs_pb2.RUN_STATUS_WAITING)
        assert "tool_approval_request" in kinds(events)
        action = next(e.pending_action for e in events if e.WhichOneof("event") == "pending_action")
        assert action.kind == runs_pb2.PENDING_ACTION_KIND_APPROVAL
        assert action.request.struct_value["tool"] == "delete_file"
        assert approvals == []  # nothing ran before the human answered
        # The wrong kind of answer is rejected.
        err = await rpc_error(
            srv.runs.ResolvePendingAction(
                run_service_pb2.ResolvePendingActionRequest(
                    run_id=handle.run_id,
                    action_id=action.id,
                    data=struct_pb2.Value(string_value="x"),
                )
            )
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        await srv.runs.ResolvePendingAction(
            run_service_pb2.ResolvePendingActionRequest(
                run_id=handle.run_id,
                action_id=action.id,
                approval=run_service_pb2.ApprovalDecision(approved=approved, reason="policy"),
            )
        )
        run = await wait_run(srv, handle.run_id)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        parts = await message_parts(srv, thread_id)
        part = next(p for p in parts[1] if p["type"] == "tool")
        result = tool_results(model.calls[-1])["c1"]
        if approved:
            assert part["state"] == "output-available"
            assert part["approval"] == {"id": action.id, "approved": True}
            assert result == JsonOutput(value="deleted notes.txt")
            ((city, entry),) = approvals
            assert city == "notes.txt"
            assert entry.type == "resume"
            assert entry.name == "approval"
            assert entry.action_id == action.id
            assert entry.resume == {"approved": True, "reason": "policy"}
        else:
            assert approvals == []
            assert part["state"] == "output-denied"
            assert part["approval"]["approved"] is False
            assert result == ExecutionDeniedOutput(reason="policy")


@pytest.mark.rule("TH-05")
async def test_data_collection_resumes_with_its_suspend_history(database_url: str) -> None:
    seen: list[tuple[Any, list[Any]]] = []

    @tool()
    async def book(value: City, ctx: ToolContext) -> str:
        seen.append((ctx.entry, list(ctx.suspend_history)))
        answers = [h for h in ctx.suspend_history]
        if ctx.resumed is None:
            ctx.suspend({"ask": "date"}, kind="data", name="date")
        if len(answers) == 1:
            ctx.suspend({"ask": "seats"}, kind="data", name="seats")
        return f"booked {value.city}"

    model = scripted_tools(("c1", "book", {"city": "Rome"}))
    async with server_with(database_url, model, [book]) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "book")
        for expected in ({"ask": "date"}, {"ask": "seats"}):
            await wait_run(srv, handle.run_id, statuses={runs_pb2.RUN_STATUS_WAITING})
            got = await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=handle.run_id))
            (action,) = got.pending_actions
            assert action.kind == runs_pb2.PENDING_ACTION_KIND_DATA
            assert dict(action.request.struct_value) == expected
            await srv.runs.ResolvePendingAction(
                run_service_pb2.ResolvePendingActionRequest(
                    run_id=handle.run_id,
                    action_id=action.id,
                    data=struct_pb2.Value(string_value=expected["ask"] + "-answer"),
                )
            )
        run = await wait_run(srv, handle.run_id)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert [e.type for e, _ in seen] == ["initial", "resume", "resume"]
        assert seen[1][0].name == "date"
        assert seen[1][0].resume == {"data": "date-answer"}
        assert seen[1][1] == [{"ask": "date"}]
        assert seen[2][0].name == "seats"
        assert seen[2][1] == [{"ask": "date"}, {"ask": "seats"}]
        assert tool_results(model.calls[-1])["c1"] == JsonOutput(value="booked Rome")


async def test_remote_tools_run_in_another_server(database_url: str) -> None:
    tool_server, port = await serve_tools([weather])
    remote = RemoteToolServer("weather-svc", f"127.0.0.1:{port}")
    try:
        tools = await remote.connect()
        assert [t.name for t in tools] == ["weather"]
        model = scripted_tools(
            ("ok", "weather", {"city": "Oslo"}),
            ("fail", "weather", {"city": "Atlantis"}),
            ("throw", "weather", {"city": "Crash"}),
        )
        async with server_with(database_url, model, tools) as srv:
            thread_id = await new_thread(srv)
            await wait_run(srv, (await send(srv, thread_id, "go")).run_id)
            results = tool_results(model.calls[1])
            assert results["ok"] == JsonOutput(value={"city": "Oslo", "celsius": 21})
            assert results["fail"] == ErrorTextOutput(value="no weather under the sea")
            assert isinstance(results["throw"], ErrorTextOutput)
            assert "UNKNOWN" in results["throw"].value or "sensor" in results["throw"].value
    finally:
        await remote.close()
        await tool_server.stop(None)


async def test_cancelling_a_waiting_run_cancels_its_tool_parts(database_url: str) -> None:
    picker = client_tool("pick", input_schema={"type": "object"})
    model = scripted_tools(("c1", "pick", {}))
    async with server_with(database_url, model, [picker]) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "go")
        queued = await send(srv, thread_id, "next")
        await wait_run(srv, handle.run_id, statuses={runs_pb2.RUN_STATUS_WAITING})
        cancelled = await srv.runs.CancelRun(run_service_pb2.CancelRunRequest(run_id=handle.run_id))
        assert cancelled.run.status == runs_pb2.RUN_STATUS_CANCELLED
        actions = await srv.store.list_pending_actions("default", handle.run_id)
        assert [a.status for a in actions] == ["cancelled"]
        parts = await message_parts(srv, thread_id)
        part = next(p for p in parts[1] if p["type"] == "tool")
        assert (part["state"], part["error_text"]) == ("output-error", "cancelled")
        assert (await wait_run(srv, queued.run_id)).status == runs_pb2.RUN_STATUS_COMPLETED


async def test_a_tool_executing_when_its_runner_was_lost_gets_a_recovery_result(
    database_url: str,
) -> None:
    started = asyncio.Event()

    @tool()
    async def slow(value: City) -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    model = scripted_tools(("c1", "slow", {"city": "x"}))
    async with server_with(database_url, model, [slow], lease_seconds=30) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "go")
        await asyncio.wait_for(started.wait(), 10)
        # The first runner stalls inside the tool; its lease runs out.
        await srv.store.run_in_transaction(
            lambda c: c.execute(
                update(runs_table)
                .where(runs_table.c.id == handle.run_id)
                .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
            )
        )
        other_model = ScriptedModel(answer_with_results)
        other = RunnerProcess(
            Settings(database_url=database_url),
            AgentRegistry([Agent(name=DEFAULT_AGENT, model=other_model, tools=[slow])]),
            store=await migrated_store(database_url),
        )
        await other.start()
        try:
            run = await wait_run(srv, handle.run_id)
            assert run.status == runs_pb2.RUN_STATUS_COMPLETED
            result = tool_results(other_model.calls[0])["c1"]
            assert isinstance(result, ErrorTextOutput)
            assert "may or may not" in result.value  # not re-executed: it may have had effects
            assert last_user_text(other_model.calls[0].messages) == "go"
        finally:
            await other.stop(grace=1)
