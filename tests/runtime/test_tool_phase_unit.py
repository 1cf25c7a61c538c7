"""The tool phase on its own: no database, no executor, no hooks."""

from __future__ import annotations

from pydantic import BaseModel

from pai_grpc.domain import TextPart, ToolCallChunk, ToolPart
from pai_grpc.runtime._tool_phase import ToolOutcome, ToolPhase, ValidCall, merge_outcomes
from pai_grpc.tools import ToolContext, tool


class _Echo(BaseModel):
    text: str


@tool(description="echo the text")
async def echo(input: _Echo, ctx: ToolContext) -> str:
    return input.text


def _phase(advertised: set[str]) -> ToolPhase:
    return ToolPhase(
        run_id="run_1",
        thread_id="thr_1",
        tools={"echo": echo},
        advertised=advertised,
        message_id="msg_1",
    )


def _call(tool_call_id: str, tool_name: str, text: str) -> tuple[ToolCallChunk, ToolPart]:
    call = ToolCallChunk(tool_call_id=tool_call_id, tool_name=tool_name, input={"text": text})
    part = ToolPart(
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        state="input-available",
        input={"text": text},
    )
    return call, part


async def test_a_valid_call_runs_and_its_part_is_merged_into_the_step() -> None:
    phase = _phase({"echo"})
    call, part = _call("call_1", "echo", "hi")
    checked = phase.validate(call, part)
    assert isinstance(checked, ValidCall)
    [outcome] = await phase.run([checked])
    assert outcome.part.state == "output-available"
    assert outcome.part.output == "hi"
    merged = merge_outcomes([TextPart(text="before"), part], [outcome])
    assert merged[0] == TextPart(text="before")
    assert merged[1] == outcome.part


async def test_a_tool_the_request_did_not_advertise_is_rejected_without_running() -> None:
    call, part = _call("call_2", "echo", "hi")
    checked = _phase(set()).validate(call, part)
    assert isinstance(checked, ToolOutcome)
    assert checked.part.state == "output-error"
    assert checked.result is not None
    assert checked.result.source == "reject"
