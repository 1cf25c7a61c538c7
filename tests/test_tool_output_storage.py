"""Tool outputs no backend can store become tool errors; the run goes on (both backends)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from pydantic import BaseModel

from pai.v1 import run_service_pb2, runs_pb2
from pai_grpc.models import ModelCall, ScriptedModel, tool_call_step
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import serve_in_process
from pai_grpc.tools import ToolContext, client_tool, tool
from tests.conftest import rich_status
from tests.runtime.support import collect, new_thread, rpc_error, send, wait_run

BAD_OUTPUTS: dict[str, Any] = {
    "nul": {"text": "a\x00b"},
    "nul-key": {"a\x00": 1},
    "huge-int": {"n": 2**53},
    "huge-negative-int": [-(10**30)],
    "nan": {"x": float("nan")},
}


class Pick(BaseModel):
    which: str


@tool(description="Returns an output no database can store.")
async def poison(value: Pick, ctx: ToolContext) -> Any:
    return BAD_OUTPUTS[value.which]


def calls_then_answers(which: str) -> ScriptedModel:
    def script(call: ModelCall) -> Any:
        if len(call.messages) > 1:
            return "done"
        return tool_call_step(("c1", "poison", {"which": which}))

    return ScriptedModel(script)


@pytest.mark.parametrize("which", sorted(BAD_OUTPUTS))
async def test_unstorable_backend_tool_output_is_a_tool_error(
    database_url: str, which: str
) -> None:
    agents = AgentRegistry(
        [Agent(name=DEFAULT_AGENT, model=calls_then_answers(which), tools=[poison])]
    )
    async with serve_in_process(database_url, agents=agents) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "go")
        run = await wait_run(srv, handle.run_id, timeout=20)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        events = await collect(srv, handle.run_id)
        errors = [e.chunk.tool_error for e in events if e.chunk.HasField("tool_error")]
        assert len(errors) == 1
        assert "output" in errors[0].error_text
        page = await srv.store.list_messages("default", thread_id, view="all")
        part = next(p for p in page.items[1].parts if p["type"] == "tool")  # type: ignore[index]
        assert part["state"] == "output-error"


async def test_unstorable_client_tool_result_is_rejected(database_url: str) -> None:
    picker = client_tool("pick", description="Ask the user", input_schema={"type": "object"})

    def script(call: ModelCall) -> Any:
        return "done" if len(call.messages) > 1 else tool_call_step(("c1", "pick", {}))

    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=ScriptedModel(script), tools=[picker])])
    async with serve_in_process(database_url, agents=agents) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "go")
        waiting = await wait_run(srv, handle.run_id, statuses={runs_pb2.RUN_STATUS_WAITING})
        got = await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=handle.run_id))
        assert waiting.status == runs_pb2.RUN_STATUS_WAITING
        action = got.pending_actions[0]
        for output, field in [
            (struct_pb2.Value(string_value="a\x00"), "tool_result.output"),
            (struct_pb2.Value(number_value=float("nan")), "tool_result.output"),
        ]:
            err = await rpc_error(
                srv.runs.ResolvePendingAction(
                    run_service_pb2.ResolvePendingActionRequest(
                        run_id=handle.run_id,
                        action_id=action.id,
                        tool_result=run_service_pb2.ClientToolResult(output=output),
                    )
                )
            )
            code, _, violations = rich_status(err)
            assert code == grpc.StatusCode.INVALID_ARGUMENT
            assert any(f.startswith(field) for f, _ in violations), violations
        again = await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=handle.run_id))
        assert again.run.status == runs_pb2.RUN_STATUS_WAITING
        assert [a.id for a in again.pending_actions] == [action.id]


async def test_model_text_with_nul_is_stored_with_a_replacement_character(
    database_url: str,
) -> None:
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=ScriptedModel(["a\x00b"]))])
    async with serve_in_process(database_url, agents=agents) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "go")
        run = await wait_run(srv, handle.run_id, timeout=20)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        page = await srv.store.list_messages("default", thread_id, view="all")
        texts = [p["text"] for p in page.items[1].parts if p["type"] == "text"]  # type: ignore[index]
        assert texts == ["a\ufffdb"]
