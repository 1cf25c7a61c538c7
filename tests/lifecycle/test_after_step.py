"""after_step (AS-01..04), through the public API.

after_step runs on the assembled step before its transition commits; it
decides the transition (no decision, next_step, complete) but cannot rewrite
the message; waiting and steering take precedence over next_step; its
model-only overlay lives only as long as the uninterrupted episode.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import update

from pai.v1 import run_service_pb2, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.config import Settings
from pai_grpc.domain import (
    AssistantModelMessage,
    FinishStepChunk,
    ModelReasoningPart,
    ModelSettings,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    SystemModelMessage,
    TextDeltaChunk,
    TextEndChunk,
    TextPart,
    TextStartChunk,
    ToolCallChunk,
    ToolModelMessage,
    ToolPart,
    ToolResultChunk,
)
from pai_grpc.errors import ModelError
from pai_grpc.lifecycle import (
    AfterStepInput,
    AssistantResponse,
    Complete,
    ModelCallPatch,
    ModelFallback,
    ModelStepRequest,
    ModelStepStreamResult,
    NextStep,
    Respond,
    lifecycle,
)
from pai_grpc.models import ModelCall, ScriptedModel, text_step, tool_call_step
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import RunnerProcess
from pai_grpc.testing import migrated_store
from pai_grpc.tools import ToolContext, client_tool, tool
from storage._schema import runs as runs_table
from tests.lifecycle.harness import Harness, harness
from tests.runtime.support import collect, wait_run

# ---- tools and helpers -------------------------------------------------------------


class City(BaseModel):
    city: str


executed: list[str] = []


@tool()
async def weather(value: City, ctx: ToolContext) -> dict[str, Any]:
    executed.append(value.city)
    return {"city": value.city, "celsius": 21}


@tool(approval=True)
async def delete_file(value: City) -> str:
    executed.append(f"delete {value.city}")
    return "deleted"


pick = client_tool("pick", input_schema={"type": "object"})


def note(text: str) -> SystemModelMessage:
    return SystemModelMessage(content=text)


def notes(call: ModelCall) -> list[str]:
    """The model-only notes (system messages in the context) one model call received."""
    return [
        m.content
        for m in call.messages
        if isinstance(m, SystemModelMessage) and m.content.startswith("NOTE")
    ]


def has_results(call: ModelCall) -> bool:
    return any(isinstance(m, ToolModelMessage) for m in call.messages)


def by_call(*steps: Any) -> ScriptedModel:
    """A model that answers its n-th call with ``steps[n]`` (the last one repeats)."""
    model: ScriptedModel

    def script(call: ModelCall) -> Any:
        return steps[min(len(model.calls) - 1, len(steps) - 1)]

    model = ScriptedModel(script)
    return model


async def tool_parts(h: Harness, thread_id: str) -> dict[str, ToolPart]:
    out: dict[str, ToolPart] = {}
    for m in await h.messages(thread_id):
        for p in m.message.parts:
            if isinstance(p, ToolPart):
                out[p.tool_call_id] = p
    return out


def at_step(decisions: dict[int, Any], seen: list[AfterStepInput] | None = None) -> Any:
    """An after_step hook returning ``decisions[step index]`` (None otherwise)."""

    def after_step(i: AfterStepInput) -> Any:
        if seen is not None:
            seen.append(i)
        assert i.step is not None
        return decisions.get(i.step.index)

    return after_step


@pytest.fixture(autouse=True)
def _clear() -> None:
    executed.clear()


# ---- AS-01 --------------------------------------------------------------------------


@pytest.mark.rule("AS-01")
async def test_after_step_sees_the_assembled_step_before_its_transition_commits(
    database_url: str, hooks_mode: str
) -> None:
    box: list[Harness] = []
    observed: list[tuple[str, int, str]] = []
    seen: list[AfterStepInput] = []

    async def after_step(i: AfterStepInput) -> None:
        seen.append(i)
        h = box[0]
        run = await h.run_record(i.run.run_id)
        thread = await h.thread_record(i.run.thread_id)
        stored = await tool_parts(h, i.run.thread_id)
        observed.append((run.status, thread.message_count, stored["c1"].state if stored else ""))

    model = by_call(tool_call_step(("c1", "weather", {"city": "Oslo"})), "all done")
    hooks = lifecycle("observe", after_step=after_step)
    async with harness(database_url, hooks, model=model, tools=[weather], mode=hooks_mode) as h:
        box.append(h)
        thread_id, done = await h.ask("go")
        assert done.status == "completed"
        # Step 0 (tools): its calls are durable before execution, but the results and the
        # transition were not committed yet. Step 1 (text): its message was not committed.
        assert observed == [("running", 2, "input-available"), ("running", 2, "output-available")]
        tool_step, text_step = seen
        assert tool_step.step is not None
        assert text_step.step is not None
        assert [c.tool_call_id for c in tool_step.step.tool_calls] == ["c1"]
        (part,) = [p for p in tool_step.step.message.message.parts if isinstance(p, ToolPart)]
        assert (part.state, part.output) == ("output-available", {"city": "Oslo", "celsius": 21})
        assert tool_step.step.finish_reason == "tool-calls"
        assert text_step.step.finish_reason == "stop"
        assert text_step.step.usage is not None
        assert text_step.step.usage.output_tokens == 2
        assert text_step.step.tool_calls == []
        assert [s.step.index for s in seen if s.step] == [0, 1]
        assert text_step.request is not None
        assert text_step.request.step_index == 1
        # The assembled message is the one that was committed.
        stored = [m.message for m in await h.messages(thread_id) if m.message.role == "assistant"]
        assert [m.id for m in stored] == [
            tool_step.step.message.message.id,
            text_step.step.message.message.id,
        ]
        assert [p.text for p in stored[1].parts if isinstance(p, TextPart)] == ["all done"]


@pytest.mark.rule("AS-01")
async def test_after_step_cannot_rewrite_the_assembled_message(
    database_url: str, hooks_mode: str
) -> None:
    def after_step(i: AfterStepInput) -> None:
        assert i.step is not None
        # Editing the hook's view changes nothing durable.
        i.step.message.message.parts.append(TextPart(text="INJECTED"))
        i.step.tool_calls.clear()

    model = ScriptedModel(["original", "second"])
    async with harness(
        database_url, lifecycle("edit", after_step=after_step), model=model, mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "completed"
        assert await h.transcript(thread_id) == [("user", "hi"), ("assistant", "original")]
        assert "INJECTED" not in done.text
        await h.ask("again", thread_id)
        assert "INJECTED" not in repr(model.calls[1].messages)


@pytest.mark.rule("AS-01")
async def test_after_step_has_no_rewrite_decision(database_url: str, hooks_mode: str) -> None:
    hooks = lifecycle(
        "rewrite", after_step=lambda i: Respond(AssistantResponse.text("rewritten answer"))
    )
    async with harness(
        database_url, hooks, model=ScriptedModel(["original"]), mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "failed"
        assert done.run.error.reason == "HOOK_INVALID_DECISION"
        assert "rewritten" not in repr(await h.transcript(thread_id))


# ---- AS-02 --------------------------------------------------------------------------


def provider_only_step() -> list[Any]:
    return [
        ToolCallChunk(
            tool_call_id="p1", tool_name="web_search", input={"q": "x"}, provider_executed=True
        ),
        ToolResultChunk(
            tool_call_id="p1", tool_name="web_search", output={"hits": 1}, provider_executed=True
        ),
        TextStartChunk(id="t"),
        TextDeltaChunk(id="t", text="found it"),
        TextEndChunk(id="t"),
        FinishStepChunk(finish_reason="stop"),
    ]


@pytest.mark.rule("AS-02")
@pytest.mark.parametrize(
    ("first", "calls"),
    [
        (tool_call_step(("c1", "weather", {"city": "Oslo"})), 2),
        ("just text", 1),
        (provider_only_step(), 1),  # provider-executed calls are not runtime tool calls
    ],
    ids=["runtime-tools", "text", "provider-tools"],
)
async def test_without_a_decision_tool_steps_continue_and_others_complete(
    database_url: str, hooks_mode: str, first: Any, calls: int
) -> None:
    seen: list[AfterStepInput] = []
    model = by_call(first, "final")
    hooks = lifecycle("none", after_step=at_step({}, seen))
    async with harness(database_url, hooks, model=model, tools=[weather], mode=hooks_mode) as h:
        _, done = await h.ask("go")
        assert (done.status, done.outcome) == ("completed", "completed")
        assert len(model.calls) == calls
        assert len(seen) == calls
        assert done.run.step_count == calls


@pytest.mark.rule("AS-02")
async def test_next_step_forces_another_step(database_url: str, hooks_mode: str) -> None:
    model = ScriptedModel(["one", "two", "three"])
    hooks = lifecycle("more", after_step=at_step({0: NextStep(), 1: NextStep()}))
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        assert done.status == "completed"
        assert len(model.calls) == 3
        assert await h.transcript(thread_id) == [
            ("user", "go"),
            ("assistant", "one"),
            ("assistant", "two"),
            ("assistant", "three"),
        ]


@pytest.mark.rule("AS-02")
async def test_waiting_takes_precedence_over_next_step(database_url: str, hooks_mode: str) -> None:
    model = by_call(tool_call_step(("c1", "pick", {})), "after the pick")
    hooks = lifecycle(
        "more", after_step=at_step({0: NextStep(append_model_messages=[note("NOTE")])})
    )
    async with harness(database_url, hooks, model=model, tools=[pick], mode=hooks_mode) as h:
        _, done = await h.ask("go")
        assert done.status == "waiting"
        assert len(model.calls) == 1
        actions = await h.store.list_pending_actions("default", done.run.id)
        assert [(a.tool_call_id, a.status) for a in actions] == [("c1", "open")]


@pytest.mark.rule("AS-02")
@pytest.mark.rule("AS-04")
@pytest.mark.parametrize("decision", [None, NextStep(append_model_messages=[note("NOTE")])])
async def test_steering_takes_precedence_over_completion_and_next_step(
    database_url: str, hooks_mode: str, decision: NextStep | None
) -> None:
    reached = asyncio.Event()
    release = asyncio.Event()

    async def after_step(i: AfterStepInput) -> Any:
        assert i.step is not None
        if i.step.index != 0:
            return None
        reached.set()
        await release.wait()  # the user steers while the step is being decided
        return decision

    model = ScriptedModel(lambda call: f"reply {len(model.calls)}")
    async with harness(
        database_url, lifecycle("hold", after_step=after_step), model=model, mode=hooks_mode
    ) as h:
        thread_id = await h.thread()
        handle = await h.send(thread_id, "first")
        await asyncio.wait_for(reached.wait(), 10)
        steer = await h.send(thread_id, "actually, this", delivery=tpb.DELIVERY_STEER)
        assert steer.run_id == handle.run_id
        release.set()
        done = await h.finish(handle.run_id)
        assert done.status == "completed"
        assert len(model.calls) == 2  # the step that would have completed did not
        assert await h.transcript(thread_id) == [
            ("user", "first"),
            ("user", "actually, this"),
            ("assistant", "reply 1"),
            ("assistant", "reply 2"),
        ]
        assert "actually, this" in repr(model.calls[1].messages)
        assert notes(model.calls[1]) == []  # steering dropped the overlay (AS-04)


@pytest.mark.rule("AS-02")
async def test_complete_finishes_even_when_the_model_called_tools(
    database_url: str, hooks_mode: str
) -> None:
    model = by_call(tool_call_step(("c1", "weather", {"city": "Oslo"})), "never")
    hooks = lifecycle("stop", after_step=lambda i: Complete(reason="ENOUGH"))
    async with harness(database_url, hooks, model=model, tools=[weather], mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        assert (done.status, done.outcome, done.run.reason) == ("completed", "completed", "ENOUGH")
        assert len(model.calls) == 1
        assert executed == ["Oslo"]
        part = (await tool_parts(h, thread_id))["c1"]
        assert (part.state, part.output) == ("output-available", {"city": "Oslo", "celsius": 21})


# ---- AS-03 --------------------------------------------------------------------------


@pytest.mark.rule("AS-03")
async def test_complete_cancels_the_steps_waiting_tool_parts_atomically(
    database_url: str, hooks_mode: str
) -> None:
    model = by_call(
        tool_call_step(
            ("client", "pick", {}),
            ("approval", "delete_file", {"city": "notes.txt"}),
            ("backend", "weather", {"city": "Oslo"}),
        ),
        "never",
    )
    hooks = lifecycle("stop", after_step=lambda i: Complete())
    async with harness(
        database_url, hooks, model=model, tools=[pick, delete_file, weather], mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("go")
        assert (done.status, done.outcome) == ("completed", "completed")
        assert len(model.calls) == 1
        assert executed == ["Oslo"]
        # Never an open action on a terminal run, and the run never waited.
        assert await h.store.list_pending_actions("default", done.run.id) == []
        replay = await collect(h.srv, done.run.id)
        kinds = [e.WhichOneof("event") for e in replay]
        assert "pending_action" not in kinds
        statuses = [e.status.status for e in replay if e.WhichOneof("event") == "status"]
        assert runs_pb2.RUN_STATUS_WAITING not in statuses
        assert statuses[-1] == runs_pb2.RUN_STATUS_COMPLETED
        parts = await tool_parts(h, thread_id)
        assert parts["client"].state == "output-error"
        assert parts["approval"].state == "output-error"
        assert parts["backend"].state == "output-available"
        errored = {
            e.chunk.tool_error.tool_call_id
            for e in replay
            if e.WhichOneof("event") == "chunk" and e.chunk.WhichOneof("chunk") == "tool_error"
        }
        assert errored == {"client", "approval"}
        thread = await h.thread_record(thread_id)
        assert (thread.status, thread.active_run_id) == ("idle", None)


@pytest.mark.rule("AS-03")
async def test_complete_on_a_text_step_commits_its_message(
    database_url: str, hooks_mode: str
) -> None:
    model = ScriptedModel(["the answer"])
    hooks = lifecycle("stop", after_step=lambda i: Complete(reason="DONE"))
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        assert (done.status, done.run.reason) == ("completed", "DONE")
        assert await h.transcript(thread_id) == [("user", "go"), ("assistant", "the answer")]


# ---- AS-04 --------------------------------------------------------------------------


@pytest.mark.rule("AS-04")
async def test_the_overlay_feeds_later_steps_of_the_episode_only(
    database_url: str, hooks_mode: str
) -> None:
    model = ScriptedModel(lambda call: f"step {len(model.calls)}")
    decisions = {
        0: NextStep(append_model_messages=[note("NOTE-A")]),
        1: NextStep(),  # the overlay stays for every later step of the episode
        2: NextStep(replace_model_messages=[note("NOTE-B")]),
    }
    hooks = lifecycle("overlay", after_step=at_step(decisions))
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        assert done.status == "completed"
        assert [notes(c) for c in model.calls] == [[], ["NOTE-A"], ["NOTE-A"], ["NOTE-B"]]
        # It is not transcript state ...
        assert "NOTE" not in repr(await h.messages(thread_id))
        # ... and completion drops it: the next episode starts without it.
        decisions.clear()
        await h.ask("again", thread_id)
        assert notes(model.calls[-1]) == []


@pytest.mark.rule("AS-04")
async def test_waiting_and_resume_drop_the_overlay(database_url: str, hooks_mode: str) -> None:
    model = by_call(
        tool_call_step(("c1", "weather", {"city": "Oslo"})),
        tool_call_step(("c2", "pick", {})),
        "finished",
    )
    decisions = {
        0: NextStep(append_model_messages=[note("NOTE-1")]),
        1: NextStep(append_model_messages=[note("NOTE-2")]),  # the step that waits
    }
    hooks = lifecycle("overlay", after_step=at_step(decisions))
    async with harness(
        database_url, hooks, model=model, tools=[weather, pick], mode=hooks_mode
    ) as h:
        _, waiting = await h.ask("go")
        assert waiting.status == "waiting"
        assert notes(model.calls[1]) == ["NOTE-1"]  # same uninterrupted episode
        (action,) = await h.store.list_pending_actions("default", waiting.run.id)
        await h.srv.runs.ResolvePendingAction(
            run_service_pb2.ResolvePendingActionRequest(
                run_id=waiting.run.id,
                action_id=action.id,
                tool_result=run_service_pb2.ClientToolResult(
                    error_text="the user closed the picker"
                ),
            )
        )
        run = await wait_run(h.srv, waiting.run.id)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert len(model.calls) == 3
        assert has_results(model.calls[2])
        assert notes(model.calls[2]) == []


@pytest.mark.rule("AS-04")
async def test_cancellation_drops_the_overlay(database_url: str, hooks_mode: str) -> None:
    reached = asyncio.Event()

    async def after_step(i: AfterStepInput) -> Any:
        assert i.step is not None
        if i.step.index == 0 and not reached.is_set():
            return NextStep(append_model_messages=[note("NOTE")])
        if i.step.index == 1 and not reached.is_set():
            reached.set()
            await asyncio.Event().wait()  # held until the run is cancelled
        return None

    model = ScriptedModel(lambda call: f"reply {len(model.calls)}")
    async with harness(
        database_url, lifecycle("hold", after_step=after_step), model=model, mode=hooks_mode
    ) as h:
        thread_id = await h.thread()
        handle = await h.send(thread_id, "first")
        await asyncio.wait_for(reached.wait(), 10)
        assert notes(model.calls[1]) == ["NOTE"]
        await h.srv.runs.CancelRun(run_service_pb2.CancelRunRequest(run_id=handle.run_id))
        cancelled = await wait_run(h.srv, handle.run_id)
        assert cancelled.status == runs_pb2.RUN_STATUS_CANCELLED
        _, done = await h.ask("next", thread_id)
        assert done.status == "completed"
        assert notes(model.calls[-1]) == []


@pytest.mark.rule("AS-04")
async def test_lease_loss_drops_the_overlay(database_url: str, hooks_mode: str) -> None:
    started = asyncio.Event()

    @tool()
    async def slow(value: City) -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    def script(call: ModelCall) -> Any:
        if has_results(call):
            return "recovered"
        if any("NOTE" in n for n in notes(call)):
            return tool_call_step(("c1", "slow", {"city": "x"}))
        return "first step"

    hooks = lifecycle(
        "overlay",
        after_step=lambda i: (
            NextStep(append_model_messages=[note("NOTE")])
            if i.step.index == 0  # type: ignore[union-attr]
            else None
        ),
    )
    model = ScriptedModel(script)
    async with harness(database_url, hooks, model=model, tools=[slow], mode=hooks_mode) as h:
        thread_id = await h.thread()
        handle = await h.send(thread_id, "go")
        await asyncio.wait_for(started.wait(), 10)
        assert notes(model.calls[1]) == ["NOTE"]
        # The runner stalls inside the tool; its lease runs out and another runner takes over.
        await h.store.run_in_transaction(  # type: ignore[attr-defined]
            lambda c: c.execute(
                update(runs_table)
                .where(runs_table.c.id == handle.run_id)
                .values(lease_expires_at=datetime.now(UTC) - timedelta(seconds=1))
            )
        )
        other_model = ScriptedModel(script)
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
        finally:
            await other.stop(grace=1)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert run.attempts == 2
        # (Whichever runner took the expired lease over: both run the same hooks.)
        recovered_call = [*other_model.calls, *model.calls[2:]][0]
        assert has_results(recovered_call)
        assert notes(recovered_call) == []


# ---- the request after_step sees: the one the provider received ----------------------


def reasoning_step(thought: str, answer: str) -> list[Any]:
    """A step that reasons before answering."""
    return [
        ReasoningStartChunk(id="r"),
        ReasoningDeltaChunk(id="r", text=thought),
        ReasoningEndChunk(id="r"),
        *text_step(answer),
    ]


def thoughts(messages: list[Any]) -> list[str]:
    """The reasoning texts in model messages."""
    return [
        p.text
        for m in messages
        if isinstance(m, AssistantModelMessage)
        for p in m.content
        if isinstance(p, ModelReasoningPart)
    ]


@pytest.mark.rule("CFG-01")
@pytest.mark.rule("RSN-04")
async def test_after_step_sees_the_request_the_provider_received(
    database_url: str, hooks_mode: str
) -> None:
    primary = ScriptedModel(["never"])
    routed = ScriptedModel(
        [reasoning_step("first thought", "one"), reasoning_step("second thought", "two")],
        model_id="routed",
    )
    before_call: list[list[str]] = []
    seen: list[AfterStepInput] = []

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        before_call.append(thoughts(request.messages))
        patch = ModelCallPatch(
            model=routed, instructions="CALL", model_settings=ModelSettings(seed=3)
        )
        return await next(patch)  # type: ignore[no-any-return]

    hooks = lifecycle("route", around_model_call=around, after_step=at_step({}, seen))
    async with harness(
        database_url,
        hooks,
        model=primary,
        models=[routed],
        instructions="agent",
        model_settings=ModelSettings(temperature=0.1),
        mode=hooks_mode,
    ) as h:
        thread_id, first = await h.ask("one")
        _, second = await h.ask("two", thread_id)
        assert (first.status, second.status) == ("completed", "completed")
    assert primary.calls == []
    assert len(routed.calls) == 2
    for after, call in zip(seen, routed.calls, strict=True):
        request = after.request
        assert request is not None
        # The aroundModelCall route, not the request as prepared for the step.
        assert (request.model.provider, request.model.model_id) == ("scripted", "routed")
        assert [m.content for m in request.instructions] == ["CALL"]
        assert request.model_settings == ModelSettings(seed=3) == call.settings
        assert [m.role for m in request.messages] == [m.role for m in call.messages]
    # The wrapper saw the earlier turn's reasoning; the provider did not, and neither
    # does the request reported after the call (RSN-04: only the attempt is pruned).
    assert before_call[1] == ["first thought"]
    assert thoughts(routed.calls[1].messages) == []
    assert seen[1].request is not None
    assert thoughts(seen[1].request.messages) == []


@pytest.mark.rule("CFG-01")
async def test_after_step_reports_the_model_fallback_route(
    database_url: str, hooks_mode: str
) -> None:
    primary = ScriptedModel([ModelError("overloaded", reason="PROVIDER_OVERLOADED")])
    backup = ScriptedModel(["from the backup"], model_id="backup")
    seen: list[AfterStepInput] = []
    hooks = [ModelFallback(backup), lifecycle("observe", after_step=at_step({}, seen))]
    async with harness(database_url, hooks, model=primary, models=[backup], mode=hooks_mode) as h:
        _, done = await h.ask("hi")
        assert done.status == "completed"
        assert done.text == "from the backup"
    (after,) = seen
    assert after.request is not None
    assert (after.request.model.provider, after.request.model.model_id) == ("scripted", "backup")
