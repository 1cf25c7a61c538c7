"""Tool-call validation and authority (TV-01..05) and the tool hooks (TH-01..05).

Every scenario runs through Send / StreamRun / ResolvePendingAction against a
real store; assertions read what the model saw next (``model.calls``), the
stored tool parts, pending actions and what the hooks observed.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2
from pydantic import BaseModel, field_validator
from sqlalchemy import update

from pai.v1 import run_service_pb2, runs_pb2
from pai_grpc.config import Settings
from pai_grpc.domain import (
    AssistantModelMessage,
    ErrorTextOutput,
    ExecutionDeniedOutput,
    FinishStepChunk,
    JsonOutput,
    ModelToolCallPart,
    StepStreamChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolCallChunk,
    ToolErrorChunk,
    ToolModelMessage,
    ToolPart,
    ToolResultChunk,
)
from pai_grpc.errors import ModelError
from pai_grpc.lifecycle import (
    AfterToolResultInput,
    AgentLifecycle,
    BeforeToolCallInput,
    Continue,
    ModelCallPatch,
    ModelStepPatch,
    ModelStepStreamResult,
    Reject,
    ReplaceInput,
    ReplaceMessage,
    ReplaceOutput,
    RunPatch,
    Skip,
    TransformStepStreamInput,
    lifecycle,
)
from pai_grpc.models import ModelCall, ScriptedModel, tool_call_step
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import RunnerProcess
from pai_grpc.testing import migrated_store
from pai_grpc.tools import ResumeEntry, Tool, ToolContext, client_tool, tool
from storage._schema import runs as runs_table
from tests.lifecycle.harness import Harness, harness
from tests.runtime.support import collect, wait_run

# ---- tools and helpers -----------------------------------------------------------


class City(BaseModel):
    city: str


#: What the tools did, in order (cleared by each test that uses them).
executed: list[tuple[str, Any]] = []


@tool(description="Current weather in a city.")
async def weather(value: City, ctx: ToolContext) -> dict[str, Any]:
    executed.append(("weather", value.city))
    if value.city == "Atlantis":
        ctx.fail("no weather under the sea")
    if value.city == "Crash":
        raise RuntimeError("sensor exploded")
    return {"city": value.city, "celsius": 21}


@tool(description="Something a patch hides.")
async def secret(value: City) -> str:
    executed.append(("secret", value.city))
    return "classified"


@tool(approval=True)
async def delete_file(value: City, ctx: ToolContext) -> str:
    executed.append(("delete_file", (value.city, ctx.entry)))
    return f"deleted {value.city}"


@tool()
async def book(value: City, ctx: ToolContext) -> str:
    """A data-collection tool: asks for a date, then for seats."""
    executed.append(("book", (ctx.entry, list(ctx.suspend_history))))
    if ctx.resumed is None:
        ctx.suspend({"ask": "date"}, kind="data", name="date")
    if len(ctx.suspend_history) == 1:
        ctx.suspend({"ask": "seats"}, kind="data", name="seats")
    return f"booked {value.city}"


PICK_SCHEMA = {
    "type": "object",
    "properties": {"palette": {"type": "array"}},
    "required": ["palette"],
}
pick = client_tool("pick", input_schema=PICK_SCHEMA)

#: Parses of :class:`Shout` (its schema transforms: parsing twice would show).
parses: list[str] = []


class Shout(BaseModel):
    word: str

    @field_validator("word")
    @classmethod
    def _shout(cls, v: str) -> str:
        parses.append(v)
        return v.upper() + "!"


@tool()
async def shout(value: Shout) -> str:
    return value.word


async def _forecast(value: Any, ctx: ToolContext) -> Any:
    executed.append(("forecast", value))
    return {"celsius": 21}


#: A tool with an output schema: synthetic outputs are validated against it.
forecast = Tool(
    name="forecast",
    input_schema={"type": "object"},
    output_schema={
        "type": "object",
        "properties": {"celsius": {"type": "number"}},
        "required": ["celsius"],
    },
    execute=_forecast,
)


def has_results(call: ModelCall) -> bool:
    return any(isinstance(m, ToolModelMessage) for m in call.messages)


def then_answer(first: list[StepStreamChunk]) -> ScriptedModel:
    """A model that emits ``first`` and answers once it has seen tool results."""
    return ScriptedModel(lambda call: "done" if has_results(call) else first)


def results(call: ModelCall) -> dict[str, Any]:
    """tool_call_id -> the model-visible result, in one model call."""
    out: dict[str, Any] = {}
    for message in call.messages:
        if isinstance(message, ToolModelMessage):
            for part in message.content:
                out[part.tool_call_id] = part.output
        if isinstance(message, AssistantModelMessage):
            for item in message.content:
                if item.type == "tool-result":
                    out[item.tool_call_id] = item.output
    return out


def model_calls_of(call: ModelCall) -> dict[str, ModelToolCallPart]:
    """tool_call_id -> the tool call as the model sees it in its context."""
    return {
        item.tool_call_id: item
        for message in call.messages
        if isinstance(message, AssistantModelMessage)
        for item in message.content
        if isinstance(item, ModelToolCallPart)
    }


async def tool_parts(h: Harness, thread_id: str) -> dict[str, ToolPart]:
    """tool_call_id -> the stored tool part (latest message wins)."""
    out: dict[str, ToolPart] = {}
    for m in await h.messages(thread_id):
        for p in m.message.parts:
            if isinstance(p, ToolPart):
                out[p.tool_call_id] = p
    return out


def rewriting(tool_call_id: str, **changes: Any) -> Callable[..., AsyncIterator[StepStreamChunk]]:
    """A transform that rewrites one tool call (input, tool_name, provider_executed)."""

    def transform(i: TransformStepStreamInput) -> AsyncIterator[StepStreamChunk]:
        async def gen() -> AsyncIterator[StepStreamChunk]:
            assert i.stream is not None
            async for chunk in i.stream:
                if isinstance(chunk, ToolCallChunk) and chunk.tool_call_id == tool_call_id:
                    chunk = chunk.model_copy(update=changes)
                yield chunk

        return gen()

    return transform


def observing(
    seen: list[tuple[str, Any]],
    *,
    before: Callable[[BeforeToolCallInput], Any] | None = None,
    after: Callable[[AfterToolResultInput], Any] | None = None,
    name: str = "observer",
) -> AgentLifecycle:
    """Tool hooks that record what they saw, then decide with ``before`` / ``after``."""

    def before_tool_call(i: BeforeToolCallInput) -> Any:
        seen.append(("before", i))
        return before(i) if before else None

    def after_tool_result(i: AfterToolResultInput) -> Any:
        seen.append(("after", i))
        return after(i) if after else None

    return lifecycle(name, before_tool_call=before_tool_call, after_tool_result=after_tool_result)


def befores(seen: list[tuple[str, Any]]) -> list[BeforeToolCallInput]:
    return [i for kind, i in seen if kind == "before"]


def afters(seen: list[tuple[str, Any]]) -> list[AfterToolResultInput]:
    return [i for kind, i in seen if kind == "after"]


async def open_actions(h: Harness, run_id: str) -> list[runs_pb2.PendingAction]:
    """Wait until the run waits; return its open pending actions."""
    await wait_run(h.srv, run_id, statuses={runs_pb2.RUN_STATUS_WAITING})
    got = await h.srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=run_id))
    return list(got.pending_actions)


async def resolve(h: Harness, run_id: str, action_id: str, **resolution: Any) -> None:
    await h.srv.runs.ResolvePendingAction(
        run_service_pb2.ResolvePendingActionRequest(
            run_id=run_id, action_id=action_id, **resolution
        )
    )


def value(v: Any) -> struct_pb2.Value:
    return json_format.ParseDict(v, struct_pb2.Value())


def answer(output: Any = None, error_text: str | None = None) -> run_service_pb2.ClientToolResult:
    if error_text is not None:
        return run_service_pb2.ClientToolResult(error_text=error_text)
    return run_service_pb2.ClientToolResult(output=value(output))


@pytest.fixture(autouse=True)
def _clear() -> None:
    executed.clear()
    parses.clear()


# ---- TV-01 ------------------------------------------------------------------------


@pytest.mark.rule("TV-01")
@pytest.mark.parametrize(
    ("first", "second", "valid"),
    [({"city": 5}, {"city": "Bergen"}, True), ({"city": "Bergen"}, {"city": 5}, False)],
    ids=["invalid-then-fixed", "valid-then-broken"],
)
async def test_hook_changed_calls_are_validated_after_the_whole_composition(
    database_url: str, hooks_mode: str, first: Any, second: Any, valid: bool
) -> None:
    seen: list[tuple[str, Any]] = []
    hooks = [
        lifecycle("t1", transform_step_stream=rewriting("c1", input=first)),
        lifecycle("t2", transform_step_stream=rewriting("c1", input=second)),
        observing(seen),
    ]
    model = then_answer(tool_call_step(("c1", "weather", {"city": "Oslo"})))
    async with harness(database_url, hooks, model=model, tools=[weather], mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        assert done.status == "completed"
        part = (await tool_parts(h, thread_id))["c1"]
        assert part.input == second  # the canonical (final) input is what was stored
        seen_result = results(h.model.calls[-1])["c1"]  # type: ignore[attr-defined]
        if valid:
            assert executed == [("weather", "Bergen")]
            assert [b.input for b in befores(seen)] == [{"city": "Bergen"}]
            assert part.state == "output-available"
            assert seen_result == JsonOutput(value={"city": "Bergen", "celsius": 21})
        else:
            assert executed == []
            assert befores(seen) == []
            assert part.state == "output-error"
            assert isinstance(seen_result, ErrorTextOutput)
            assert "invalid input" in seen_result.value


@pytest.mark.rule("TV-01")
async def test_each_call_is_parsed_exactly_once(database_url: str, hooks_mode: str) -> None:
    # Shout's schema transforms ("hi" -> "HI!"): a second parse would give "HI!!".
    hooks = lifecycle("t", transform_step_stream=rewriting("changed", input={"word": "hi"}))
    model = then_answer(
        tool_call_step(("same", "shout", {"word": "hey"}), ("changed", "shout", {"word": "x"}))
    )
    async with harness(database_url, hooks, model=model, tools=[shout], mode=hooks_mode) as h:
        _, done = await h.ask("go")
        assert done.status == "completed"
        seen = results(model.calls[-1])
        assert seen == {"same": JsonOutput(value="HEY!"), "changed": JsonOutput(value="HI!")}
        assert sorted(parses) == ["hey", "hi"]


@pytest.mark.rule("TV-01")
@pytest.mark.parametrize("valid", [True, False])
async def test_hook_changed_client_calls_are_validated_before_becoming_pending_actions(
    database_url: str, hooks_mode: str, valid: bool
) -> None:
    changed = {"palette": ["green"]} if valid else {"palette": "green"}
    hooks = lifecycle("t", transform_step_stream=rewriting("c1", input=changed))
    model = then_answer(tool_call_step(("c1", "pick", {"palette": ["red"]})))
    async with harness(database_url, hooks, model=model, tools=[pick], mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        actions = await h.store.list_pending_actions("default", done.run.id)
        if valid:
            assert done.status == "waiting"
            assert [(a.tool_call_id, a.input) for a in actions] == [("c1", changed)]
        else:
            assert done.status == "completed"
            assert actions == []
            part = (await tool_parts(h, thread_id))["c1"]
            assert part.state == "output-error"
            assert isinstance(results(model.calls[-1])["c1"], ErrorTextOutput)


@pytest.mark.rule("TV-01")
async def test_a_call_renamed_by_a_hook_is_checked_against_its_new_tool(
    database_url: str, hooks_mode: str
) -> None:
    # {"word": ...} is valid for shout but not for weather: the renamed call is parsed again.
    hooks = lifecycle("t", transform_step_stream=rewriting("c1", tool_name="weather"))
    model = then_answer(tool_call_step(("c1", "shout", {"word": "hi"})))
    async with harness(
        database_url, hooks, model=model, tools=[shout, weather], mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("go")
        assert done.status == "completed"
        assert executed == []
        assert parses == []
        part = (await tool_parts(h, thread_id))["c1"]
        assert (part.tool_name, part.state) == ("weather", "output-error")


@pytest.mark.rule("TV-01")
async def test_a_call_emitted_again_by_a_hook_runs_once_with_its_final_input(
    database_url: str, hooks_mode: str
) -> None:
    # A transform passes the call on, then emits a changed copy under the same id.
    def again(i: TransformStepStreamInput) -> AsyncIterator[StepStreamChunk]:
        async def gen() -> AsyncIterator[StepStreamChunk]:
            assert i.stream is not None
            async for chunk in i.stream:
                yield chunk
                if isinstance(chunk, ToolCallChunk):
                    yield chunk.model_copy(update={"input": {"city": "Bergen"}})

        return gen()

    seen: list[tuple[str, Any]] = []
    model = then_answer(tool_call_step(("c1", "weather", {"city": "Oslo"})))
    async with harness(
        database_url,
        [lifecycle("again", transform_step_stream=again), observing(seen)],
        model=model,
        tools=[weather],
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("go")
        assert done.status == "completed"
        assert executed == [("weather", "Bergen")]  # never with the superseded input
        assert [b.input for b in befores(seen)] == [{"city": "Bergen"}]
        assert (await tool_parts(h, thread_id))["c1"].input == {"city": "Bergen"}


# ---- TV-02 ------------------------------------------------------------------------


@pytest.mark.rule("TV-02")
async def test_invalid_input_is_a_model_visible_error_and_never_reaches_before_tool_call(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[tuple[str, Any]] = []
    model = then_answer(
        tool_call_step(("bad", "weather", {"town": "Oslo"}), ("good", "weather", {"city": "Oslo"}))
    )
    async with harness(
        database_url, observing(seen), model=model, tools=[weather], mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("go")
        assert done.status == "completed"
        assert [b.tool_call_id for b in befores(seen)] == ["good"]
        assert executed == [("weather", "Oslo")]
        seen_result = results(model.calls[-1])
        assert isinstance(seen_result["bad"], ErrorTextOutput)
        assert "invalid input for tool weather" in seen_result["bad"].value
        assert seen_result["good"] == JsonOutput(value={"city": "Oslo", "celsius": 21})
        parts = await tool_parts(h, thread_id)
        assert parts["bad"].state == "output-error"
        assert parts["bad"].input == {"town": "Oslo"}  # JSON invalid input is kept


@pytest.mark.rule("TV-02")
@pytest.mark.parametrize(
    "bad_input",
    [{"city": math.nan}, {"city": math.inf}, {"city": 2**60}],
    ids=["nan", "inf", "unsafe-int"],
)
async def test_non_json_invalid_input_is_left_out_of_the_durable_record(
    database_url: str, hooks_mode: str, bad_input: Any
) -> None:
    seen: list[tuple[str, Any]] = []
    hooks = [
        lifecycle("t", transform_step_stream=rewriting("c1", input=bad_input)),
        observing(seen),
    ]
    model = then_answer(tool_call_step(("c1", "weather", {"city": "Oslo"})))
    async with harness(database_url, hooks, model=model, tools=[weather], mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        if hooks_mode == "remote":
            # The plugin SDK cannot encode a value that is not strict JSON: remotely
            # the hook's answer is an invalid decision, and nothing reached the tool.
            assert done.status == "failed"
            assert done.run.error.reason == "HOOK_INVALID_DECISION", done.run.error
            assert befores(seen) == []
            assert executed == []
            return
        # Persistence did not fail: the run went on and the model saw the error.
        assert done.status == "completed", done.run.error
        assert befores(seen) == []
        assert executed == []
        part = (await tool_parts(h, thread_id))["c1"]
        assert (part.state, part.input) == ("output-error", None)
        assert isinstance(results(model.calls[-1])["c1"], ErrorTextOutput)
        # The durable event log replays (and holds no trace of the non-JSON value).
        replay = await collect(h.srv, done.run.id)
        assert [e.status.status for e in replay if e.WhichOneof("event") == "status"][-1] == (
            runs_pb2.RUN_STATUS_COMPLETED
        )


# ---- TV-03 ------------------------------------------------------------------------


def provider_step() -> list[StepStreamChunk]:
    """Provider-executed calls whose later result/error chunks carry a different input."""
    return [
        ToolCallChunk(
            tool_call_id="p1", tool_name="web_search", input={"q": "a"}, provider_executed=True
        ),
        ToolResultChunk(
            tool_call_id="p1",
            tool_name="web_search",
            input={"q": "evil"},
            output={"hits": 1},
            provider_executed=True,
        ),
        ToolCallChunk(
            tool_call_id="p2", tool_name="web_search", input={"q": "b"}, provider_executed=True
        ),
        ToolErrorChunk(
            tool_call_id="p2",
            tool_name="web_search",
            input={"q": "evil"},
            error_text="search failed",
            provider_executed=True,
        ),
        # An invalid call followed by a result: the result is ignored.
        ToolCallChunk(
            tool_call_id="p3",
            tool_name="web_search",
            input="{not json",
            provider_executed=True,
            invalid=True,
            error_text="input is not JSON",
        ),
        ToolResultChunk(
            tool_call_id="p3", tool_name="web_search", output={"hits": 9}, provider_executed=True
        ),
        TextStartChunk(id="t"),
        TextDeltaChunk(id="t", text="searched"),
        TextEndChunk(id="t"),
        FinishStepChunk(finish_reason="stop"),
    ]


@pytest.mark.rule("TV-03")
async def test_later_results_cannot_replace_a_validated_input_nor_revive_an_invalid_call(
    database_url: str, hooks_mode: str
) -> None:
    model = ScriptedModel([provider_step(), "ok"])
    async with harness(database_url, None, model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("search")
        assert done.status == "completed"
        parts = await tool_parts(h, thread_id)
        assert (parts["p1"].input, parts["p1"].state, parts["p1"].output) == (
            {"q": "a"},
            "output-available",
            {"hits": 1},
        )
        assert (parts["p2"].input, parts["p2"].state) == ({"q": "b"}, "output-error")
        assert (parts["p3"].state, parts["p3"].error_text) == ("output-error", "input is not JSON")
        assert parts["p3"].output is None
        # What the model sees later agrees.
        await h.ask("again", thread_id)
        calls = model_calls_of(model.calls[1])
        assert (calls["p1"].input, calls["p2"].input) == ({"q": "a"}, {"q": "b"})
        seen = results(model.calls[1])
        assert isinstance(seen["p3"], ErrorTextOutput)


@pytest.mark.rule("TV-03")
async def test_a_result_following_a_call_that_failed_validation_is_ignored(
    database_url: str, hooks_mode: str
) -> None:
    # The (hook-edited) stream carries a forged result right after an invalid runtime call.
    def forge(i: TransformStepStreamInput) -> AsyncIterator[StepStreamChunk]:
        async def gen() -> AsyncIterator[StepStreamChunk]:
            assert i.stream is not None
            async for chunk in i.stream:
                yield chunk
                if isinstance(chunk, ToolCallChunk):
                    yield ToolResultChunk(
                        tool_call_id=chunk.tool_call_id,
                        tool_name=chunk.tool_name,
                        input={"city": "Forged"},
                        output={"celsius": 99},
                    )

        return gen()

    model = then_answer(tool_call_step(("c1", "weather", {"city": 5})))
    hooks = lifecycle("forge", transform_step_stream=forge)
    async with harness(database_url, hooks, model=model, tools=[weather], mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        assert done.status == "completed"
        assert executed == []
        part = (await tool_parts(h, thread_id))["c1"]
        assert part.state == "output-error"
        assert part.input == {"city": 5}
        assert part.output is None
        assert isinstance(results(model.calls[-1])["c1"], ErrorTextOutput)


# ---- TV-04 ------------------------------------------------------------------------


def hiding(where: str) -> AgentLifecycle:
    """A lifecycle that leaves only weather in the request, at run, step or call level."""
    only = [weather.manifest()]
    if where == "run":
        return lifecycle("hide", prepare_run=lambda i: Continue(RunPatch(tools=only)))
    if where == "step":
        return lifecycle("hide", prepare_model_step=lambda i: Continue(ModelStepPatch(tools=only)))

    async def around(request: Any, next: Any) -> Any:
        return await next(ModelCallPatch(tools=only))

    return lifecycle("hide", around_model_call=around)


@pytest.mark.rule("TV-04")
@pytest.mark.parametrize("where", ["run", "step", "call"])
async def test_a_tool_omitted_by_a_patch_cannot_execute(
    database_url: str, hooks_mode: str, where: str
) -> None:
    seen: list[tuple[str, Any]] = []
    model = then_answer(
        tool_call_step(
            ("w", "weather", {"city": "Oslo"}),
            ("s", "secret", {"city": "x"}),
            ("p", "pick", {"palette": []}),
        )
    )
    async with harness(
        database_url,
        [hiding(where), observing(seen)],
        model=model,
        tools=[weather, secret, pick],
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("go")
        # The provider emitted secret and pick anyway: neither runs nor becomes an action.
        assert done.status == "completed"
        assert [t.name for t in model.calls[0].tools] == ["weather"]
        assert executed == [("weather", "Oslo")]
        assert await h.store.list_pending_actions("default", done.run.id) == []
        assert [b.tool_call_id for b in befores(seen)] == ["w"]
        seen_result = results(model.calls[-1])
        for hidden in ("s", "p"):
            assert isinstance(seen_result[hidden], ErrorTextOutput)
            assert "not available" in seen_result[hidden].value
            assert (await tool_parts(h, thread_id))[hidden].state == "output-error"


# ---- TV-05 ------------------------------------------------------------------------


@pytest.mark.rule("TV-05")
async def test_mutating_the_tool_list_after_next_cannot_widen_authority(
    database_url: str, hooks_mode: str
) -> None:
    async def around(request: Any, next: Any) -> Any:
        result = await next(ModelCallPatch(tools=[weather.manifest()]))
        return result

    async def widen(request: Any, next: Any) -> Any:
        result = await next()
        request.tools.append(secret.manifest())  # after the attempt began
        return result

    model = then_answer(
        tool_call_step(("w", "weather", {"city": "Oslo"}), ("s", "secret", {"city": "x"}))
    )
    hooks = [
        lifecycle("narrow", around_model_call=around),
        lifecycle("widen", around_model_call=widen),
    ]
    async with harness(
        database_url, hooks, model=model, tools=[weather, secret], mode=hooks_mode
    ) as h:
        _, done = await h.ask("go")
        assert done.status == "completed"
        assert executed == [("weather", "Oslo")]
        assert isinstance(results(model.calls[-1])["s"], ErrorTextOutput)


async def rewrapped(stream: AsyncIterator[StepStreamChunk]) -> AsyncIterator[StepStreamChunk]:
    """A newly wrapped stream: the runtime cannot tell which attempt it came from."""
    async for chunk in stream:
        yield chunk


@pytest.mark.rule("TV-05")
async def test_with_several_attempts_a_tool_needs_every_attempt_to_advertise_it(
    database_url: str, hooks_mode: str
) -> None:
    async def twice(request: Any, next: Any) -> Any:
        first = await next(ModelCallPatch(tools=[weather.manifest(), secret.manifest()]))
        await next(ModelCallPatch(tools=[weather.manifest()]))
        # A stream whose source request cannot be identified: fail closed.
        return ModelStepStreamResult(stream=rewrapped(first.stream))

    model = then_answer(
        tool_call_step(("w", "weather", {"city": "Oslo"}), ("s", "secret", {"city": "x"}))
    )
    async with harness(
        database_url,
        lifecycle("twice", around_model_call=twice),
        model=model,
        tools=[weather, secret],
        mode=hooks_mode,
    ) as h:
        _, done = await h.ask("go")
        assert done.status == "completed"
        assert [t.name for t in model.calls[0].tools] == ["weather", "secret"]
        assert executed == [("weather", "Oslo")]
        assert isinstance(results(model.calls[-1])["s"], ErrorTextOutput)


@pytest.mark.rule("TV-05")
@pytest.mark.parametrize("returned", ["second", "first"])
async def test_an_attempt_returned_unchanged_keeps_its_own_tool_list(
    database_url: str, hooks_mode: str, returned: str
) -> None:
    both = [weather.manifest(), secret.manifest()]
    narrow = [weather.manifest()]

    async def retry(request: Any, next: Any) -> Any:
        # The returned attempt advertised both tools; the other one only weather.
        if returned == "second":
            await next(ModelCallPatch(tools=narrow))  # abandoned
            return await next(ModelCallPatch(tools=both))
        first = await next(ModelCallPatch(tools=both))
        await next(ModelCallPatch(tools=narrow))  # abandoned
        return first

    model = then_answer(
        tool_call_step(("w", "weather", {"city": "Oslo"}), ("s", "secret", {"city": "x"}))
    )
    async with harness(
        database_url,
        lifecycle("retry", around_model_call=retry),
        model=model,
        tools=[weather, secret],
        mode=hooks_mode,
    ) as h:
        _, done = await h.ask("go")
        assert done.status == "completed"
        # The returned stream is identifiably that attempt's: its snapshot is authoritative.
        assert sorted(executed) == [("secret", "x"), ("weather", "Oslo")]
        assert results(model.calls[-1])["s"] == JsonOutput(value="classified")


@pytest.mark.rule("TV-05")
async def test_a_failed_attempt_does_not_narrow_the_tool_list(
    database_url: str, hooks_mode: str
) -> None:
    def script(call: ModelCall) -> Any:
        if len(model.calls) == 1:
            return ModelError("overloaded", reason="OVERLOADED")
        if has_results(call):
            return "done"
        return tool_call_step(("w", "weather", {"city": "Oslo"}), ("s", "secret", {"city": "x"}))

    model = ScriptedModel(script)

    async def fallback(request: Any, next: Any) -> Any:
        try:
            return await next(ModelCallPatch(tools=[weather.manifest()]))
        except ModelError:
            return await next()

    async with harness(
        database_url,
        lifecycle("fallback", around_model_call=fallback),
        model=model,
        tools=[weather, secret],
        mode=hooks_mode,
    ) as h:
        _, done = await h.ask("go")
        assert done.status == "completed"
        assert sorted(executed) == [("secret", "x"), ("weather", "Oslo")]


# ---- TH-01 ------------------------------------------------------------------------


@pytest.mark.rule("TH-01")
async def test_before_tool_call_sees_the_validated_call_before_it_runs(
    database_url: str, hooks_mode: str
) -> None:
    order: list[str] = []

    def before(i: BeforeToolCallInput) -> None:
        order.append(f"before:{i.tool_call_id}")
        assert executed == []  # nothing ran yet

    seen: list[tuple[str, Any]] = []
    model = then_answer(tool_call_step(("c1", "weather", {"city": "Oslo"})))
    async with harness(
        database_url, observing(seen, before=before), model=model, tools=[weather], mode=hooks_mode
    ) as h:
        _, done = await h.ask("go")
        assert done.status == "completed"
        assert order == ["before:c1"]
        assert executed == [("weather", "Oslo")]
        (b,) = befores(seen)
        assert b.tool is not None
        assert (b.tool.name, b.tool.source) == ("weather", "backend")
        assert b.input == {"city": "Oslo"}
        assert b.entry is not None
        assert b.entry.type == "initial"
        assert b.suspend_history == []
        assert b.step is not None
        assert b.step.index == 0


@pytest.mark.rule("TH-01")
@pytest.mark.parametrize("decision", ["continue", "replace", "skip", "reject", "none"])
async def test_before_tool_call_decisions(
    database_url: str, hooks_mode: str, decision: str
) -> None:
    decide = {
        "continue": lambda i: Continue(),
        "none": lambda i: None,
        "replace": lambda i: ReplaceInput({"city": "Bergen"}),
        "skip": lambda i: Skip({"city": "cached", "celsius": 1}),
        "reject": lambda i: Reject("weather is off limits"),
    }[decision]
    model = then_answer(tool_call_step(("c1", "weather", {"city": "Oslo"})))
    hooks = lifecycle("decide", before_tool_call=decide)
    async with harness(database_url, hooks, model=model, tools=[weather], mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        assert done.status == "completed"
        part = (await tool_parts(h, thread_id))["c1"]
        seen = results(model.calls[-1])["c1"]
        match decision:
            case "continue" | "none":
                assert executed == [("weather", "Oslo")]
                assert seen == JsonOutput(value={"city": "Oslo", "celsius": 21})
            case "replace":
                assert executed == [("weather", "Bergen")]
                assert part.input == {"city": "Bergen"}
                assert seen == JsonOutput(value={"city": "Bergen", "celsius": 21})
            case "skip":
                assert executed == []
                assert (part.state, part.output) == ("output-available", seen.value)
                assert seen == JsonOutput(value={"city": "cached", "celsius": 1})
            case "reject":
                assert executed == []
                assert (part.state, part.error_text) == ("output-error", "weather is off limits")
                assert seen == ErrorTextOutput(value="weather is off limits")


@pytest.mark.rule("TH-01")
async def test_replaced_input_is_validated_again(database_url: str, hooks_mode: str) -> None:
    model = then_answer(tool_call_step(("c1", "weather", {"city": "Oslo"})))
    hooks = lifecycle("decide", before_tool_call=lambda i: ReplaceInput({"city": 42}))
    async with harness(database_url, hooks, model=model, tools=[weather], mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        assert done.status == "completed"
        assert executed == []
        assert (await tool_parts(h, thread_id))["c1"].state == "output-error"
        assert isinstance(results(model.calls[-1])["c1"], ErrorTextOutput)


@pytest.mark.rule("TH-01")
@pytest.mark.parametrize("decision", ["replace", "reject"])
async def test_before_tool_call_runs_before_client_routing(
    database_url: str, hooks_mode: str, decision: str
) -> None:
    decide = (
        (lambda i: ReplaceInput({"palette": ["blue"]}))
        if decision == "replace"
        else (lambda i: Reject("no picking"))
    )
    model = then_answer(tool_call_step(("c1", "pick", {"palette": ["red"]})))
    async with harness(
        database_url,
        lifecycle("route", before_tool_call=decide),
        model=model,
        tools=[pick],
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("go")
        actions = await h.store.list_pending_actions("default", done.run.id)
        if decision == "replace":
            assert done.status == "waiting"
            assert [(a.tool_call_id, a.input) for a in actions] == [("c1", {"palette": ["blue"]})]
            assert (await tool_parts(h, thread_id))["c1"].input == {"palette": ["blue"]}
        else:
            assert done.status == "completed"
            assert actions == []
            assert results(model.calls[-1])["c1"] == ErrorTextOutput(value="no picking")


@pytest.mark.rule("TH-01")
async def test_before_tool_call_runs_before_suspension(database_url: str, hooks_mode: str) -> None:
    actions_seen: list[int] = []
    h_box: list[Harness] = []
    run_box: list[str] = []

    async def before(i: BeforeToolCallInput) -> Any:
        actions_seen.append(len(await h_box[0].store.list_pending_actions("default", i.run.run_id)))
        return Reject("never ask") if run_box else None

    model = then_answer(tool_call_step(("c1", "delete_file", {"city": "notes.txt"})))
    async with harness(
        database_url,
        lifecycle("gate", before_tool_call=before),
        model=model,
        tools=[delete_file],
        mode=hooks_mode,
    ) as h:
        h_box.append(h)
        _, waiting = await h.ask("first")
        assert waiting.status == "waiting"  # continue: the tool suspends afterwards
        assert actions_seen == [0]
        run_box.append("reject")
        _, done = await h.ask("second")
        assert done.status == "completed"  # reject: no suspension at all
        assert await h.store.list_pending_actions("default", done.run.id) == []
        assert executed == []


# ---- TH-02 ------------------------------------------------------------------------


@pytest.mark.rule("TH-02")
@pytest.mark.parametrize("decision", ["skip", "reject"])
async def test_the_first_skip_or_reject_ends_before_tool_call(
    database_url: str, hooks_mode: str, decision: str
) -> None:
    later: list[tuple[str, Any]] = []
    first = lifecycle(
        "first",
        before_tool_call=(lambda i: Skip({"celsius": 3}))
        if decision == "skip"
        else (lambda i: Reject("stop")),
    )
    model = then_answer(tool_call_step(("c1", "forecast", {})))
    async with harness(
        database_url,
        [first, observing(later, name="later")],
        model=model,
        tools=[forecast],
        mode=hooks_mode,
    ) as h:
        _, done = await h.ask("go")
        assert done.status == "completed"
        assert executed == []
        assert befores(later) == []  # the later part never saw the call
        (after,) = afters(later)  # but the final result still passes after_tool_result
        assert after.result is not None
        assert after.result.source == decision
        seen = results(model.calls[-1])["c1"]
        expected = (
            JsonOutput(value={"celsius": 3})
            if decision == "skip"
            else ErrorTextOutput(value="stop")
        )
        assert seen == expected


@pytest.mark.rule("TH-02")
@pytest.mark.parametrize(
    ("output", "valid"),
    [({"celsius": 3}, True), ({"fahrenheit": 37}, False), ({"celsius": math.nan}, False)],
    ids=["valid", "schema", "non-json"],
)
async def test_skipped_outputs_are_validated_and_pass_after_tool_result(
    database_url: str, hooks_mode: str, output: Any, valid: bool
) -> None:
    seen: list[tuple[str, Any]] = []
    hooks = observing(
        seen,
        before=lambda i: Skip(output),
        after=lambda i: ReplaceOutput({"celsius": 4}) if valid else None,
    )
    model = then_answer(tool_call_step(("c1", "forecast", {})))
    async with harness(database_url, hooks, model=model, tools=[forecast], mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        if hooks_mode == "remote" and output.get("celsius") != output.get("celsius"):
            # The plugin SDK cannot encode a NaN skip output: remotely the
            # beforeToolCall answer is an invalid decision, so afterToolResult never runs.
            assert done.status == "failed"
            assert done.run.error.reason == "HOOK_INVALID_DECISION", done.run.error
            assert afters(seen) == []
            assert executed == []
            return
        assert done.status == "completed"
        assert executed == []
        (after,) = afters(seen)
        assert after.result is not None
        assert after.result.source == "skip"
        part = (await tool_parts(h, thread_id))["c1"]
        model_saw = results(model.calls[-1])["c1"]
        if valid:
            assert (after.result.status, after.result.output) == ("output-available", output)
            assert model_saw == JsonOutput(value={"celsius": 4})
            assert (part.state, part.output) == ("output-available", {"celsius": 4})
        else:
            assert after.result.status == "output-error"
            assert isinstance(model_saw, ErrorTextOutput)
            assert part.state == "output-error"


# ---- TH-03 ------------------------------------------------------------------------


@pytest.mark.rule("TH-03")
async def test_after_tool_result_can_replace_a_backend_output_everywhere(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[tuple[str, Any]] = []
    hooks = observing(seen, after=lambda i: ReplaceOutput({"city": "hidden", "celsius": 0}))
    model = then_answer(tool_call_step(("c1", "weather", {"city": "Oslo"})))
    async with harness(database_url, hooks, model=model, tools=[weather], mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        (after,) = afters(seen)
        assert after.result is not None
        assert (after.result.source, after.result.status) == ("execute", "output-available")
        assert after.result.output == {"city": "Oslo", "celsius": 21}
        replaced = {"city": "hidden", "celsius": 0}
        assert results(model.calls[-1])["c1"] == JsonOutput(value=replaced)
        assert (await tool_parts(h, thread_id))["c1"].output == replaced
        streamed = [
            json_format.MessageToDict(e.chunk.tool_result.output)
            for e in done.events
            if e.WhichOneof("event") == "chunk" and e.chunk.WhichOneof("chunk") == "tool_result"
        ]
        assert streamed == [replaced]
        assert "Oslo" not in repr(streamed)


@pytest.mark.rule("TH-03")
@pytest.mark.rule("TH-04")
async def test_backend_failures_are_throw_or_fail_and_their_message_can_be_replaced(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[tuple[str, Any]] = []

    def after(i: AfterToolResultInput) -> Any:
        assert i.result is not None
        return ReplaceMessage(f"[{i.result.source}] weather unavailable")

    model = then_answer(
        tool_call_step(("f", "weather", {"city": "Atlantis"}), ("t", "weather", {"city": "Crash"}))
    )
    async with harness(
        database_url, observing(seen, after=after), model=model, tools=[weather], mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("go")
        assert done.status == "completed"
        by_id = {a.tool_call_id: a.result for a in afters(seen)}
        assert by_id["f"] is not None
        assert by_id["t"] is not None
        assert (by_id["f"].source, by_id["f"].status) == ("fail", "output-error")
        assert by_id["f"].message == "no weather under the sea"
        assert (by_id["t"].source, by_id["t"].status) == ("throw", "output-error")
        assert by_id["t"].message is not None
        assert "sensor exploded" in by_id["t"].message
        model_saw = results(model.calls[-1])
        assert model_saw["f"] == ErrorTextOutput(value="[fail] weather unavailable")
        assert model_saw["t"] == ErrorTextOutput(value="[throw] weather unavailable")
        parts = await tool_parts(h, thread_id)
        assert parts["f"].error_text == "[fail] weather unavailable"


@pytest.mark.rule("TH-03")
async def test_after_tool_result_sees_rejected_calls(database_url: str, hooks_mode: str) -> None:
    seen: list[tuple[str, Any]] = []
    hooks = observing(
        seen, before=lambda i: Reject("nope"), after=lambda i: ReplaceMessage("rejected by policy")
    )
    model = then_answer(tool_call_step(("c1", "weather", {"city": "Oslo"})))
    async with harness(database_url, hooks, model=model, tools=[weather], mode=hooks_mode) as h:
        await h.ask("go")
        (after,) = afters(seen)
        assert after.result is not None
        assert (after.result.source, after.result.message) == ("reject", "nope")
        assert results(model.calls[-1])["c1"] == ErrorTextOutput(value="rejected by policy")


@pytest.mark.rule("TH-03")
async def test_after_tool_result_sees_client_submitted_results(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[tuple[str, Any]] = []
    hooks = observing(seen, after=lambda i: ReplaceOutput(["checked", *i.result.output]))  # type: ignore[union-attr]
    model = then_answer(tool_call_step(("c1", "pick", {"palette": ["red", "blue"]})))
    async with harness(database_url, hooks, model=model, tools=[pick], mode=hooks_mode) as h:
        thread_id, waiting = await h.ask("go")
        (action,) = await open_actions(h, waiting.run.id)
        assert afters(seen) == []  # nothing final yet
        await resolve(h, waiting.run.id, action.id, tool_result=answer(["blue"]))
        done = await h.finish(waiting.run.id)
        assert done.status == "completed"
        (after,) = afters(seen)
        assert after.result is not None
        assert (after.result.source, after.result.output) == ("client", ["blue"])
        assert isinstance(after.entry, ResumeEntry)
        assert after.entry.action_id == action.id
        assert results(model.calls[-1])["c1"] == JsonOutput(value=["checked", "blue"])
        assert (await tool_parts(h, thread_id))["c1"].output == ["checked", "blue"]


@pytest.mark.rule("TH-03")
@pytest.mark.parametrize("approved", [True, False])
async def test_after_tool_result_sees_resumed_tools(
    database_url: str, hooks_mode: str, approved: bool
) -> None:
    seen: list[tuple[str, Any]] = []

    def after(i: AfterToolResultInput) -> Any:
        assert i.result is not None
        if i.result.status == "output-error":
            return ReplaceMessage("the human said no")
        return ReplaceOutput("done (audited)")

    model = then_answer(tool_call_step(("c1", "delete_file", {"city": "notes.txt"})))
    async with harness(
        database_url,
        observing(seen, after=after),
        model=model,
        tools=[delete_file],
        mode=hooks_mode,
    ) as h:
        thread_id, waiting = await h.ask("go")
        (action,) = await open_actions(h, waiting.run.id)
        assert afters(seen) == []
        decision = run_service_pb2.ApprovalDecision(approved=approved, reason="policy")
        await resolve(h, waiting.run.id, action.id, approval=decision)
        done = await h.finish(waiting.run.id)
        assert done.status == "completed"
        (after_input,) = afters(seen)
        assert after_input.result is not None
        assert after_input.result.source == "resume"
        part = (await tool_parts(h, thread_id))["c1"]
        model_saw = results(model.calls[-1])["c1"]
        if approved:
            assert after_input.result.output == "deleted notes.txt"
            assert model_saw == JsonOutput(value="done (audited)")
            assert part.output == "done (audited)"
        else:
            assert after_input.result.status == "output-error"
            assert model_saw == ExecutionDeniedOutput(reason="the human said no")
            assert part.state == "output-denied"


@pytest.mark.rule("TH-03")
@pytest.mark.parametrize("error", [False, True], ids=["output", "error"])
async def test_after_tool_result_sees_manually_fulfilled_results(
    database_url: str, hooks_mode: str, error: bool
) -> None:
    seen: list[tuple[str, Any]] = []
    model = then_answer(tool_call_step(("c1", "book", {"city": "Rome"})))
    async with harness(
        database_url, observing(seen), model=model, tools=[book], mode=hooks_mode
    ) as h:
        _thread_id, waiting = await h.ask("go")
        (action,) = await open_actions(h, waiting.run.id)
        # An operator fulfils the suspended call by hand instead of answering its question.
        result = answer(error_text="no seats left") if error else answer("booked by hand")
        await resolve(h, waiting.run.id, action.id, tool_result=result)
        done = await h.finish(waiting.run.id)
        assert done.status == "completed"
        assert [e for e in executed if e[0] == "book"][1:] == []  # not executed again
        (after,) = afters(seen)
        assert after.result is not None
        assert after.result.source == "manual"
        assert isinstance(after.entry, ResumeEntry)
        assert after.entry.action_id == action.id
        model_saw = results(model.calls[-1])["c1"]
        if error:
            assert after.result.status == "output-error"
            assert model_saw == ErrorTextOutput(value="no seats left")
        else:
            assert (after.result.status, after.result.output) == (
                "output-available",
                "booked by hand",
            )
            assert model_saw == JsonOutput(value="booked by hand")


@pytest.mark.rule("TH-03")
async def test_after_tool_result_sees_recovery_errors(database_url: str, hooks_mode: str) -> None:
    started = asyncio.Event()

    @tool()
    async def slow(value: City) -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    seen: list[tuple[str, Any]] = []
    hooks = observing(seen, after=lambda i: ReplaceMessage("interrupted; please retry"))
    model = then_answer(tool_call_step(("c1", "slow", {"city": "x"})))
    async with harness(database_url, hooks, model=model, tools=[slow], mode=hooks_mode) as h:
        thread_id = await h.thread()
        handle = await h.send(thread_id, "go")
        await asyncio.wait_for(started.wait(), 10)
        # The first runner stalls inside the tool; its lease runs out.
        await h.store.run_in_transaction(  # type: ignore[attr-defined]
            lambda c: c.execute(
                update(runs_table)
                .where(runs_table.c.id == handle.run_id)
                .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
            )
        )
        other_model = then_answer([])
        other = RunnerProcess(
            Settings(database_url=database_url),
            AgentRegistry(
                [Agent(name=DEFAULT_AGENT, model=other_model, tools=[slow], lifecycle=hooks)]
            ),
            store=await migrated_store(database_url),
        )
        await other.start()
        try:
            run = await wait_run(h.srv, handle.run_id)
            assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        finally:
            await other.stop(grace=1)
        (after,) = afters(seen)
        assert after.result is not None
        assert (after.result.source, after.result.status) == ("recovery", "output-error")
        # (Whichever runner took the expired lease over: both run the same hooks.)
        recovered_call = [*other_model.calls, *model.calls[1:]][0]
        assert results(recovered_call)["c1"] == ErrorTextOutput(value="interrupted; please retry")


# ---- TH-04 ------------------------------------------------------------------------


@pytest.mark.rule("TH-04")
async def test_a_suspended_tool_gets_no_after_tool_result_until_it_finishes(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[tuple[str, Any]] = []
    model = then_answer(tool_call_step(("c1", "book", {"city": "Rome"})))
    hooks = observing(seen, before=lambda i: Continue(), after=lambda i: Continue())
    async with harness(database_url, hooks, model=model, tools=[book], mode=hooks_mode) as h:
        _, waiting = await h.ask("go")
        for ask in ("date", "seats"):
            (action,) = await open_actions(h, waiting.run.id)
            assert afters(seen) == []  # suspended: no final result yet
            await resolve(h, waiting.run.id, action.id, data=value(f"{ask}-answer"))
        run = await wait_run(h.srv, waiting.run.id)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        (after,) = afters(seen)
        assert after.result is not None
        assert (after.result.source, after.result.status, after.result.output) == (
            "resume",
            "output-available",
            "booked Rome",
        )
        assert results(model.calls[-1])["c1"] == JsonOutput(value="booked Rome")


# ---- TH-05 ------------------------------------------------------------------------


@pytest.mark.rule("TH-05")
async def test_approval_resume_passes_the_entry_and_suspend_history_to_hooks(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[tuple[str, Any]] = []
    model = then_answer(tool_call_step(("c1", "delete_file", {"city": "notes.txt"})))
    async with harness(
        database_url, observing(seen), model=model, tools=[delete_file], mode=hooks_mode
    ) as h:
        _, waiting = await h.ask("go")
        (action,) = await open_actions(h, waiting.run.id)
        assert action.kind == runs_pb2.PENDING_ACTION_KIND_APPROVAL  # a tool definition
        (initial,) = befores(seen)
        assert initial.entry is not None
        assert initial.entry.type == "initial"
        decision = run_service_pb2.ApprovalDecision(approved=True, reason="ok")
        await resolve(h, waiting.run.id, action.id, approval=decision)
        assert (await wait_run(h.srv, waiting.run.id)).status == runs_pb2.RUN_STATUS_COMPLETED
        resumed = befores(seen)[1]
        (after,) = afters(seen)
        request = {"tool": "delete_file", "input": {"city": "notes.txt"}}
        expected = ResumeEntry(
            name="approval", resume={"approved": True, "reason": "ok"}, action_id=action.id
        )
        for i in (resumed, after):
            assert i.entry == expected
            assert i.suspend_history == [request]
        ((city, entry),) = [e[1] for e in executed if e[0] == "delete_file"]
        assert (city, entry) == ("notes.txt", expected)


@pytest.mark.rule("TH-05")
async def test_data_collection_resume_passes_the_entry_and_suspend_history(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[tuple[str, Any]] = []
    model = then_answer(tool_call_step(("c1", "book", {"city": "Rome"})))
    async with harness(
        database_url, observing(seen), model=model, tools=[book], mode=hooks_mode
    ) as h:
        _, waiting = await h.ask("go")
        ids = []
        for ask in ("date", "seats"):
            (action,) = await open_actions(h, waiting.run.id)
            assert action.kind == runs_pb2.PENDING_ACTION_KIND_DATA
            ids.append(action.id)
            await resolve(h, waiting.run.id, action.id, data=value(f"{ask}-answer"))
        assert (await wait_run(h.srv, waiting.run.id)).status == runs_pb2.RUN_STATUS_COMPLETED
        entries = [(b.entry, b.suspend_history) for b in befores(seen)]
        assert entries[0][0] is not None
        assert entries[0][0].type == "initial"
        assert entries[1:] == [
            (
                ResumeEntry(name="date", resume={"data": "date-answer"}, action_id=ids[0]),
                [{"ask": "date"}],
            ),
            (
                ResumeEntry(name="seats", resume={"data": "seats-answer"}, action_id=ids[1]),
                [{"ask": "date"}, {"ask": "seats"}],
            ),
        ]
        (after,) = afters(seen)
        assert after.entry == entries[2][0]
        assert after.suspend_history == [{"ask": "date"}, {"ask": "seats"}]
