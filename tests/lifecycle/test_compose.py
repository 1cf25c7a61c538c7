"""compose_lifecycle (CMPS-*): order, wrappers, short-circuits, failures and bad decisions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from pai_grpc.domain import (
    ModelMessage,
    ModelSettings,
    ModelTextPart,
    StepStreamChunk,
    TextDeltaChunk,
    UserModelMessage,
)
from pai_grpc.lifecycle import (
    AfterStepInput,
    AssistantResponse,
    BeforeToolCallInput,
    Block,
    Complete,
    Continue,
    Fail,
    ModelCallPatch,
    ModelStepPatch,
    ModelStepRequest,
    ModelStepStreamResult,
    NextStep,
    PrepareModelStepInput,
    PrepareRunInput,
    ReplaceInput,
    Respond,
    RunPatch,
    compose_lifecycle,
    lifecycle,
)
from pai_grpc.models import ModelCall, ScriptedModel, tool_call_step
from pai_grpc.tools import ToolContext, tool
from tests.lifecycle.harness import harness


class Query(BaseModel):
    q: str


executed: list[str] = []


@tool(description="Look something up.")
async def lookup(value: Query, ctx: ToolContext) -> str:
    executed.append(value.q)
    return f"found {value.q}"


def user(text: str) -> UserModelMessage:
    return UserModelMessage(content=[ModelTextPart(text=text)])


def texts(messages: list[ModelMessage]) -> list[str]:
    out: list[str] = []
    for m in messages:
        if isinstance(m.content, str):
            out.append(m.content)
            continue
        out += [p.text for p in m.content if isinstance(p, ModelTextPart)]
    return out


def by_calls(*steps: Any) -> ScriptedModel:
    """A model answering its ``i``-th call with ``steps[i]`` (the last repeats)."""
    model: ScriptedModel

    def script(call: ModelCall) -> Any:
        return steps[min(len(model.calls) - 1, len(steps) - 1)]

    model = ScriptedModel(script)
    return model


# ---- CMPS-01 -------------------------------------------------------------------------


@pytest.mark.rule("CMPS-01")
async def test_prepare_model_step_runs_left_to_right_passing_the_patched_input_on(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[tuple[str, list[str], list[str]]] = []

    def part(name: str) -> Any:
        def prepare_model_step(input: PrepareModelStepInput) -> Continue:
            assert input.input is not None
            request = input.input
            seen.append((name, [m.content for m in request.instructions], texts(request.messages)))
            return Continue(
                ModelStepPatch(instructions=name, append_model_messages=[user(f"from {name}")])
            )

        return lifecycle(name, prepare_model_step=prepare_model_step)

    model = ScriptedModel(["ok"])
    async with harness(
        database_url,
        [part("a"), part("b"), part("c")],
        model=model,
        instructions="agent",
        mode=hooks_mode,
    ) as h:
        _, done = await h.ask("hi")
        assert done.status == "completed"
    assert seen == [
        ("a", ["agent"], ["hi"]),
        ("b", ["a"], ["hi", "from a"]),
        ("c", ["b"], ["hi", "from a", "from b"]),
    ]
    (call,) = model.calls
    assert [m.content for m in call.instructions] == ["c"]
    assert texts(call.messages) == ["hi", "from a", "from b", "from c"]


@pytest.mark.rule("CMPS-01")
async def test_prepare_run_parts_see_the_same_input_and_their_patches_accumulate(
    database_url: str, hooks_mode: str
) -> None:
    inputs: list[tuple[str, PrepareRunInput]] = []

    def part(name: str, patch: RunPatch | None) -> Any:
        def prepare_run(input: PrepareRunInput) -> Continue | None:
            inputs.append((name, input))
            return Continue(patch) if patch is not None else None

        return lifecycle(name, prepare_run=prepare_run)

    parts = [
        part("a", RunPatch(instructions="from a", model_settings=ModelSettings(temperature=0.2))),
        part("b", None),
        part("c", RunPatch(model_settings=ModelSettings(top_p=0.5))),
        part("d", RunPatch(instructions="from d")),
    ]
    model = ScriptedModel(["ok"])
    async with harness(
        database_url, parts, model=model, instructions="agent", mode=hooks_mode
    ) as h:
        _, done = await h.ask("hi")
        assert done.status == "completed"
    assert [name for name, _ in inputs] == ["a", "b", "c", "d"]
    first = inputs[0][1]
    assert all(input is first for _, input in inputs)  # the same input, not a patched one
    (call,) = model.calls
    assert call.settings == ModelSettings(temperature=0.2, top_p=0.5)
    assert [m.content for m in call.instructions] == ["from d"]  # later patches apply later


@pytest.mark.rule("CMPS-01")
async def test_transforms_run_left_to_right_on_the_transformed_stream(
    database_url: str, hooks_mode: str
) -> None:
    def rewrite(name: str, fn: Any) -> Any:
        async def transform(input: Any) -> AsyncIterator[StepStreamChunk]:
            async for chunk in input.stream:
                if isinstance(chunk, TextDeltaChunk):
                    chunk = chunk.model_copy(update={"text": fn(chunk.text)})
                yield chunk

        return lifecycle(name, transform_step_stream=transform)

    parts = [
        rewrite("translate", lambda t: t.replace("hello", "bonjour")),
        rewrite("shout", str.upper),
    ]
    async with harness(
        database_url, parts, model=ScriptedModel(["hello world"]), mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("hi")
        assert done.text == "BONJOUR WORLD"  # reversed order would give "HELLO WORLD"
        assert await h.transcript(thread_id) == [("user", "hi"), ("assistant", "BONJOUR WORLD")]


@pytest.mark.rule("CMPS-01")
async def test_before_tool_call_passes_replaced_input_on(
    database_url: str, hooks_mode: str
) -> None:
    executed.clear()
    seen: list[tuple[str, Any]] = []

    def replace_part(input: BeforeToolCallInput) -> ReplaceInput:
        seen.append(("a", input.input))
        return ReplaceInput({"q": "replaced"})

    def observe(input: BeforeToolCallInput) -> None:
        seen.append(("b", input.input))

    parts = [
        lifecycle("a", before_tool_call=replace_part),
        lifecycle("b", before_tool_call=observe),
    ]
    model = by_calls(tool_call_step(("c1", "lookup", {"q": "original"})), "done")
    async with harness(database_url, parts, model=model, tools=[lookup], mode=hooks_mode) as h:
        _, done = await h.ask("go")
        assert done.status == "completed"
    assert seen == [("a", {"q": "original"}), ("b", {"q": "replaced"})]
    assert executed == ["replaced"]


@pytest.mark.rule("CMPS-01")
async def test_after_step_parts_see_the_same_input_and_their_decisions_accumulate(
    database_url: str, hooks_mode: str
) -> None:
    inputs: list[tuple[str, int, AfterStepInput]] = []

    def part(name: str) -> Any:
        def after_step(input: AfterStepInput) -> NextStep | None:
            assert input.step is not None
            inputs.append((name, input.step.index, input))
            if input.step.index == 0:
                return NextStep(append_model_messages=[user(f"note from {name}")])
            return None

        return lifecycle(name, after_step=after_step)

    model = ScriptedModel(["first", "second"])
    async with harness(database_url, [part("a"), part("b")], model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "completed"
        assert await h.transcript(thread_id) == [
            ("user", "hi"),
            ("assistant", "first"),
            ("assistant", "second"),
        ]
    assert [(name, index) for name, index, _ in inputs] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert inputs[0][2] is inputs[1][2]
    # Both parts' overlays reached the next step, in part order.
    assert texts(model.calls[1].messages)[-2:] == ["note from a", "note from b"]


# ---- CMPS-02 -------------------------------------------------------------------------


@pytest.mark.rule("CMPS-02")
@pytest.mark.parametrize("nested", [False, True])
async def test_around_model_call_wraps_with_the_first_part_outermost(
    database_url: str, hooks_mode: str, nested: bool
) -> None:
    trace: list[str] = []

    def wrapper(name: str) -> Any:
        async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
            trace.append(f"enter {name} seeing {request.model_settings.stop_sequences}")
            stops = [*(request.model_settings.stop_sequences or []), name]
            result: ModelStepStreamResult = await next(
                ModelCallPatch(model_settings=ModelSettings(stop_sequences=stops))
            )
            trace.append(f"exit {name}")
            return result

        return lifecycle(name, around_model_call=around)

    a, b, c = wrapper("a"), wrapper("b"), wrapper("c")
    hooks = compose_lifecycle(compose_lifecycle(a, b), c) if nested else compose_lifecycle(a, b, c)
    model = ScriptedModel(["ok"])
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        _, done = await h.ask("hi")
        assert done.status == "completed"
    assert trace == [
        "enter a seeing None",
        "enter b seeing ['a']",
        "enter c seeing ['a', 'b']",
        "exit c",
        "exit b",
        "exit a",
    ]
    assert model.calls[0].settings.stop_sequences == ["a", "b", "c"]


# ---- CMPS-03 -------------------------------------------------------------------------


def _run_decision(kind: str, text: str) -> Any:
    return {
        "respond": Respond(AssistantResponse.text(text)),
        "complete": Complete(reason=text),
        "fail": Fail(reason=text),
    }[kind]


@pytest.mark.rule("CMPS-03")
@pytest.mark.parametrize("kind", ["respond", "complete", "fail"])
async def test_the_first_deciding_prepare_run_ends_the_path(
    database_url: str, hooks_mode: str, kind: str
) -> None:
    called: list[str] = []

    def part(name: str, decision: Any) -> Any:
        def prepare_run(input: PrepareRunInput) -> Any:
            called.append(name)
            return decision

        return lifecycle(name, prepare_run=prepare_run)

    parts = [
        part("patcher", Continue(RunPatch(instructions="x"))),
        part("decider", _run_decision(kind, "FIRST")),
        part("later", _run_decision(kind, "SECOND")),
        lifecycle("step", prepare_model_step=lambda i: called.append("prepare_model_step")),
    ]
    model = ScriptedModel(["never"])
    async with harness(database_url, parts, model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("hi")
        if kind == "respond":
            assert (done.status, done.outcome) == ("completed", "completed")
            assert await h.transcript(thread_id) == [("user", "hi"), ("assistant", "FIRST")]
        else:
            assert done.status == ("completed" if kind == "complete" else "failed")
            assert done.run.reason == "FIRST"
            assert await h.transcript(thread_id) == [("user", "hi")]
    assert called == ["patcher", "decider"]
    assert model.calls == []


@pytest.mark.rule("CMPS-03")
@pytest.mark.parametrize("kind", ["respond", "block"])
async def test_the_first_deciding_prepare_model_step_ends_the_path(
    database_url: str, hooks_mode: str, kind: str
) -> None:
    called: list[str] = []

    def decision(text: str) -> Any:
        if kind == "respond":
            return Respond(AssistantResponse.text(text))
        return Block(text, AssistantResponse.text(text))

    def part(name: str, result: Any) -> Any:
        def prepare_model_step(input: PrepareModelStepInput) -> Any:
            called.append(name)
            return result

        return lifecycle(name, prepare_model_step=prepare_model_step)

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        called.append("around_model_call")
        return await next()  # type: ignore[no-any-return]

    parts = [
        part("patcher", Continue(ModelStepPatch(instructions="x"))),
        part("decider", decision("FIRST")),
        part("later", decision("SECOND")),
        lifecycle("wrap", around_model_call=around),
    ]
    model = ScriptedModel(["never"])
    async with harness(database_url, parts, model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "completed"
        assert done.outcome == ("completed" if kind == "respond" else "blocked")
        assert await h.transcript(thread_id) == [("user", "hi"), ("assistant", "FIRST")]
    assert called == ["patcher", "decider"]
    assert model.calls == []


# ---- CMPS-04 -------------------------------------------------------------------------

PHASES_BEFORE_THE_MODEL = ("prepare_run", "resolve_model_context", "prepare_model_step")


def _exploding(phase: str, sync: bool) -> Any:
    """A lifecycle whose ``phase`` raises."""
    error = RuntimeError(f"boom in {phase}")

    def fail_sync(*args: Any) -> Any:
        raise error

    async def fail_async(*args: Any) -> Any:
        raise error

    async def transform(input: Any) -> AsyncIterator[StepStreamChunk]:
        async for chunk in input.stream:
            if isinstance(chunk, TextDeltaChunk):
                raise error
            yield chunk

    if phase == "transform_step_stream":
        return lifecycle("exploder", transform_step_stream=transform)
    return lifecycle("exploder", **{phase: fail_sync if sync else fail_async})


@pytest.mark.rule("CMPS-04")
@pytest.mark.parametrize(
    ("phase", "sync"),
    [
        ("prepare_run", False),
        ("prepare_run", True),
        ("resolve_model_context", False),
        ("prepare_model_step", False),
        ("prepare_model_step", True),
        ("around_model_call", False),
        ("transform_step_stream", False),
        ("before_tool_call", False),
        ("after_tool_result", True),
        ("after_step", False),
    ],
)
async def test_a_hook_that_raises_fails_the_run_with_a_clear_reason(
    database_url: str, hooks_mode: str, phase: str, sync: bool
) -> None:
    executed.clear()
    model = by_calls(tool_call_step(("c1", "lookup", {"q": "a"}), text="calling "), "done")
    async with harness(
        database_url,
        [lifecycle("fine"), _exploding(phase, sync)],
        model=model,
        tools=[lookup],
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("go")
        assert (done.status, done.outcome, done.run.reason) == ("failed", "failed", "HOOK_FAILED")
        assert done.run.error.reason == "HOOK_FAILED"
        message = done.run.error.message
        assert "'exploder'" in message
        assert phase in message
        assert f"boom in {phase}" in message
        assert "error" in done.kinds  # the failure is streamed too
        record = await h.run_record(done.run.id)
        assert (record.status, record.reason) == ("failed", "HOOK_FAILED")
        roles = [role for role, _ in await h.transcript(thread_id)]
    if phase in PHASES_BEFORE_THE_MODEL:
        assert model.calls == []
    if phase in (*PHASES_BEFORE_THE_MODEL, "around_model_call", "transform_step_stream"):
        assert roles == ["user"]  # nothing of the step was committed
    if phase == "before_tool_call":
        assert executed == []
    assert len(model.calls) <= 1  # the run never got past the failing step


# ---- invalid decisions and patches ---------------------------------------------------


def _bad(phase: str, value: Any) -> Any:
    """A lifecycle named ``bad`` whose ``phase`` returns ``value`` (or calls next with it)."""
    if phase == "around_model_call":

        async def around(request: ModelStepRequest, next: Any) -> Any:
            if value == "return none":
                return None
            return await next(value)

        return lifecycle("bad", around_model_call=around)
    if phase == "resolve_model_context":
        return lifecycle("bad", resolve_model_context=lambda i, next: value)
    return lifecycle("bad", **{phase: lambda *args: value})


INVALID = [
    ("prepare_run", "yes", "prepare_run"),
    ("prepare_run", Block("NOT_HERE"), "prepare_run"),
    pytest.param(
        "prepare_run", Continue({"run_id": "run_x"}), "run_id", marks=pytest.mark.rule("AMC-02")
    ),
    pytest.param(
        "prepare_run",
        Continue({"runtime_context": {}}),
        "runtime_context",
        marks=pytest.mark.rule("AMC-02"),
    ),
    ("prepare_run", Continue(ModelStepPatch(messages=[])), "RunPatch"),  # type: ignore[arg-type]
    ("prepare_run", Continue({"temprature": 0.3}), "temprature"),
    ("prepare_run", Continue(RunPatch(max_steps=-1)), "max_steps"),
    ("prepare_run", Continue(RunPatch(max_steps=0)), "max_steps"),
    ("prepare_run", Respond(AssistantResponse.text("x"), outcome="maybe"), "outcome"),  # type: ignore[arg-type]
    ("prepare_run", Respond("just text"), "AssistantResponse"),  # type: ignore[arg-type]
    ("prepare_run", Fail(""), "reason"),
    ("prepare_model_step", Block(""), "reason"),
    ("prepare_model_step", Block("X", "plain text"), "AssistantResponse"),  # type: ignore[arg-type]
    ("prepare_model_step", Complete(), "prepare_model_step"),
    ("prepare_model_step", Fail("NOPE"), "prepare_model_step"),
    pytest.param(
        "prepare_model_step",
        Continue({"step_index": 5}),
        "step_index",
        marks=pytest.mark.rule("AMC-02"),
    ),
    pytest.param(
        "prepare_model_step",
        Continue({"thread_id": "thr_x"}),
        "thread_id",
        marks=pytest.mark.rule("AMC-02"),
    ),
    ("prepare_model_step", Continue(RunPatch(max_steps=1)), "ModelStepPatch"),
    pytest.param(
        "around_model_call", {"run_id": "run_x"}, "run_id", marks=pytest.mark.rule("AMC-02")
    ),
    pytest.param(
        "around_model_call", {"step_index": 3}, "step_index", marks=pytest.mark.rule("AMC-02")
    ),
    ("around_model_call", "return none", "ModelStepStreamResult"),
    ("around_model_call", 42, "ModelCallPatch"),
    ("resolve_model_context", "not a list", "list"),
    ("after_step", Respond(AssistantResponse.text("x")), "after_step"),
    ("before_tool_call", Complete(), "before_tool_call"),
]


@pytest.mark.parametrize(("phase", "value", "mentions"), INVALID)
async def test_an_invalid_decision_or_patch_fails_the_run_with_a_clear_error(
    database_url: str, hooks_mode: str, phase: str, value: Any, mentions: str
) -> None:
    executed.clear()
    model = by_calls(tool_call_step(("c1", "lookup", {"q": "a"})), "done")
    async with harness(
        database_url,
        [lifecycle("fine"), _bad(phase, value)],
        model=model,
        tools=[lookup],
        mode=hooks_mode,
    ) as h:
        _, done = await h.ask("go")
        assert (done.status, done.outcome, done.run.reason) == (
            "failed",
            "failed",
            "HOOK_INVALID_DECISION",
        )
        message = done.run.error.message
        assert "'bad'" in message, message  # names the hook ...
        assert phase in message, message  # ... and its phase
        assert mentions in message, message  # ... and what is wrong
    if phase in ("prepare_run", "prepare_model_step", "resolve_model_context", "around_model_call"):
        assert model.calls == []
    if phase == "before_tool_call":
        assert executed == []
