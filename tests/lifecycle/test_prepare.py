"""prepare_run (PR-*) and prepare_model_step (PMS-*) through the public API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import fields
from typing import Any

import pytest
from google.protobuf import struct_pb2
from pydantic import BaseModel

from pai_grpc.domain import (
    ModelMessage,
    ModelSettings,
    ModelTextPart,
    StepStreamChunk,
    TextDeltaChunk,
    ToolChoice,
    ToolModelMessage,
    UserModelMessage,
)
from pai_grpc.lifecycle import (
    AssistantResponse,
    Block,
    Complete,
    Continue,
    Fail,
    ModelStepPatch,
    PrepareModelStepInput,
    PrepareRunInput,
    Respond,
    RunPatch,
    lifecycle,
)
from pai_grpc.models import ModelCall, ScriptedModel, tool_call_step
from pai_grpc.server._scope import DEV_SCOPE
from pai_grpc.tools import ToolContext, tool
from tests.lifecycle.harness import harness, tpb


class Query(BaseModel):
    q: str


@tool(description="Look something up.")
async def lookup(value: Query, ctx: ToolContext) -> str:
    return f"found {value.q}"


@tool(description="Another tool.")
async def other(value: Query, ctx: ToolContext) -> str:
    return "other"


def user(text: str) -> UserModelMessage:
    return UserModelMessage(content=[ModelTextPart(text=text)])


def texts(messages: list[ModelMessage]) -> list[str]:
    """Every text part of ``messages``, in order."""
    out: list[str] = []
    for m in messages:
        if isinstance(m.content, str):
            out.append(m.content)
            continue
        out += [p.text for p in m.content if isinstance(p, ModelTextPart)]
    return out


def instructions(call: ModelCall) -> list[str]:
    return [m.content for m in call.instructions]


def by_calls(*steps: Any) -> ScriptedModel:
    """A model answering step ``i`` of the whole test with ``steps[i]`` (the last repeats)."""
    model: ScriptedModel

    def script(call: ModelCall) -> Any:
        return steps[min(len(model.calls) - 1, len(steps) - 1)]

    model = ScriptedModel(script)
    return model


# ---- PR-01 ---------------------------------------------------------------------------


@pytest.mark.rule("PR-01")
async def test_prepare_run_runs_after_the_run_exists_and_gets_the_latest_user_message(
    database_url: str, hooks_mode: str
) -> None:
    box: dict[str, Any] = {}
    seen: list[dict[str, Any]] = []

    async def prepare_run(input: PrepareRunInput) -> None:
        h = box["h"]
        record = await h.store.get_run(DEV_SCOPE, input.run.run_id)
        page = await h.store.list_messages(DEV_SCOPE, input.run.thread_id, view="all")
        latest = input.latest_user_message
        assert latest is not None
        seen.append(
            {
                "run_status": record.status if record else None,
                "stored": [(m.id, m.role) for m in page.items],
                "latest": (latest.message.id, latest.message.role),
                "latest_text": [p.text for p in latest.message.parts if p.type == "text"],
                "input": input.input,
                "initiator": input.run.initiator,
            }
        )

    model = ScriptedModel(["one", "two"])
    async with harness(
        database_url, lifecycle("probe", prepare_run=prepare_run), model=model, mode=hooks_mode
    ) as h:
        box["h"] = h
        thread_id, first = await h.ask("first question")
        _, second = await h.ask("second question", thread_id)
        assert (first.status, second.status) == ("completed", "completed")
        stored = await h.messages(thread_id)
        first_user, second_user = stored[0].message, stored[2].message

    # The run was created (and claimed) and the user message committed before the hook ran.
    assert [s["run_status"] for s in seen] == ["running", "running"]
    assert seen[0]["stored"] == [(first_user.id, "user")]
    assert seen[1]["stored"][-1] == (second_user.id, "user")
    # The latest user message of *this* operation, not the thread's first one.
    assert [s["latest"] for s in seen] == [(first_user.id, "user"), (second_user.id, "user")]
    assert [s["latest_text"] for s in seen] == [["first question"], ["second question"]]
    # The operation input that created the run.
    assert seen[0]["input"] == {"message_id": first_user.id}
    assert seen[1]["input"] == {"message_id": second_user.id}
    assert {s["initiator"] for s in seen} == {"send"}
    # No eager thread snapshot: history is only reachable lazily through the facade.
    assert {f.name for f in fields(PrepareRunInput)} == {
        "run",
        "thread",
        "runtime_context",
        "signal",
        "latest_user_message",
        "input",
    }


@pytest.mark.rule("PR-01")
async def test_prepare_run_of_a_queued_send_sees_its_own_message(
    database_url: str, hooks_mode: str
) -> None:
    entered = asyncio.Event()
    gate = asyncio.Event()
    latest: list[str] = []

    async def prepare_run(input: PrepareRunInput) -> None:
        assert input.latest_user_message is not None
        latest.append(
            "".join(p.text for p in input.latest_user_message.message.parts if p.type == "text")
        )
        if len(latest) == 1:
            entered.set()
            await gate.wait()

    async with harness(
        database_url, lifecycle("probe", prepare_run=prepare_run), mode=hooks_mode
    ) as h:
        thread_id = await h.thread()
        first = await h.send(thread_id, "a")
        await entered.wait()
        queued = await h.send(thread_id, "b")  # the thread is busy: this one is queued
        assert not queued.HasField("message_id")  # queued, its message not yet committed
        gate.set()
        await h.finish(first.run_id)
        done = await h.finish(queued.run_id)
        assert done.status == "completed"
    assert latest == ["a", "b"]


@pytest.mark.rule("PR-01")
async def test_prepare_run_of_a_trigger_gets_the_trigger_input(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[tuple[Any, Any, str]] = []

    def prepare_run(input: PrepareRunInput) -> Complete:
        seen.append((input.latest_user_message, input.input, input.run.initiator))
        return Complete(reason="NOOP")

    async with harness(
        database_url, lifecycle("probe", prepare_run=prepare_run), mode=hooks_mode
    ) as h:
        thread_id = await h.thread()
        value = struct_pb2.Value()
        value.struct_value.update({"job": "nightly", "n": 3})
        handle = (
            await h.srv.threads.Trigger(tpb.TriggerRequest(thread_id=thread_id, input=value))
        ).run
        done = await h.finish(handle.run_id)
        assert (done.status, done.run.reason) == ("completed", "NOOP")
    assert seen == [(None, {"job": "nightly", "n": 3}, "trigger")]


# ---- PR-02 ---------------------------------------------------------------------------


@pytest.mark.rule("PR-02")
async def test_prepare_run_patch_sets_the_episode_defaults(
    database_url: str, hooks_mode: str
) -> None:
    context = user("model-only context")

    def prepare_run(input: PrepareRunInput) -> Continue:
        return Continue(
            RunPatch(
                instructions="episode rules",
                append_model_messages=[context],
                tools=[lookup.manifest()],
                provider_tools={"web_search": {"max_uses": 1}},
                tool_choice=ToolChoice(mode="required"),
                max_steps=2,
                model_settings=ModelSettings(temperature=0.25),
                provider_options={"scripted": {"cache": True}},
            )
        )

    # Without the max_steps patch the model would go on calling tools until the agent's 8.
    model = ScriptedModel(
        lambda call: tool_call_step((f"c{len(call.messages)}", "lookup", {"q": "x"}))
    )
    async with harness(
        database_url,
        lifecycle("defaults", prepare_run=prepare_run),
        model=model,
        tools=[lookup, other],
        instructions="agent rules",
        model_settings=ModelSettings(max_output_tokens=50),
        provider_options={"other": {"k": 1}},
        tool_choice=ToolChoice(mode="auto"),
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("go")
        assert (done.status, done.run.reason) == ("completed", "MAX_STEPS")
        stored = await h.messages(thread_id)

    assert len(model.calls) == 2  # max_steps=2 ends the episode
    for call in model.calls:  # every step of the episode starts from these defaults
        assert instructions(call) == ["episode rules"]
        assert [t.name for t in call.tools] == ["lookup"]
        assert call.provider_tools == {"web_search": {"max_uses": 1}}
        assert call.tool_choice == ToolChoice(mode="required")
        assert call.settings == ModelSettings(max_output_tokens=50, temperature=0.25)
        assert call.provider_options == {"other": {"k": 1}, "scripted": {"cache": True}}
        assert context in call.messages
    first = model.calls[0].messages
    assert texts(first) == ["go", "model-only context"]  # appended before the first step
    # Model-only: never stored.
    assert all("model-only context" not in str(m.message.parts) for m in stored), (
        "the model-only context must not be persisted"
    )


@pytest.mark.rule("PR-02")
async def test_prepare_run_patch_routes_the_episode_to_another_model(
    database_url: str, hooks_mode: str
) -> None:
    agent_model = ScriptedModel(["from the agent model"])
    routed = ScriptedModel(["from the routed model"], model_id="routed")

    def prepare_run(input: PrepareRunInput) -> Continue:
        return Continue(RunPatch(model=routed))

    async with harness(
        database_url,
        lifecycle("route", prepare_run=prepare_run),
        model=agent_model,
        models=[routed],
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "completed"
        assert await h.transcript(thread_id) == [
            ("user", "hi"),
            ("assistant", "from the routed model"),
        ]
    assert agent_model.calls == []
    assert len(routed.calls) == 1


# ---- PR-03 / PR-04 -------------------------------------------------------------------


@pytest.mark.rule("PR-03")
@pytest.mark.parametrize("outcome", ["completed", "blocked"])
async def test_prepare_run_respond_commits_an_assistant_message_without_the_model(
    database_url: str, hooks_mode: str, outcome: str
) -> None:
    def prepare_run(input: PrepareRunInput) -> Respond:
        return Respond(AssistantResponse.text("quota reached"), outcome=outcome, reason="QUOTA")  # type: ignore[arg-type]

    model = ScriptedModel(["never"])
    async with harness(
        database_url,
        lifecycle("quota", prepare_run=prepare_run),
        model=model,
        tools=[lookup],
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("question")
        assert done.status == "completed"
        assert done.outcome == outcome
        assert done.run.reason == "QUOTA"
        assert done.text == "quota reached"  # streamed like a model step
        assert await h.transcript(thread_id) == [
            ("user", "question"),
            ("assistant", "quota reached"),
        ]
        stored = await h.messages(thread_id)
        assistant = stored[-1].message
        assert assistant.role == "assistant"
        assert assistant.run_id == done.run.id
        assert stored[-1].visibility.transcript
        assert stored[-1].visibility.context
        assert done.run.step_count == 1
    assert model.calls == []


@pytest.mark.rule("PR-04")
async def test_prepare_run_complete_ends_the_run_without_a_message(
    database_url: str, hooks_mode: str
) -> None:
    model = ScriptedModel(["never"])
    hooks = lifecycle("noop", prepare_run=lambda i: Complete(reason="NOTHING_TO_DO"))
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("ping")
        assert (done.status, done.outcome, done.run.reason) == (
            "completed",
            "completed",
            "NOTHING_TO_DO",
        )
        assert await h.transcript(thread_id) == [("user", "ping")]
        assert [m.message.role for m in await h.messages(thread_id)] == ["user"]
        assert "text_delta" not in done.kinds
    assert model.calls == []


@pytest.mark.rule("PR-04")
async def test_prepare_run_fail_fails_the_run_without_an_answer(
    database_url: str, hooks_mode: str
) -> None:
    model = ScriptedModel(["never"])
    hooks = lifecycle(
        "guard", prepare_run=lambda i: Fail(reason="UPSTREAM_DOWN", message="the CRM is down")
    )
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("ping")
        assert (done.status, done.outcome, done.run.reason) == ("failed", "failed", "UPSTREAM_DOWN")
        assert done.run.error.reason == "UPSTREAM_DOWN"
        assert done.run.error.message == "the CRM is down"
        record = await h.run_record(done.run.id)
        assert record.status == "failed"
        assert await h.transcript(thread_id) == [("user", "ping")]
        assert [m.message.role for m in await h.messages(thread_id)] == ["user"]
        assert "text_delta" not in done.kinds
    assert model.calls == []


# ---- PR-05 ---------------------------------------------------------------------------


def redactor(seen: list[tuple[int, bool]]) -> Any:
    """A transform_step_stream that redacts the word ``secret`` (canonical output policy)."""

    async def transform(input: Any) -> AsyncIterator[StepStreamChunk]:
        seen.append((input.step.index, input.input is not None))
        async for chunk in input.stream:
            if isinstance(chunk, TextDeltaChunk):
                chunk = chunk.model_copy(
                    update={"text": chunk.text.replace("secret", "[redacted]")}
                )
            yield chunk

    return transform


@pytest.mark.rule("PR-05")
@pytest.mark.parametrize(
    ("where", "outcome"),
    [
        ("prepare_run", "completed"),
        ("prepare_model_step", "completed"),
        ("prepare_model_step block", "blocked"),
    ],
)
async def test_hook_responses_pass_the_output_policy_before_commit(
    database_url: str, hooks_mode: str, where: str, outcome: str
) -> None:
    response = AssistantResponse.text("the secret code is 42")
    hooks: dict[str, Any] = {}
    if where == "prepare_run":
        hooks["prepare_run"] = lambda i: Respond(response)
    elif where == "prepare_model_step":
        hooks["prepare_model_step"] = lambda i: Respond(response)
    else:
        hooks["prepare_model_step"] = lambda i: Block("POLICY", response)
    transformed: list[tuple[int, bool]] = []
    policy = lifecycle("redact", transform_step_stream=redactor(transformed))
    model = ScriptedModel(["never"])
    async with harness(
        database_url, [lifecycle("respond", **hooks), policy], model=model, mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("tell me")
        assert (done.status, done.outcome) == ("completed", outcome)
        assert done.text == "the [redacted] code is 42"  # live
        assert await h.transcript(thread_id) == [
            ("user", "tell me"),
            ("assistant", "the [redacted] code is 42"),  # persisted
        ]
        assert "secret" not in str((await h.messages(thread_id))[-1].message.parts)
    assert transformed == [(0, True)]
    assert model.calls == []


# ---- PMS-01 --------------------------------------------------------------------------


@pytest.mark.rule("PMS-01")
async def test_step_patches_are_ephemeral(database_url: str, hooks_mode: str) -> None:
    overlay = user("episode overlay")
    step_only = user("step zero only")
    seen: list[dict[str, Any]] = []

    def prepare_run(input: PrepareRunInput) -> Continue:
        return Continue(RunPatch(instructions="episode", append_model_messages=[overlay]))

    def prepare_model_step(input: PrepareModelStepInput) -> Continue | None:
        assert input.input is not None
        assert input.step is not None
        request = input.input
        seen.append(
            {
                "index": input.step.index,
                "instructions": [m.content for m in request.instructions],
                "temperature": request.model_settings.temperature,
                "tool_choice": request.tool_choice,
                "provider_options": request.provider_options,
                "overlay": overlay in request.messages,
                "step_only": step_only in request.messages,
                "tool_results": sum(isinstance(m, ToolModelMessage) for m in request.messages),
            }
        )
        if input.step.index == 0:
            return Continue(
                ModelStepPatch(
                    instructions="step zero",
                    append_model_messages=[step_only],
                    model_settings=ModelSettings(temperature=0.9),
                    tool_choice=ToolChoice(mode="required"),
                    provider_options={"scripted": {"step": 0}},
                )
            )
        return None

    model = by_calls(tool_call_step(("c1", "lookup", {"q": "a"})), "done")
    async with harness(
        database_url,
        lifecycle("steps", prepare_run=prepare_run, prepare_model_step=prepare_model_step),
        model=model,
        tools=[lookup],
        instructions="agent",
        model_settings=ModelSettings(temperature=0.1),
        mode=hooks_mode,
    ) as h:
        _, done = await h.ask("go")
        assert done.status == "completed"

    first, second = model.calls
    # Step 0 got its patch ...
    assert instructions(first) == ["step zero"]
    assert first.settings.temperature == 0.9
    assert first.tool_choice == ToolChoice(mode="required")
    assert step_only in first.messages
    # ... step 1 starts again from the episode defaults, the overlay and the thread state.
    assert instructions(second) == ["episode"]
    assert second.settings.temperature == 0.1
    assert second.tool_choice is None
    assert second.provider_options == {}
    assert step_only not in second.messages
    assert overlay in second.messages
    assert [s["index"] for s in seen] == [0, 1]
    assert seen[1] == {
        "index": 1,
        "instructions": ["episode"],
        "temperature": 0.1,
        "tool_choice": None,
        "provider_options": {},
        "overlay": True,
        "step_only": False,
        "tool_results": 1,  # the current thread state: step 0's tool result
    }


# ---- PMS-02 / PMS-03 -----------------------------------------------------------------


@pytest.mark.rule("PMS-02")
@pytest.mark.parametrize("decision", ["respond", "block"])
async def test_respond_and_block_skip_the_model_call_and_tool_phases(
    database_url: str, hooks_mode: str, decision: str
) -> None:
    calls: list[tuple[str, int]] = []

    def prepare_model_step(input: PrepareModelStepInput) -> Any:
        assert input.step is not None
        if input.step.index == 0:
            return None
        if decision == "respond":
            return Respond(AssistantResponse.text("short-circuit"))
        return Block("STOP_HERE", AssistantResponse.text("short-circuit"))

    async def around(request: Any, next: Any) -> Any:
        calls.append(("around", request.step_index))
        return await next()

    def before(input: Any) -> None:
        calls.append(("before_tool_call", input.step.index))

    def after(input: Any) -> None:
        calls.append(("after_tool_result", input.step.index))

    hooks = lifecycle(
        "short",
        prepare_model_step=prepare_model_step,
        around_model_call=around,
        before_tool_call=before,
        after_tool_result=after,
    )
    model = by_calls(tool_call_step(("c1", "lookup", {"q": "a"})), "model answer")
    async with harness(database_url, hooks, model=model, tools=[lookup], mode=hooks_mode) as h:
        thread_id, done = await h.ask("go")
        assert done.status == "completed"
        assert done.outcome == ("completed" if decision == "respond" else "blocked")
        assert (await h.transcript(thread_id))[-1] == ("assistant", "short-circuit")
    # Step 0 went through the model and the tool phases; step 1 skipped them all.
    assert calls == [("around", 0), ("before_tool_call", 0), ("after_tool_result", 0)]
    assert len(model.calls) == 1


@pytest.mark.rule("PMS-03")
@pytest.mark.parametrize("with_response", [True, False])
async def test_block_stops_the_run_as_a_structured_policy_block(
    database_url: str, hooks_mode: str, with_response: bool
) -> None:
    response = AssistantResponse.text("I can't help with that.") if with_response else None
    hooks = lifecycle("policy", prepare_model_step=lambda i: Block("UNSAFE_TOPIC", response))
    model = ScriptedModel(["never"])
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("something bad")
        assert (done.status, done.outcome, done.run.reason) == (
            "completed",
            "blocked",
            "UNSAFE_TOPIC",
        )
        assert not done.run.HasField("error")  # a policy decision, not a failure
        expected = [("user", "something bad")]
        if with_response:
            expected.append(("assistant", "I can't help with that."))
        assert await h.transcript(thread_id) == expected
        record = await h.run_record(done.run.id)
        assert (record.status, record.outcome, record.reason) == (
            "completed",
            "blocked",
            "UNSAFE_TOPIC",
        )
        # The thread is usable again afterwards.
        thread = await h.thread_record(thread_id)
        assert thread.status == "idle"
    assert model.calls == []
