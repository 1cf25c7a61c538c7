"""A Node.js plugin against the real runtime (REM-04): examples/node-plugin, configured
from TOML like any production plugin, drives prepare_model_step, before_tool_call and
transform_step_stream of real runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from pai.v1 import run_service_pb2, runs_pb2
from pai_grpc.config import Settings
from pai_grpc.domain import DataPart, ErrorTextOutput, ToolModelMessage
from pai_grpc.models import ModelCall, ScriptedModel, last_user_text, tool_call_step
from pai_grpc.runtime import AgentRegistry
from pai_grpc.server._scope import DEV_SCOPE
from pai_grpc.testing import InProcessServer, serve_in_process
from pai_grpc.tools import ToolContext, tool
from tests.runtime.support import collect, kinds, new_thread, send, transcript

pytestmark = [pytest.mark.rule("REM-04"), pytest.mark.slow]

cities: list[str] = []


class City(BaseModel):
    city: str


@tool(description="Current weather in a city.")
async def weather(value: City, ctx: ToolContext) -> dict[str, Any]:
    cities.append(value.city)
    return {"city": value.city, "celsius": 21}


class Nothing(BaseModel):
    pass


@tool(description="Deletes everything.")
async def delete_everything(value: Nothing, ctx: ToolContext) -> str:
    raise AssertionError("the Node plugin must refuse this tool")


def script(call: ModelCall) -> Any:
    said = last_user_text(call.messages) or ""
    results = [m for m in call.messages if isinstance(m, ToolModelMessage)]
    if "tools" in said and not results:
        return tool_call_step(("c1", "weather", {"city": "oslo"}), ("c2", "delete_everything", {}))
    if results:
        return "done with tools"
    if "abort" in said:
        return "this goes ABORT-NOW wrong"
    return "the secret is out"


@pytest.fixture
async def node_runtime(
    plugin_address: str, tmp_path: Path, database_url: str
) -> AsyncIterator[tuple[InProcessServer, ScriptedModel]]:
    from pai_grpc._agents_setup import load_agents

    config = tmp_path / "pai.toml"
    config.write_text(
        f"""
[agents.node]
model = "offline"
tools = ["weather", "delete_everything"]

[[agents.node.lifecycle]]
kind = "plugin"
address = "{plugin_address}"
timeout_ms = 5000

[agents.node.contract]
ui_data = {{ "node-stats" = {{ type = "object", required = ["chunks"] }} }}
"""
    )
    settings = Settings(config_path=str(config), offline_chunk_delay=0)
    settings.load_file(config)
    agents, opened = await load_agents(settings, extra_tools=[weather, delete_everything])
    model = ScriptedModel(script)
    agent = agents.resolve("node")
    agent.model = model
    try:
        async with serve_in_process(database_url, agents=AgentRegistry([agent])) as srv:
            yield srv, model
    finally:
        for item in reversed(opened):
            await item.close()


async def finish(srv: InProcessServer, text: str) -> tuple[str, runs_pb2.Run, list[Any]]:
    thread_id = await new_thread(srv)
    handle = await send(srv, thread_id, text)
    events = await collect(srv, handle.run_id)
    run = (await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=handle.run_id))).run
    return thread_id, run, events


async def test_node_shapes_steps_and_redacts_the_canonical_stream(
    node_runtime: tuple[InProcessServer, ScriptedModel],
) -> None:
    srv, model = node_runtime
    thread_id, run, events = await finish(srv, "tell me")
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    # prepare_model_step appended its instruction.
    assert [m.content for m in model.calls[-1].instructions] == [
        "Answer in the voice of the Node plugin."
    ]
    # transform_step_stream: redacted live and in the durable message; ui data after the text.
    assert await transcript(srv, thread_id) == [
        ("user", "tell me"),
        ("assistant", "the [node-redacted] is out"),
    ]
    assert "data" in kinds(events)
    page = await srv.store.list_messages(DEV_SCOPE, thread_id, view="all")
    from pai_grpc.runtime._records import message_from_record

    parts = message_from_record(page.items[-1]).parts
    stats = [p for p in parts if isinstance(p, DataPart)]
    assert [(p.name, sorted(p.data)) for p in stats] == [("node-stats", ["chunks"])]  # type: ignore[arg-type]


async def test_node_blocks_by_policy_without_calling_the_model(
    node_runtime: tuple[InProcessServer, ScriptedModel],
) -> None:
    srv, model = node_runtime
    calls = len(model.calls)
    thread_id, run, _ = await finish(srv, "a forbidden question")
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    assert run.outcome == runs_pb2.RUN_OUTCOME_BLOCKED
    assert run.reason == "NODE_POLICY"
    assert (await transcript(srv, thread_id))[-1] == ("assistant", "Blocked by the Node plugin.")
    assert len(model.calls) == calls


async def test_node_rewrites_and_refuses_tool_calls(
    node_runtime: tuple[InProcessServer, ScriptedModel],
) -> None:
    srv, model = node_runtime
    cities.clear()
    thread_id, run, _ = await finish(srv, "use tools")
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    assert cities == ["OSLO"]  # replace_input upper-cased the city
    results = {
        part.tool_call_id: part.output
        for m in model.calls[-1].messages
        if isinstance(m, ToolModelMessage)
        for part in m.content
    }
    assert results["c2"] == ErrorTextOutput(value="The Node plugin refuses destructive tools.")
    assert (await transcript(srv, thread_id))[-1] == ("assistant", "done with tools")


async def test_node_aborts_a_step_as_a_policy_block(
    node_runtime: tuple[InProcessServer, ScriptedModel],
) -> None:
    srv, _ = node_runtime
    thread_id, run, events = await finish(srv, "please abort")
    assert (run.status, run.outcome, run.reason) == (
        runs_pb2.RUN_STATUS_COMPLETED,
        runs_pb2.RUN_OUTCOME_BLOCKED,
        "NODE_ABORT",
    )
    assert "abort" in kinds(events)
    assert await transcript(srv, thread_id) == [("user", "please abort")]
