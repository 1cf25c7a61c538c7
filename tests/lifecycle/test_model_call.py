"""Model configuration order (CFG-*), around_model_call (AMC-*) and reasoning pruning (RSN-*)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.protobuf import struct_pb2
from pydantic import BaseModel

from pai.v1 import run_service_pb2, runs_pb2
from pai_grpc.domain import (
    AssistantModelMessage,
    FinishStepChunk,
    ModelFilePart,
    ModelMessage,
    ModelReasoningPart,
    ModelSettings,
    ModelTextPart,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningFileChunk,
    ReasoningStartChunk,
    StepStreamChunk,
    SystemModelMessage,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolChoice,
    Usage,
    UserModelMessage,
)
from pai_grpc.errors import ModelError
from pai_grpc.lifecycle import (
    AbortSignal,
    Continue,
    ModelCallPatch,
    ModelStepPatch,
    ModelStepRequest,
    ModelStepStreamResult,
    PrepareModelStepInput,
    PrepareRunInput,
    RunPatch,
    lifecycle,
)
from pai_grpc.lifecycle.internal import RUNTIME_OWNED
from pai_grpc.models import ModelCall, ScriptedModel, text_step, tool_call_step
from pai_grpc.tools import ToolContext, tool
from tests.lifecycle.harness import Harness, harness, tpb
from tests.runtime.support import wait_run


class Query(BaseModel):
    q: str


@tool(description="Look something up.")
async def lookup(value: Query, ctx: ToolContext) -> str:
    return f"found {value.q}"


@tool(description="Another tool.")
async def other(value: Query, ctx: ToolContext) -> str:
    return "other"


@tool(description="Needs a human first.", approval=True)
async def guarded(value: Query, ctx: ToolContext) -> str:
    return f"done {value.q}"


def user(text: str) -> UserModelMessage:
    return UserModelMessage(content=[ModelTextPart(text=text)])


def instructions(call: ModelCall | ModelStepRequest) -> list[str]:
    return [m.content for m in call.instructions]


def by_calls(*steps: Any) -> ScriptedModel:
    """A model answering its ``i``-th call with ``steps[i]`` (the last repeats)."""
    model: ScriptedModel

    def script(call: ModelCall) -> Any:
        return steps[min(len(model.calls) - 1, len(steps) - 1)]

    model = ScriptedModel(script)
    return model


def reasoning(text: str, then: list[StepStreamChunk], block: str = "r") -> list[StepStreamChunk]:
    """A step that reasons (with a provider signature) before ``then``."""
    return [
        ReasoningStartChunk(id=block),
        ReasoningDeltaChunk(id=block, text=text),
        ReasoningDeltaChunk(id=block, text="", provider_metadata={"scripted": {"signature": "s"}}),
        ReasoningEndChunk(id=block),
        *then,
    ]


def reasoning_texts(messages: list[ModelMessage]) -> list[str]:
    return [
        p.text
        for m in messages
        if isinstance(m, AssistantModelMessage)
        for p in m.content
        if isinstance(p, ModelReasoningPart)
    ]


class StallingModel:
    """A provider whose stream emits a little text and then waits for ``release``.

    It records when the stream was constructed, when its consumption began,
    and how it was closed (cancelled, or closed by the runtime).
    """

    def __init__(self) -> None:
        self.calls: list[ModelCall] = []
        self.events: list[str] = []
        self.release = asyncio.Event()

    @property
    def provider(self) -> str:
        return "stalling"

    @property
    def model_id(self) -> str:
        return "stalling"

    async def stream(self, call: ModelCall) -> AsyncIterator[StepStreamChunk]:
        self.calls.append(call)
        self.events.append("constructed")
        return self._emit()

    async def _emit(self) -> AsyncIterator[StepStreamChunk]:
        self.events.append("consumed")
        try:
            yield TextStartChunk(id="t")
            yield TextDeltaChunk(id="t", text="partial ")
            await self.release.wait()
            yield TextDeltaChunk(id="t", text="rest")
            yield TextEndChunk(id="t")
            yield FinishStepChunk(
                usage=Usage(input_tokens=1, output_tokens=2), finish_reason="stop"
            )
        except BaseException as e:
            self.events.append(f"stopped:{type(e).__name__}")
            raise


async def until_text(h: Harness, run_id: str) -> Any:
    """Open the run's event stream and read it up to the first text delta."""
    events = h.srv.runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=run_id), timeout=30)
    async for response in events:
        if response.event.chunk.WhichOneof("chunk") == "text_delta":
            return events
    raise AssertionError("the run ended before streaming any text")


# ---- CFG-01 --------------------------------------------------------------------------


@pytest.mark.rule("CFG-01")
async def test_configuration_applies_agent_run_steps_then_calls_outside_in(
    database_url: str, hooks_mode: str
) -> None:
    observed: list[tuple[str, list[str], float | None]] = []

    def step_part(name: str, temperature: float) -> Any:
        def prepare_model_step(input: PrepareModelStepInput) -> Continue:
            assert input.input is not None
            request = input.input
            observed.append((name, instructions(request), request.model_settings.temperature))
            return Continue(
                ModelStepPatch(
                    instructions=name, model_settings=ModelSettings(temperature=temperature)
                )
            )

        return lifecycle(name, prepare_model_step=prepare_model_step)

    def call_part(name: str, temperature: float) -> Any:
        async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
            observed.append((name, instructions(request), request.model_settings.temperature))
            patch = ModelCallPatch(
                instructions=name, model_settings=ModelSettings(temperature=temperature)
            )
            result: ModelStepStreamResult = await next(patch)
            return result

        return lifecycle(name, around_model_call=around)

    run_part = lifecycle(
        "run",
        prepare_run=lambda i: Continue(
            RunPatch(instructions="run", model_settings=ModelSettings(temperature=0.2))
        ),
    )
    parts = [
        run_part,
        step_part("step-a", 0.3),
        step_part("step-b", 0.4),
        call_part("call-x", 0.5),
        call_part("call-y", 0.6),
    ]
    model = ScriptedModel(["ok"])
    async with harness(
        database_url,
        parts,
        model=model,
        instructions="agent",
        model_settings=ModelSettings(temperature=0.1, top_k=7),
        mode=hooks_mode,
    ) as h:
        _, done = await h.ask("hi")
        assert done.status == "completed"
    assert observed == [
        ("step-a", ["run"], 0.2),
        ("step-b", ["step-a"], 0.3),
        ("call-x", ["step-b"], 0.4),
        ("call-y", ["call-x"], 0.5),
    ]
    (call,) = model.calls
    assert instructions(call) == ["call-y"]
    assert call.settings == ModelSettings(temperature=0.6, top_k=7)


# ---- CFG-02 --------------------------------------------------------------------------


@pytest.mark.rule("CFG-02")
async def test_settings_merge_by_field_options_by_provider_and_the_rest_replace(
    database_url: str, hooks_mode: str
) -> None:
    seen_by_call: list[list[str]] = []

    def prepare_run(input: PrepareRunInput) -> Continue:
        return Continue(
            RunPatch(
                model_settings=ModelSettings(top_p=0.5),
                provider_options={"google": {"g": 1}},
            )
        )

    def prepare_model_step(input: PrepareModelStepInput) -> Continue:
        return Continue(
            ModelStepPatch(
                model_settings=ModelSettings(temperature=0.9),
                provider_options={"anthropic": {"a": 9}},
                provider_tools={"code": {"v": 2}},
                tool_choice=ToolChoice(mode="none"),
                instructions=[SystemModelMessage(content="x"), SystemModelMessage(content="y")],
            )
        )

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        seen_by_call.append(instructions(request))
        result: ModelStepStreamResult = await next(
            ModelCallPatch(
                instructions=[SystemModelMessage(content="z")],
                model_settings=ModelSettings(seed=4),
            )
        )
        return result

    model = ScriptedModel(["ok"])
    hooks = lifecycle(
        "cfg",
        prepare_run=prepare_run,
        prepare_model_step=prepare_model_step,
        around_model_call=around,
    )
    async with harness(
        database_url,
        hooks,
        model=model,
        instructions="agent",
        model_settings=ModelSettings(max_output_tokens=100, temperature=0.1),
        provider_options={"anthropic": {"a": 1, "b": 2}, "openai": {"x": 1}},
        provider_tools={"web": {"max_uses": 1}, "code": {"v": 1}},
        tool_choice=ToolChoice(mode="required"),
        mode=hooks_mode,
    ) as h:
        _, done = await h.ask("hi")
        assert done.status == "completed"
    (call,) = model.calls
    # modelSettings: field by field across every layer.
    assert call.settings == ModelSettings(max_output_tokens=100, temperature=0.9, top_p=0.5, seed=4)
    # providerOptions: shallow by provider key; the replaced entry is not merged recursively.
    assert call.provider_options == {"anthropic": {"a": 9}, "openai": {"x": 1}, "google": {"g": 1}}
    # providerTools, toolChoice and instructions replace whole values.
    assert call.provider_tools == {"code": {"v": 2}}
    assert call.tool_choice == ToolChoice(mode="none")
    assert seen_by_call == [["x", "y"]]
    assert instructions(call) == ["z"]  # not merged with the step's instruction array


# ---- CFG-03 --------------------------------------------------------------------------


@pytest.mark.rule("CFG-03")
async def test_run_instructions_are_the_default_and_step_and_call_ones_last_one_step(
    database_url: str, hooks_mode: str
) -> None:
    step_saw: list[list[str]] = []

    def prepare_model_step(input: PrepareModelStepInput) -> Continue | None:
        assert input.input is not None
        assert input.step is not None
        step_saw.append(instructions(input.input))
        if input.step.index == 0:
            return Continue(ModelStepPatch(instructions="step zero"))
        return None

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        if request.step_index == 1:
            return await next(ModelCallPatch(instructions="call one"))  # type: ignore[no-any-return]
        return await next()  # type: ignore[no-any-return]

    hooks = lifecycle(
        "instr",
        prepare_run=lambda i: Continue(RunPatch(instructions="episode")),
        prepare_model_step=prepare_model_step,
        around_model_call=around,
    )
    model = by_calls(
        tool_call_step(("c1", "lookup", {"q": "a"})),
        tool_call_step(("c2", "lookup", {"q": "b"})),
        "done",
    )
    async with harness(
        database_url, hooks, model=model, tools=[lookup], instructions="agent", mode=hooks_mode
    ) as h:
        _, done = await h.ask("go")
        assert done.status == "completed"
    assert [instructions(c) for c in model.calls] == [["step zero"], ["call one"], ["episode"]]
    assert step_saw == [["episode"], ["episode"], ["episode"]]


# ---- CFG-04 --------------------------------------------------------------------------


@pytest.mark.rule("CFG-04")
@pytest.mark.parametrize("where", ["prepare_run", "prepare_model_step", "around_model_call"])
async def test_a_patch_with_a_model_starts_a_fresh_route(
    database_url: str, hooks_mode: str, where: str
) -> None:
    agent_model = ScriptedModel(["from the agent model"])
    routed = ScriptedModel(["from the routed model"], model_id="routed")
    route = {
        "model": routed,
        "model_settings": ModelSettings(top_p=0.5),
        "provider_options": {"routed": {"y": 2}},
    }

    def prepare_run(input: PrepareRunInput) -> Continue:
        if where == "prepare_run":
            return Continue(RunPatch(**route))
        # Run-level provider state is inherited too, and must not leak into the new route.
        return Continue(
            RunPatch(
                model_settings=ModelSettings(seed=3),
                provider_options={"run": {"z": 1}},
                provider_tools={"run_tool": {}},
                tool_choice=ToolChoice(mode="none"),
            )
        )

    def prepare_model_step(input: PrepareModelStepInput) -> Continue | None:
        return Continue(ModelStepPatch(**route)) if where == "prepare_model_step" else None

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        if where == "around_model_call":
            return await next(ModelCallPatch(**route))  # type: ignore[no-any-return]
        return await next()  # type: ignore[no-any-return]

    hooks = lifecycle(
        "route",
        prepare_run=prepare_run,
        prepare_model_step=prepare_model_step,
        around_model_call=around,
    )
    async with harness(
        database_url,
        hooks,
        model=agent_model,
        models=[routed],
        tools=[lookup, other],
        instructions="agent",
        model_settings=ModelSettings(temperature=0.1, max_output_tokens=100),
        provider_options={"scripted": {"x": 1}},
        provider_tools={"web": {"max_uses": 1}},
        tool_choice=ToolChoice(mode="required"),
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "completed"
        assert (await h.transcript(thread_id))[-1] == ("assistant", "from the routed model")
    assert agent_model.calls == []
    (call,) = routed.calls
    # Inherited settings, provider options, provider tools and tool choice are cleared;
    # the patch's own values apply on the fresh route.
    assert call.settings == ModelSettings(top_p=0.5)
    assert call.provider_options == {"routed": {"y": 2}}
    assert call.provider_tools is None
    assert call.tool_choice is None
    # Registered tools and instructions stay.
    assert [t.name for t in call.tools] == ["lookup", "other"]
    assert instructions(call) == ["agent"]


@pytest.mark.rule("CFG-04")
async def test_the_same_model_object_still_starts_a_fresh_route_and_tools_can_be_replaced(
    database_url: str, hooks_mode: str
) -> None:
    model = ScriptedModel(["ok"])

    def prepare_model_step(input: PrepareModelStepInput) -> Continue:
        return Continue(ModelStepPatch(model=model, tools=[other.manifest()]))

    async with harness(
        database_url,
        lifecycle("same", prepare_model_step=prepare_model_step),
        model=model,
        tools=[lookup, other],
        model_settings=ModelSettings(temperature=0.1),
        provider_options={"scripted": {"x": 1}},
        provider_tools={"web": {}},
        tool_choice=ToolChoice(mode="required"),
        mode=hooks_mode,
    ) as h:
        _, done = await h.ask("hi")
        assert done.status == "completed"
    (call,) = model.calls
    assert call.settings == ModelSettings()
    assert call.provider_options == {}
    assert call.provider_tools is None
    assert call.tool_choice is None
    assert [t.name for t in call.tools] == ["other"]


# ---- AMC-01 --------------------------------------------------------------------------


@pytest.mark.rule("AMC-01")
async def test_each_wrapper_gets_the_complete_request_after_outer_patches(
    database_url: str, hooks_mode: str
) -> None:
    seen: dict[str, ModelStepRequest] = {}

    def prepare_model_step(input: PrepareModelStepInput) -> Continue:
        return Continue(ModelStepPatch(model_settings=ModelSettings(temperature=0.3)))

    async def outer(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        seen["outer"] = request
        return await next(ModelCallPatch(model_settings=ModelSettings(seed=7)))  # type: ignore[no-any-return]

    async def middle(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        seen["middle"] = request
        return await next()  # type: ignore[no-any-return]

    async def inner(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        seen["inner"] = request
        # A sparse dict patch works too.
        return await next({"provider_options": {"scripted": {"inner": True}}})  # type: ignore[no-any-return]

    parts = [
        lifecycle("step", prepare_model_step=prepare_model_step),
        lifecycle("outer", around_model_call=outer),
        lifecycle("middle", around_model_call=middle),
        lifecycle("inner", around_model_call=inner),
    ]
    model = ScriptedModel(["ok"])
    async with harness(
        database_url,
        parts,
        model=model,
        tools=[lookup],
        instructions="agent",
        runtime_context={"tenant": "t1"},
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("hello there")
        assert done.status == "completed"

    outer_req, middle_req, inner_req = seen["outer"], seen["middle"], seen["inner"]
    # The complete effective request: identity, model, instructions, context, tools, signal.
    assert isinstance(outer_req, ModelStepRequest)
    assert (outer_req.run_id, outer_req.thread_id, outer_req.step_index) == (
        done.run.id,
        thread_id,
        0,
    )
    # (Remote hooks see the model by name: provider:model_id.)
    assert (outer_req.model.provider, outer_req.model.model_id) == (model.provider, model.model_id)
    assert instructions(outer_req) == ["agent"]
    assert outer_req.messages == [user("hello there")]
    assert [t.name for t in outer_req.tools] == ["lookup"]
    assert outer_req.runtime_context == {"tenant": "t1"}
    assert isinstance(outer_req.signal, AbortSignal)
    assert outer_req.model_settings == ModelSettings(temperature=0.3)  # after prepare_model_step
    # The middle wrapper sees the outer's sparse patch applied to everything else.
    assert middle_req.model_settings == ModelSettings(temperature=0.3, seed=7)
    assert middle_req.messages == outer_req.messages
    assert middle_req.run_id == outer_req.run_id
    assert middle_req.signal is outer_req.signal
    # next() keeps the request exactly.
    assert inner_req == middle_req
    (call,) = model.calls
    assert call.settings == ModelSettings(temperature=0.3, seed=7)
    assert call.provider_options == {"scripted": {"inner": True}}


@pytest.mark.rule("AMC-01")
async def test_next_accepts_a_plain_step_patch(database_url: str, hooks_mode: str) -> None:
    # ModelCallPatch is ModelStepPatch & {signal}: a step patch is a valid call patch.
    agent_model = ScriptedModel(["from the agent model"])
    routed = ScriptedModel(["from the routed model"], model_id="routed")

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        patch = ModelStepPatch(model=routed, instructions="STEP", tools=[other.manifest()])
        return await next(patch)  # type: ignore[no-any-return]

    async with harness(
        database_url,
        lifecycle("route", around_model_call=around),
        model=agent_model,
        models=[routed],
        tools=[lookup, other],
        model_settings=ModelSettings(temperature=0.1),
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "completed"
        assert (await h.transcript(thread_id))[-1] == ("assistant", "from the routed model")
    assert agent_model.calls == []
    (call,) = routed.calls
    assert instructions(call) == ["STEP"]
    assert [t.name for t in call.tools] == ["other"]
    assert call.settings == ModelSettings()  # a fresh route, as for a call patch


# ---- AMC-02 --------------------------------------------------------------------------


@pytest.mark.rule("AMC-02")
@pytest.mark.parametrize("field", sorted(RUNTIME_OWNED))
async def test_a_call_patch_naming_runtime_owned_fields_is_rejected(
    database_url: str, hooks_mode: str, field: str
) -> None:
    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        return await next({field: getattr(request, field), "instructions": "x"})  # type: ignore[no-any-return]

    model = ScriptedModel(["never"])
    async with harness(
        database_url, lifecycle("spread", around_model_call=around), model=model, mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("hi")
        assert (done.status, done.outcome, done.run.reason) == (
            "failed",
            "failed",
            "HOOK_INVALID_DECISION",
        )
        assert "runtime-owned" in done.run.error.message
        assert field in done.run.error.message
        assert "spread" in done.run.error.message
        assert await h.transcript(thread_id) == [("user", "hi")]
    assert model.calls == []


@pytest.mark.rule("AMC-02")
async def test_passing_the_request_itself_to_next_is_rejected(
    database_url: str, hooks_mode: str
) -> None:
    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        return await next(request)  # type: ignore[no-any-return]

    model = ScriptedModel(["never"])
    async with harness(
        database_url, lifecycle("spread", around_model_call=around), model=model, mode=hooks_mode
    ) as h:
        _, done = await h.ask("hi")
        assert (done.status, done.run.reason) == ("failed", "HOOK_INVALID_DECISION")
        assert "sparse patch" in done.run.error.message
    assert model.calls == []


# ---- AMC-03 --------------------------------------------------------------------------


@pytest.mark.rule("AMC-03")
async def test_next_resolves_once_the_stream_is_constructed_before_consumption(
    database_url: str, hooks_mode: str
) -> None:
    model = StallingModel()
    at_resolve: list[list[str]] = []

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        result: ModelStepStreamResult = await next()
        at_resolve.append(list(model.events))
        model.release.set()  # if next() consumed the stream it would never get here
        return result

    async with harness(
        database_url, lifecycle("probe", around_model_call=around), model=model, mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "completed"
        assert (await h.transcript(thread_id))[-1] == ("assistant", "partial rest")
    assert at_resolve == [["constructed"]]
    assert model.events == ["constructed", "consumed"]


@pytest.mark.rule("AMC-03")
async def test_setup_failures_are_catchable_around_next_but_stream_errors_are_not(
    database_url: str, hooks_mode: str
) -> None:
    caught: list[str] = []
    fallback = ScriptedModel(["from the fallback"], model_id="fallback")

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        try:
            return await next()  # type: ignore[no-any-return]
        except ModelError as e:
            caught.append(e.reason)
            return await next(ModelCallPatch(model=fallback))  # type: ignore[no-any-return]

    # Setup failure: the provider refuses the request when the stream is constructed.
    refusing = ScriptedModel([ModelError("overloaded", reason="OVERLOADED")])
    async with harness(
        database_url,
        lifecycle("fallback", around_model_call=around),
        model=refusing,
        models=[fallback],
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "completed"
        assert (await h.transcript(thread_id))[-1] == ("assistant", "from the fallback")
    assert caught == ["OVERLOADED"]

    # A failure delivered while the stream is consumed happens after next() resolved.
    class MidStreamFailure(ScriptedModel):
        async def _emit(self, chunks: list[StepStreamChunk]) -> AsyncIterator[StepStreamChunk]:
            yield TextStartChunk(id="t")
            raise ModelError("connection reset", reason="STREAM_RESET")

    caught.clear()
    fallback.calls.clear()
    failing = MidStreamFailure(["unused"])
    async with harness(
        database_url,
        lifecycle("fallback", around_model_call=around),
        model=failing,
        models=[fallback],
        mode=hooks_mode,
    ) as h:
        _, done = await h.ask("hi")
        assert (done.status, done.run.reason) == ("failed", "STREAM_RESET")
    assert caught == []
    assert fallback.calls == []


async def _signal_refused_remotely(database_url: str, around: Any, model: StallingModel) -> None:
    """A remote hook's AbortSignal cannot cross the wire: the run fails, nothing is called."""
    async with harness(
        database_url, lifecycle("attempt", around_model_call=around), model=model, mode="remote"
    ) as h:
        _, done = await h.ask("hi")
        assert (done.status, done.run.reason) == ("failed", "HOOK_INVALID_DECISION")
        assert "use ModelCallPatch.timeout" in done.run.error.message
    assert model.events == []


# ---- AMC-04 --------------------------------------------------------------------------


@pytest.mark.rule("AMC-04")
@pytest.mark.parametrize("form", ["timeout", "signal"])
async def test_an_attempt_timeout_stops_the_provider(
    database_url: str, hooks_mode: str, form: str
) -> None:
    model = StallingModel()  # never finishes by itself

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        if form == "timeout":
            patch = ModelCallPatch(timeout=0.2)
        else:
            patch = ModelCallPatch(signal=AbortSignal.timeout(0.2, "MODEL_CALL_TIMEOUT"))
        return await next(patch)  # type: ignore[no-any-return]

    async with harness(
        database_url, lifecycle("deadline", around_model_call=around), model=model, mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("hi")
        if hooks_mode == "remote" and form == "signal":
            # An AbortSignal cannot cross the wire: refused, never silently dropped.
            assert (done.status, done.run.reason) == ("failed", "HOOK_INVALID_DECISION")
            assert "use ModelCallPatch.timeout" in done.run.error.message
            assert model.events == []  # the provider was never called
            return
        assert (done.status, done.run.reason) == ("failed", "MODEL_CALL_TIMEOUT")
        assert await h.transcript(thread_id) == [("user", "hi")]  # nothing partial committed
    assert model.events[0] == "constructed"
    # The provider stream was stopped (or, on a very slow machine, never started reading).
    assert model.events[-1] != "consumed"
    if "consumed" in model.events:
        assert model.events[-1].startswith("stopped:")


@pytest.mark.rule("AMC-04")
async def test_an_attempt_signal_aborts_the_attempt(database_url: str, hooks_mode: str) -> None:
    model = StallingModel()
    signals: list[AbortSignal] = []

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        signal = AbortSignal()
        signals.append(signal)
        return await next(ModelCallPatch(signal=signal))  # type: ignore[no-any-return]

    if hooks_mode == "remote":
        await _signal_refused_remotely(database_url, around, model)
        return
    async with harness(
        database_url, lifecycle("attempt", around_model_call=around), model=model, mode=hooks_mode
    ) as h:
        thread_id = await h.thread()
        handle = await h.send(thread_id, "hi")
        events = await until_text(h, handle.run_id)
        signals[0].abort("GIVE_UP")
        _ = [r async for r in events]
        done = await h.finish(handle.run_id)
        assert (done.status, done.run.reason) == ("failed", "GIVE_UP")
        assert await h.transcript(thread_id) == [("user", "hi")]
    assert model.events[2].startswith("stopped:")


@pytest.mark.rule("AMC-04")
async def test_cancel_still_reaches_the_provider_through_a_combined_attempt_signal(
    database_url: str, hooks_mode: str
) -> None:
    model = StallingModel()
    runtime_signal: list[str] = []
    attempt = AbortSignal()  # never fires by itself

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        assert request.signal is not None
        request.signal.add_listener(runtime_signal.append)
        return await next(ModelCallPatch(signal=attempt))  # type: ignore[no-any-return]

    if hooks_mode == "remote":
        await _signal_refused_remotely(database_url, around, model)
        return
    async with harness(
        database_url, lifecycle("attempt", around_model_call=around), model=model, mode=hooks_mode
    ) as h:
        thread_id = await h.thread()
        handle = await h.send(thread_id, "hi")
        events = await until_text(h, handle.run_id)
        cancelled = (
            await h.srv.runs.CancelRun(
                run_service_pb2.CancelRunRequest(run_id=handle.run_id, reason="user")
            )
        ).run
        assert cancelled.status == runs_pb2.RUN_STATUS_CANCELLED
        _ = [r async for r in events]
        done = await h.finish(handle.run_id)
        assert (done.status, done.outcome) == ("cancelled", "cancelled")
        assert await h.transcript(thread_id) == [("user", "hi")]
    # The runtime signal fired and the provider stream itself was stopped.
    assert runtime_signal
    assert runtime_signal[0] == "cancelled"
    assert not attempt.aborted
    assert model.events[:2] == ["constructed", "consumed"]
    assert len(model.events) == 3
    assert model.events[2].startswith("stopped:")


# ---- RSN-01 --------------------------------------------------------------------------


@pytest.mark.rule("RSN-01")
async def test_reasoning_before_the_latest_user_message_is_pruned(
    database_url: str, hooks_mode: str
) -> None:
    turn_one = [
        ReasoningStartChunk(id="r"),
        ReasoningDeltaChunk(id="r", text="plan one"),
        ReasoningEndChunk(id="r"),
        ReasoningFileChunk(media_type="image/png", url="data:image/png;base64,AAAA"),
        TextStartChunk(id="t", provider_metadata={"scripted": {"keep": 1}}),
        TextDeltaChunk(id="t", text="answer one"),
        TextEndChunk(id="t"),
        FinishStepChunk(usage=Usage(input_tokens=1, output_tokens=1), finish_reason="stop"),
    ]
    # Turn two answers with reasoning only: pruned, it leaves an empty message.
    turn_two = reasoning("plan two", [text_step("x")[-1]])
    turn_three = reasoning("plan three", text_step("answer three"))
    model = by_calls(turn_one, turn_two, turn_three)
    seen_by_hook: list[list[ModelMessage]] = []

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        seen_by_hook.append(list(request.messages))
        return await next()  # type: ignore[no-any-return]

    async with harness(
        database_url, lifecycle("probe", around_model_call=around), model=model, mode=hooks_mode
    ) as h:
        thread_id, _ = await h.ask("one")
        _, _ = await h.ask("two", thread_id)
        _, done = await h.ask("three", thread_id)
        assert done.status == "completed"

    call = model.calls[2]
    assert [m.role for m in call.messages] == ["user", "assistant", "user", "user"]
    assistant = call.messages[1]
    assert isinstance(assistant, AssistantModelMessage)
    # Reasoning and the reasoning file are gone; other content keeps its provider metadata.
    assert assistant.content == [
        ModelTextPart(text="answer one", provider_options={"scripted": {"keep": 1}})
    ]
    # The hook saw all of it (the reasoning-only message included).
    hook_view = seen_by_hook[2]
    assert reasoning_texts(hook_view) == ["plan one", "plan two"]
    assert any(
        isinstance(p, ModelFilePart)
        for m in hook_view
        if isinstance(m, AssistantModelMessage)
        for p in m.content
    )
    assert len(hook_view) == 5


@pytest.mark.rule("RSN-01")
async def test_pruning_applies_to_the_request_after_all_lifecycle_patches(
    database_url: str, hooks_mode: str
) -> None:
    late = AssistantModelMessage(
        content=[ModelReasoningPart(text="late thought"), ModelTextPart(text="late answer")]
    )

    def prepare_model_step(input: PrepareModelStepInput) -> Continue:
        return Continue(ModelStepPatch(append_model_messages=[late]))

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        return await next(ModelCallPatch(append_model_messages=[user("follow-up")]))  # type: ignore[no-any-return]

    model = ScriptedModel(["ok"])
    hooks = lifecycle("patch", prepare_model_step=prepare_model_step, around_model_call=around)
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        _, done = await h.ask("hi")
        assert done.status == "completed"
    (call,) = model.calls
    # The last user message is the one the inner patch added, so "late" is history now.
    assert call.messages == [
        user("hi"),
        AssistantModelMessage(content=[ModelTextPart(text="late answer")]),
        user("follow-up"),
    ]


# ---- RSN-02 --------------------------------------------------------------------------


@pytest.mark.rule("RSN-02")
async def test_the_current_turn_keeps_its_reasoning_across_tools_and_resumption(
    database_url: str, hooks_mode: str
) -> None:
    model = by_calls(
        reasoning("old turn", text_step("old answer")),
        reasoning("plan lookup", tool_call_step(("c1", "lookup", {"q": "a"}))),
        reasoning("plan approval", tool_call_step(("c2", "guarded", {"q": "b"}))),
        reasoning("final thought", text_step("done")),
    )
    async with harness(
        database_url, lifecycle("none"), model=model, tools=[lookup, guarded], mode=hooks_mode
    ) as h:
        thread_id, first = await h.ask("earlier")
        assert first.status == "completed"
        handle = await h.send(thread_id, "now")
        action = None
        async for response in h.srv.runs.StreamRun(
            run_service_pb2.StreamRunRequest(run_id=handle.run_id), timeout=30
        ):
            event = response.event
            if event.WhichOneof("event") == "pending_action":
                action = event.pending_action
            if (
                event.WhichOneof("event") == "status"
                and event.status.status == runs_pb2.RUN_STATUS_WAITING
            ):
                break
        assert action is not None
        await h.srv.runs.ResolvePendingAction(
            run_service_pb2.ResolvePendingActionRequest(
                run_id=handle.run_id,
                action_id=action.id,
                approval=run_service_pb2.ApprovalDecision(approved=True),
            )
        )
        run = await wait_run(h.srv, handle.run_id)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    assert len(model.calls) == 4
    # A tool step within the turn keeps the turn's reasoning ...
    assert reasoning_texts(model.calls[2].messages) == ["plan lookup"]
    # ... and so does the step after suspension and resumption (a new episode);
    # the earlier turn's reasoning stays pruned.
    assert reasoning_texts(model.calls[3].messages) == ["plan lookup", "plan approval"]


# ---- RSN-03 --------------------------------------------------------------------------


@pytest.mark.rule("RSN-03")
async def test_without_a_user_message_reasoning_is_kept(database_url: str, hooks_mode: str) -> None:
    model = by_calls(
        reasoning("first trigger thought", text_step("report one")),
        reasoning("second trigger thought", text_step("report two")),
    )
    async with harness(database_url, lifecycle("none"), model=model, mode=hooks_mode) as h:
        thread_id = await h.thread()
        for job in ("a", "b"):
            value = struct_pb2.Value()
            value.struct_value.update({"job": job})
            handle = (
                await h.srv.threads.Trigger(tpb.TriggerRequest(thread_id=thread_id, input=value))
            ).run
            done = await h.finish(handle.run_id)
            assert done.status == "completed"
    second = model.calls[1]
    assert not any(isinstance(m, UserModelMessage) for m in second.messages)
    assert reasoning_texts(second.messages) == ["first trigger thought"]


@pytest.mark.rule("RSN-03")
async def test_a_request_patched_to_have_no_user_message_keeps_reasoning(
    database_url: str, hooks_mode: str
) -> None:
    history = [
        AssistantModelMessage(
            content=[ModelReasoningPart(text="kept thought"), ModelTextPart(text="kept")]
        )
    ]
    model = ScriptedModel(["ok"])
    hooks = lifecycle(
        "replace", prepare_model_step=lambda i: Continue(ModelStepPatch(messages=history))
    )
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        _, done = await h.ask("hi")
        assert done.status == "completed"
    assert model.calls[0].messages == history


# ---- RSN-04 --------------------------------------------------------------------------


@pytest.mark.rule("RSN-04")
async def test_hooks_history_storage_and_usage_keep_the_unpruned_reasoning(
    database_url: str, hooks_mode: str
) -> None:
    model = by_calls(
        reasoning(
            "turn one thought",
            text_step("answer one", usage=Usage(input_tokens=5, output_tokens=7)),
        ),
        reasoning(
            "turn two thought",
            text_step("answer two", usage=Usage(input_tokens=11, output_tokens=13)),
        ),
    )
    seen: dict[str, list[str]] = {}

    async def prepare_model_step(input: PrepareModelStepInput) -> None:
        assert input.input is not None
        assert input.step is not None
        seen[f"step input {input.run.run_id}"] = reasoning_texts(input.input.messages)
        current = await input.thread.context.current()
        seen[f"context {input.run.run_id}"] = reasoning_texts(current.model_messages)

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        seen[f"call {request.run_id}"] = reasoning_texts(request.messages)
        return await next()  # type: ignore[no-any-return]

    hooks = lifecycle("probe", prepare_model_step=prepare_model_step, around_model_call=around)
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, first = await h.ask("one")
        first_usage = first.run.usage
        _, second = await h.ask("two", thread_id)
        assert second.status == "completed"
        run_one = (await h.srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=first.run.id))).run
        stored = await h.messages(thread_id)
        listed = await h.srv.threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_id))

    second_id = second.run.id
    # Hooks and history queries see the previous turn's reasoning; the provider did not.
    assert seen[f"step input {second_id}"] == ["turn one thought"]
    assert seen[f"call {second_id}"] == ["turn one thought"]
    assert seen[f"context {second_id}"] == ["turn one thought"]
    assert reasoning_texts(model.calls[1].messages) == []
    # Stored messages and the client-visible transcript keep every reasoning part.
    assert [p.text for m in stored for p in m.message.parts if p.type == "reasoning"] == [
        "turn one thought",
        "turn two thought",
    ]
    assert [
        p.reasoning.text
        for m in listed.messages
        for p in m.parts
        if p.WhichOneof("part") == "reasoning"
    ] == ["turn one thought", "turn two thought"]
    # Usage totals are the provider's, unchanged by pruning.
    assert (run_one.usage.input_tokens, run_one.usage.output_tokens) == (5, 7)
    assert run_one.usage == first_usage
    assert (second.run.usage.input_tokens, second.run.usage.output_tokens) == (11, 13)
