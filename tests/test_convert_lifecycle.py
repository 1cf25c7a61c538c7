"""Round trips, sparse presence and bad input of the model and lifecycle converters."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar, get_args

import pytest
from google.protobuf import struct_pb2
from google.protobuf.message import Message as ProtoMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from pai.v1 import chunks_pb2, lifecycle_pb2, model_pb2, runs_pb2, threads_pb2, tools_pb2
from pai.v1 import lifecycle_plugin_service_pb2 as plugin_pb2
from pai_grpc import convert
from pai_grpc.domain import (
    AssistantModelMessage,
    ErrorJsonOutput,
    ErrorTextOutput,
    ExecutionDeniedOutput,
    JsonOutput,
    ModelFilePart,
    ModelMessage,
    ModelReasoningPart,
    ModelSettings,
    ModelTextPart,
    ModelToolCallPart,
    ModelToolResultPart,
    SystemModelMessage,
    TextOutput,
    TextPart,
    ToolCallChunk,
    ToolChoice,
    ToolManifestEntry,
    ToolModelMessage,
    ToolResultOutput,
    UserModelMessage,
    Visibility,
)
from pai_grpc.domain._model import ToolSourceName
from pai_grpc.lifecycle import (
    AbortSignal,
    AssistantResponse,
    Block,
    Complete,
    Continue,
    Fail,
    HistoryRewritePatch,
    ModelCallPatch,
    ModelStepPatch,
    ModelStepRequest,
    NextStep,
    RegenerateRewrite,
    Reject,
    ReplaceInput,
    ReplaceMessage,
    ReplaceOutput,
    Respond,
    RunPatch,
    Skip,
    StepAbort,
    StepInfo,
    StepSummary,
    ToolInfo,
    ToolResult,
    VisibilityChange,
    VisibilityRewrite,
)
from pai_grpc.lifecycle.internal import PHASES, UNSET, apply_patch
from pai_grpc.tools import InitialEntry, ResumeEntry
from tests.test_convert_roundtrip import (
    CHUNK_ARMS,
    INT32,
    INT64,
    finish_reasons,
    json_objects,
    json_values,
    lifecycle_messages,
    message_parts,
    opt,
    text,
    usages,
)

T = TypeVar("T")
PB = TypeVar("PB", bound=ProtoMessage)

ROUNDTRIP = settings(max_examples=40, deadline=None)

# ------------------------------------------------------------------- models


@dataclass(frozen=True)
class FakeModel:
    """A LanguageModel stand-in that compares by value."""

    provider: str
    model_id: str

    async def stream(self, call: Any) -> Any:  # pragma: no cover - never called
        raise NotImplementedError


def resolve(spec: str) -> FakeModel:
    provider, _, model_id = spec.partition(":")
    if provider == "nope":
        raise ValueError(f"unknown model provider {provider!r}")
    return FakeModel(provider, model_id)


# ------------------------------------------------------------------ strategies

options = opt(json_objects)
nonempty_text = st.text(min_size=1, max_size=12)
models = st.builds(
    FakeModel,
    provider=st.text(st.characters(categories=["Ll"]), min_size=1, max_size=8).filter(
        lambda p: p != "nope"
    ),
    model_id=text,
)

text_parts = st.builds(ModelTextPart, text=text, provider_options=options)
file_parts = st.builds(
    ModelFilePart, media_type=text, data=text, filename=opt(text), provider_options=options
)
reasoning_parts = st.builds(ModelReasoningPart, text=text, provider_options=options)
tool_call_parts = st.builds(
    ModelToolCallPart,
    tool_call_id=text,
    tool_name=text,
    input=json_values,
    provider_executed=st.booleans(),
    provider_options=options,
)
OUTPUT_ARMS: dict[str, st.SearchStrategy[Any]] = {
    "text": st.builds(TextOutput, value=text),
    "json": st.builds(JsonOutput, value=json_values),
    "error_text": st.builds(ErrorTextOutput, value=text),
    "error_json": st.builds(ErrorJsonOutput, value=json_values),
    "execution_denied": st.builds(ExecutionDeniedOutput, reason=opt(text)),
}
tool_outputs: st.SearchStrategy[ToolResultOutput] = st.one_of(*OUTPUT_ARMS.values())
tool_result_parts = st.builds(
    ModelToolResultPart,
    tool_call_id=text,
    tool_name=text,
    output=tool_outputs,
    provider_options=options,
)
system_messages = st.builds(SystemModelMessage, content=text, provider_options=options)
MESSAGE_ARMS: dict[str, st.SearchStrategy[Any]] = {
    "system": system_messages,
    "user": st.builds(
        UserModelMessage,
        content=st.lists(text_parts | file_parts, max_size=3),
        provider_options=options,
    ),
    "assistant": st.builds(
        AssistantModelMessage,
        content=st.lists(
            st.one_of(text_parts, file_parts, reasoning_parts, tool_call_parts, tool_result_parts),
            max_size=3,
        ),
        provider_options=options,
    ),
    "tool": st.builds(
        ToolModelMessage, content=st.lists(tool_result_parts, max_size=3), provider_options=options
    ),
}
model_messages: st.SearchStrategy[ModelMessage] = st.one_of(*MESSAGE_ARMS.values())
message_lists = st.lists(model_messages, max_size=3)

doubles = st.floats(allow_nan=False)
model_settings = st.builds(
    ModelSettings,
    max_output_tokens=opt(INT32),
    temperature=opt(doubles),
    top_p=opt(doubles),
    top_k=opt(INT32),
    # [] is sent like None (no presence on a repeated field); see the explicit test.
    stop_sequences=opt(st.lists(text, min_size=1, max_size=3)),
    seed=opt(INT64),
    presence_penalty=opt(doubles),
    frequency_penalty=opt(doubles),
    max_retries=opt(INT32),
)
tool_sources = st.sampled_from(list(get_args(ToolSourceName)))
manifest_entries = st.builds(
    ToolManifestEntry,
    name=text,
    description=text,
    input_schema=json_objects,
    source=tool_sources,
)
tool_choices = st.builds(
    ToolChoice,
    mode=st.sampled_from(["auto", "none", "required", "tool"]),
    tool_name=opt(nonempty_text),
)
requests = st.builds(
    ModelStepRequest,
    run_id=text,
    thread_id=text,
    step_index=INT32,
    model=models,
    instructions=st.lists(system_messages, max_size=2),
    messages=message_lists,
    tools=st.lists(manifest_entries, max_size=2),
    provider_tools=options,
    tool_choice=opt(tool_choices),
    model_settings=model_settings,
    provider_options=json_objects,
)


def sparse(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[Any]:
    return st.just(UNSET) | strategy


# provider_tools={} reads back as None (the runtime treats them alike): see the explicit test.
_PATCH_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": sparse(models),
    "instructions": sparse(st.lists(system_messages, max_size=2)),
    "append_model_messages": sparse(message_lists),
    "tools": sparse(st.lists(manifest_entries, max_size=2)),
    "provider_tools": sparse(st.none() | json_objects.filter(bool)),
    "tool_choice": sparse(opt(tool_choices)),
    "model_settings": sparse(model_settings),
    "provider_options": sparse(json_objects),
}
step_patches = st.builds(ModelStepPatch, messages=sparse(message_lists), **_PATCH_FIELDS)
timeouts = st.integers(1, 2**40).map(lambda ms: ms / 1000)
call_patches = st.builds(
    ModelCallPatch, messages=sparse(message_lists), timeout=sparse(timeouts), **_PATCH_FIELDS
)
run_patches = st.builds(RunPatch, max_steps=sparse(INT32), **_PATCH_FIELDS)
responses = st.builds(
    AssistantResponse, parts=st.lists(message_parts, max_size=3), metadata=json_objects
)

visibilities = st.builds(Visibility, transcript=st.booleans(), context=st.booleans())
versions = st.integers(0, 2**63 - 1)
after_versions = opt(st.integers(1, 2**63 - 1))  # 0 is "not yet rewritten" (None)
REWRITE_ARMS: dict[str, st.SearchStrategy[Any]] = {
    "regenerate": st.builds(
        RegenerateRewrite,
        target_message_id=text,
        retained_message_ids=st.lists(text, max_size=3).map(tuple),
        removed_message_ids=st.lists(text, max_size=3).map(tuple),
        before_version=versions,
        after_version=after_versions,
    ),
    "visibility": st.builds(
        VisibilityRewrite,
        changes=st.lists(
            st.builds(VisibilityChange, message_id=text, before=visibilities, after=visibilities),
            max_size=3,
        ).map(tuple),
        before_version=versions,
        after_version=after_versions,
    ),
}
rewrites = st.one_of(*REWRITE_ARMS.values())
step_aborts = st.builds(
    StepAbort,
    reason=text,
    outcome=st.sampled_from(["blocked", "failed"]),
    message=opt(text),
    replacement=opt(responses),
)
tool_infos = st.builds(ToolInfo, name=text, source=tool_sources, description=text)
RESULT_STATUSES = ["output-available", "output-error"]
RESULT_SOURCES = [
    "execute",
    "skip",
    "resume",
    "client",
    "manual",
    "reject",
    "throw",
    "fail",
    "cancel",
    "recovery",
]
tool_results = st.builds(
    ToolResult,
    status=st.sampled_from(RESULT_STATUSES),
    output=json_values,
    error=json_values,
    message=opt(text),
    reason=opt(text),
    source=st.sampled_from(RESULT_SOURCES),
)
ENTRY_ARMS: dict[str, st.SearchStrategy[Any]] = {
    "initial": st.builds(InitialEntry),
    "resume": st.builds(ResumeEntry, name=text, resume=json_values, action_id=text),
}
tool_entries = st.one_of(*ENTRY_ARMS.values())
step_summaries = st.builds(
    StepSummary,
    step_id=text,
    index=INT32,
    message=lifecycle_messages,
    finish_reason=opt(finish_reasons),
    provider_metadata=options,
    usage=opt(usages),
    tool_calls=st.lists(CHUNK_ARMS["tool_call"][1], max_size=2),
)

# ------------------------------------------------------------------- helpers


def _reparse(pb: PB) -> PB:
    data = pb.SerializeToString(deterministic=True)
    again = type(pb)()
    again.ParseFromString(data)
    assert again == pb
    return again


def _assert_roundtrip(value: T, to_proto: Callable[[T], PB], from_proto: Callable[[PB], T]) -> PB:
    pb = to_proto(value)
    assert from_proto(pb) == value
    assert from_proto(_reparse(pb)) == value
    return pb


def _with_resolve(from_proto: Callable[[Any, Any], T]) -> Callable[[Any], T]:
    return lambda pb: from_proto(pb, resolve)


def _oneof(message: type[ProtoMessage], name: str) -> list[str]:
    return [f.name for f in message.DESCRIPTOR.oneofs_by_name[name].fields]


# -------------------------------------------------------------- model side


@ROUNDTRIP
@given(model_messages)
def test_model_message_roundtrip(message: ModelMessage) -> None:
    _assert_roundtrip(message, convert.model_message_to_proto, convert.model_message_from_proto)


@ROUNDTRIP
@given(message_lists)
def test_model_messages_roundtrip(messages: list[ModelMessage]) -> None:
    pbs = convert.model_messages_to_proto(messages)
    assert convert.model_messages_from_proto(pbs) == messages


@pytest.mark.parametrize("arm", list(MESSAGE_ARMS))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_model_message_arm_converts(arm: str, data: st.DataObject) -> None:
    message = data.draw(MESSAGE_ARMS[arm])
    pb = _assert_roundtrip(
        message, convert.model_message_to_proto, convert.model_message_from_proto
    )
    assert pb.WhichOneof("message") == arm


@pytest.mark.parametrize("arm", list(OUTPUT_ARMS))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_tool_result_output_arm_converts(arm: str, data: st.DataObject) -> None:
    output = data.draw(OUTPUT_ARMS[arm])
    pb = _assert_roundtrip(
        output, convert.tool_result_output_to_proto, convert.tool_result_output_from_proto
    )
    assert pb.WhichOneof("output") == arm


def test_every_content_arm_is_covered() -> None:
    assert sorted(MESSAGE_ARMS) == sorted(_oneof(model_pb2.ModelMessage, "message"))
    assert sorted(OUTPUT_ARMS) == sorted(_oneof(model_pb2.ToolResultOutput, "output"))
    assistant = AssistantModelMessage(
        content=[
            ModelTextPart(text="t"),
            ModelFilePart(media_type="image/png", data="data:,", filename="f.png"),
            ModelReasoningPart(text="r", provider_options={"anthropic": {"signature": "s"}}),
            ModelToolCallPart(tool_call_id="c", tool_name="t", input={"a": 1}),
            ModelToolResultPart(tool_call_id="c", tool_name="t", output=TextOutput(value="ok")),
        ]
    )
    pb = _assert_roundtrip(
        assistant, convert.model_message_to_proto, convert.model_message_from_proto
    )
    arms = [part.WhichOneof("part") for part in pb.assistant.content]
    assert arms == _oneof(model_pb2.AssistantContentPart, "part")
    user = UserModelMessage(
        content=[ModelTextPart(text="t"), ModelFilePart(media_type="a", data="")]
    )
    pb = _assert_roundtrip(user, convert.model_message_to_proto, convert.model_message_from_proto)
    assert [p.WhichOneof("part") for p in pb.user.content] == _oneof(
        model_pb2.UserContentPart, "part"
    )


def test_json_null_outputs_keep_their_arm() -> None:
    for output in (JsonOutput(value=None), ErrorJsonOutput(value=None), TextOutput(value="")):
        pb = _reparse(convert.tool_result_output_to_proto(output))
        assert pb.WhichOneof("output") is not None
        assert convert.tool_result_output_from_proto(pb) == output


@ROUNDTRIP
@given(model_settings)
def test_model_settings_roundtrip(value: ModelSettings) -> None:
    _assert_roundtrip(value, convert.model_settings_to_proto, convert.model_settings_from_proto)


def test_empty_stop_sequences_read_back_as_none() -> None:
    pb = convert.model_settings_to_proto(ModelSettings(stop_sequences=[]))
    assert convert.model_settings_from_proto(pb) == ModelSettings()


@ROUNDTRIP
@given(manifest_entries)
def test_tool_manifest_entry_roundtrip(entry: ToolManifestEntry) -> None:
    _assert_roundtrip(
        entry, convert.tool_manifest_entry_to_proto, convert.tool_manifest_entry_from_proto
    )


def test_unset_input_schema_reads_as_the_domain_default() -> None:
    pb = model_pb2.ToolManifestEntry(name="t", source=model_pb2.TOOL_SOURCE_CLIENT)
    assert convert.tool_manifest_entry_from_proto(pb) == ToolManifestEntry(
        name="t", source="client"
    )
    empty = ToolManifestEntry(name="t", input_schema={})
    assert (
        convert.tool_manifest_entry_from_proto(
            _reparse(convert.tool_manifest_entry_to_proto(empty))
        )
        == empty
    )


@ROUNDTRIP
@given(opt(tool_choices))
def test_tool_choice_roundtrip(choice: ToolChoice | None) -> None:
    _assert_roundtrip(choice, convert.tool_choice_to_proto, convert.tool_choice_from_proto)


def test_tool_choice_none_is_unspecified_and_empty_tool_name_is_none() -> None:
    assert convert.tool_choice_to_proto(None).mode == model_pb2.TOOL_CHOICE_MODE_UNSPECIFIED
    pb = convert.tool_choice_to_proto(ToolChoice(mode="tool", tool_name=""))
    assert convert.tool_choice_from_proto(pb) == ToolChoice(mode="tool")


@ROUNDTRIP
@given(requests)
def test_model_step_request_roundtrip(request: ModelStepRequest) -> None:
    pb = _assert_roundtrip(
        request,
        convert.model_step_request_to_proto,
        _with_resolve(convert.model_step_request_from_proto),
    )
    assert pb.model == f"{request.model.provider}:{request.model.model_id}"


def test_model_step_request_drops_runtime_only_fields() -> None:
    request = ModelStepRequest(
        run_id="r",
        thread_id="t",
        step_index=2,
        model=FakeModel("offline", "x:y"),
        instructions=[],
        messages=[],
        tools=[],
        runtime_context={"user": 1},
        signal=AbortSignal(),
        attempt_signals=(AbortSignal(),),
        timeout=3.0,
    )
    pb = convert.model_step_request_to_proto(request)
    assert pb.model == "offline:x:y"
    assert not pb.HasField("provider_tools")
    assert not pb.HasField("tool_choice")
    back = convert.model_step_request_from_proto(_reparse(pb), resolve)
    assert back.model == FakeModel("offline", "x:y")
    assert (back.runtime_context, back.signal, back.attempt_signals, back.timeout) == (
        None,
        None,
        (),
        None,
    )
    # provider_tools {} is not None in a request (not sparse): it round-trips.
    with_empty = ModelStepRequest(**{**_request_fields(back), "provider_tools": {}})
    assert (
        convert.model_step_request_from_proto(
            convert.model_step_request_to_proto(with_empty), resolve
        ).provider_tools
        == {}
    )


def _request_fields(request: ModelStepRequest) -> dict[str, Any]:
    return {f.name: getattr(request, f.name) for f in fields(request)}


def test_unset_request_defaults() -> None:
    back = convert.model_step_request_from_proto(model_pb2.ModelStepRequest(model="a:b"), resolve)
    assert back.instructions == []
    assert back.model_settings == ModelSettings()
    assert back.provider_options == {}
    assert back.provider_tools is None
    assert back.tool_choice is None


@ROUNDTRIP
@given(step_patches)
def test_model_step_patch_roundtrip(patch: ModelStepPatch) -> None:
    _assert_roundtrip(
        patch, convert.model_step_patch_to_proto, _with_resolve(convert.model_step_patch_from_proto)
    )


@ROUNDTRIP
@given(call_patches)
def test_model_call_patch_roundtrip(patch: ModelCallPatch) -> None:
    pb = _assert_roundtrip(
        patch, convert.model_call_patch_to_proto, _with_resolve(convert.model_call_patch_from_proto)
    )
    assert pb.timeout_ms == (0 if patch.timeout is UNSET else round(patch.timeout * 1000))


@ROUNDTRIP
@given(run_patches)
def test_run_patch_roundtrip(patch: RunPatch) -> None:
    _assert_roundtrip(
        patch, convert.run_patch_to_proto, _with_resolve(convert.run_patch_from_proto)
    )


@ROUNDTRIP
@given(responses)
def test_assistant_response_roundtrip(response: AssistantResponse) -> None:
    _assert_roundtrip(
        response, convert.assistant_response_to_proto, convert.assistant_response_from_proto
    )


# ------------------------------------------------------------ sparse presence

PATCH_KINDS = [
    (ModelStepPatch, convert.model_step_patch_to_proto, convert.model_step_patch_from_proto),
    (RunPatch, convert.run_patch_to_proto, convert.run_patch_from_proto),
]


@pytest.mark.parametrize(("kind", "to_proto", "from_proto"), PATCH_KINDS, ids=["step", "run"])
def test_empty_patch_is_an_empty_message(
    kind: type[Any], to_proto: Callable[[Any], ProtoMessage], from_proto: Callable[..., Any]
) -> None:
    pb = to_proto(kind())
    assert pb.ListFields() == []
    assert pb.SerializeToString() == b""
    assert from_proto(pb, resolve) == kind()


@pytest.mark.parametrize(("kind", "to_proto", "from_proto"), PATCH_KINDS, ids=["step", "run"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("instructions", []),
        ("append_model_messages", []),
        ("tools", []),
        ("provider_tools", None),
        ("tool_choice", None),
        ("model_settings", ModelSettings()),
        ("provider_options", {}),
    ],
)
def test_explicit_empty_values_survive(
    kind: type[Any],
    to_proto: Callable[[Any], ProtoMessage],
    from_proto: Callable[..., Any],
    field: str,
    value: Any,
) -> None:
    patch = kind(**{field: value})
    pb = _reparse(to_proto(patch))
    assert [f.name for f, _ in pb.ListFields()] == [field]
    assert from_proto(pb, resolve) == patch


def test_step_patch_presence_of_messages_and_model() -> None:
    patch = ModelStepPatch(messages=[])
    pb = _reparse(convert.model_step_patch_to_proto(patch))
    assert pb.HasField("messages")
    assert not pb.HasField("append_model_messages")
    assert convert.model_step_patch_from_proto(pb, resolve) == patch
    with_model = ModelStepPatch(model=FakeModel("anthropic", "claude"))
    pb = convert.model_step_patch_to_proto(with_model)
    assert pb.HasField("model")
    assert pb.model == "anthropic:claude"
    assert convert.model_step_patch_from_proto(pb, resolve) == with_model


def test_run_patch_max_steps_presence() -> None:
    assert not convert.run_patch_to_proto(RunPatch()).HasField("max_steps")
    pb = convert.run_patch_to_proto(RunPatch(max_steps=0))
    assert pb.HasField("max_steps")
    assert convert.run_patch_from_proto(pb, resolve) == RunPatch(max_steps=0)


def test_string_instructions_become_system_messages() -> None:
    pb = convert.model_step_patch_to_proto(ModelStepPatch(instructions="Be brief."))
    back = convert.model_step_patch_from_proto(pb, resolve)
    assert back.instructions == [SystemModelMessage(content="Be brief.")]
    empty = convert.run_patch_from_proto(
        convert.run_patch_to_proto(RunPatch(instructions="")), resolve
    )
    assert empty.instructions == []


def test_empty_provider_tools_read_back_as_none() -> None:
    pb = convert.model_step_patch_to_proto(ModelStepPatch(provider_tools={}))
    assert pb.HasField("provider_tools")
    assert convert.model_step_patch_from_proto(pb, resolve) == ModelStepPatch(provider_tools=None)


def test_model_call_patch_timeout() -> None:
    pb = convert.model_call_patch_to_proto(ModelCallPatch(timeout=2.5))
    assert pb.timeout_ms == 2500
    assert not pb.patch.ListFields()
    tiny = convert.model_call_patch_to_proto(ModelCallPatch(timeout=1e-6))
    assert tiny.timeout_ms == 1  # a positive timeout never becomes "none"
    for none in (UNSET, None):
        pb = convert.model_call_patch_to_proto(ModelCallPatch(timeout=none, signal=None))
        assert pb.timeout_ms == 0
        assert convert.model_call_patch_from_proto(pb, resolve) == ModelCallPatch()
    # A plain step patch is a model-call patch without a timeout.
    step = ModelStepPatch(tools=[])
    back = convert.model_call_patch_from_proto(convert.model_call_patch_to_proto(step), resolve)
    assert back == ModelCallPatch(tools=[])
    assert (
        convert.model_call_patch_from_proto(model_pb2.ModelCallPatch(), resolve) == ModelCallPatch()
    )


# -------------------------------------------------------------- fold_patches


def _base_request() -> ModelStepRequest:
    return ModelStepRequest(
        run_id="r",
        thread_id="t",
        step_index=0,
        model=FakeModel("base", "m"),
        instructions=[SystemModelMessage(content="base")],
        messages=[UserModelMessage(content=[ModelTextPart(text="hi")])],
        tools=[ToolManifestEntry(name="base")],
        provider_tools={"search": {"type": "web"}},
        tool_choice=ToolChoice(mode="required"),
        model_settings=ModelSettings(temperature=0.5, max_output_tokens=10),
        provider_options={"base": {"x": 1}, "shared": {"y": 1}},
    )


@settings(max_examples=80, deadline=None)
@given(st.lists(step_patches, max_size=4))
def test_fold_equals_applying_patches_in_order(patches: list[ModelStepPatch]) -> None:
    sequential = _base_request()
    for patch in patches:
        sequential = apply_patch(sequential, patch)
    folded = convert.fold_patches(patches, ModelStepPatch)
    if not patches:
        assert folded is None
        return
    assert folded is not None
    assert apply_patch(_base_request(), folded) == sequential
    # And the folded patch survives the wire.
    pb = convert.model_step_patch_to_proto(folded)
    assert apply_patch(_base_request(), convert.model_step_patch_from_proto(pb, resolve)) == (
        sequential
    )


def test_fold_rules() -> None:
    a = FakeModel("a", "1")
    folded = convert.fold_patches(
        [
            RunPatch(
                model_settings=ModelSettings(temperature=1.0, top_k=3),
                provider_options={"p": {"a": 1}, "q": {"b": 2}},
                append_model_messages=[SystemModelMessage(content="one")],
                max_steps=3,
            ),
            None,
            {"model_settings": ModelSettings(top_k=5), "provider_options": {"p": {"c": 3}}},
            RunPatch(append_model_messages=[SystemModelMessage(content="two")], max_steps=7),
        ],
        RunPatch,
    )
    assert folded == RunPatch(
        model_settings=ModelSettings(temperature=1.0, top_k=5),
        provider_options={"p": {"c": 3}, "q": {"b": 2}},
        append_model_messages=[
            SystemModelMessage(content="one"),
            SystemModelMessage(content="two"),
        ],
        max_steps=7,
    )
    # A later model starts a fresh route; messages replace earlier appends.
    fresh = convert.fold_patches(
        [
            ModelStepPatch(
                model_settings=ModelSettings(seed=1),
                provider_options={"p": {}},
                provider_tools={"t": {}},
                tool_choice=ToolChoice(),
                tools=[],
                append_model_messages=[SystemModelMessage(content="gone")],
            ),
            ModelStepPatch(model=a, messages=[]),
        ],
        ModelStepPatch,
    )
    assert fresh == ModelStepPatch(model=a, tools=[], messages=[])
    assert convert.fold_patches(None, RunPatch) is None
    assert convert.fold_patches([None], RunPatch) is None
    single = RunPatch(max_steps=2)
    assert convert.fold_patches(single, RunPatch) == single


def test_fold_combines_attempt_signals_as_applying_does() -> None:
    # apply_patch never replaces an attempt signal; neither does the fold.
    first, second = AbortSignal(), AbortSignal()
    folded = convert.fold_patches(
        [ModelCallPatch(signal=first), ModelCallPatch(signal=None), ModelCallPatch(signal=second)],
        ModelCallPatch,
    )
    assert folded is not None
    assert isinstance(folded.signal, AbortSignal)
    assert not folded.signal.aborted
    first.abort("outer")
    assert folded.signal.aborted
    assert folded.signal.reason == "outer"
    applied = apply_patch(_base_request(), folded)
    assert applied.attempt_signals == (folded.signal,)
    lone = convert.fold_patches([ModelCallPatch(signal=second), ModelCallPatch()], ModelCallPatch)
    assert lone is not None
    assert lone.signal is second


def test_fold_rejects_foreign_patches() -> None:
    with pytest.raises(ValueError, match=r"patch\[1\]: .*expected RunPatch"):
        convert.fold_patches([RunPatch(), ModelStepPatch()], RunPatch)
    with pytest.raises(ValueError, match=r"patch: .*unknown patch fields \['bogus'\]"):
        convert.fold_patches({"bogus": 1}, RunPatch)
    with pytest.raises(ValueError, match=r"patch: .*runtime-owned"):
        convert.fold_patches({"run_id": "x"}, ModelStepPatch)
    with pytest.raises(ValueError, match=r"cannot carry \['timeout'\]"):
        convert.fold_patches([ModelCallPatch(timeout=1.0)], ModelStepPatch)


# ----------------------------------------------------------------- lifecycle


@pytest.mark.parametrize("arm", list(REWRITE_ARMS))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_history_rewrite_roundtrip(arm: str, data: st.DataObject) -> None:
    rewrite = data.draw(REWRITE_ARMS[arm])
    pb = _assert_roundtrip(
        rewrite, convert.history_rewrite_to_proto, convert.history_rewrite_from_proto
    )
    assert pb.WhichOneof("rewrite") == arm
    assert sorted(REWRITE_ARMS) == sorted(_oneof(lifecycle_pb2.HistoryRewrite, "rewrite"))


def test_history_rewrite_after_version_zero_is_none() -> None:
    rewrite = RegenerateRewrite(
        target_message_id="m", retained_message_ids=(), removed_message_ids=(), before_version=4
    )
    pb = convert.history_rewrite_to_proto(rewrite)
    assert pb.after_version == 0
    assert convert.history_rewrite_from_proto(pb).after_version is None


@ROUNDTRIP
@given(step_aborts)
def test_step_abort_roundtrip(abort: StepAbort) -> None:
    _assert_roundtrip(abort, convert.step_abort_to_proto, convert.step_abort_from_proto)


def test_step_abort_outcome_defaults_to_blocked() -> None:
    abort = convert.step_abort_from_proto(lifecycle_pb2.StepAbort(reason="POLICY"))
    assert abort == StepAbort(reason="POLICY")


@ROUNDTRIP
@given(tool_infos)
def test_tool_info_roundtrip(tool: ToolInfo) -> None:
    _assert_roundtrip(tool, convert.tool_info_to_proto, convert.tool_info_from_proto)


@ROUNDTRIP
@given(tool_results)
def test_tool_result_roundtrip(result: ToolResult) -> None:
    _assert_roundtrip(result, convert.tool_result_to_proto, convert.tool_result_from_proto)


@pytest.mark.parametrize("arm", list(ENTRY_ARMS))
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_tool_entry_roundtrip(arm: str, data: st.DataObject) -> None:
    entry = data.draw(ENTRY_ARMS[arm])
    pb = _assert_roundtrip(entry, convert.tool_entry_to_proto, convert.tool_entry_from_proto)
    assert pb.WhichOneof("entry") == arm
    assert sorted(ENTRY_ARMS) == sorted(_oneof(tools_pb2.ToolExecutionEntry, "entry"))


@ROUNDTRIP
@given(step_summaries)
def test_step_summary_roundtrip(step: StepSummary) -> None:
    _assert_roundtrip(step, convert.step_summary_to_proto, convert.step_summary_from_proto)


def test_step_info_roundtrip() -> None:
    step = StepInfo(step_id="stp_1", index=3)
    _assert_roundtrip(step, convert.step_info_to_proto, convert.step_info_from_proto)


# ------------------------------------------------------------------ decisions

_RESPONSE = AssistantResponse(parts=[TextPart(text="hello")], metadata={"k": [1, None]})
_MODEL = FakeModel("anthropic", "claude")

PREPARE_RUN: dict[str, list[Any]] = {
    "continue_run": [
        Continue(),
        Continue(patch=RunPatch(model=_MODEL, max_steps=3, provider_tools=None)),
    ],
    "respond": [
        Respond(response=_RESPONSE),
        Respond(response=AssistantResponse(parts=[]), outcome="blocked", reason="QUOTA"),
    ],
    "complete": [Complete(), Complete(reason="DONE")],
    "fail": [Fail(reason="NOPE"), Fail(reason="NOPE", message="no")],
}
PREPARE_MODEL_STEP: dict[str, list[Any]] = {
    "continue_step": [
        Continue(),
        Continue(patch=ModelStepPatch(messages=[], tool_choice=None, model=_MODEL)),
    ],
    "respond": [Respond(response=_RESPONSE, outcome="blocked", reason="R")],
    "block": [Block(reason="POLICY"), Block(reason="POLICY", response=_RESPONSE)],
}
BEFORE_TOOL_CALL: dict[str, list[Any]] = {
    "continue_call": [Continue()],
    "replace_input": [ReplaceInput(input={"q": "x"}), ReplaceInput(input=None)],
    "skip": [Skip(output=[1, 2]), Skip(output=None)],
    "reject": [Reject(message="no")],
}
AFTER_TOOL_RESULT: dict[str, list[Any]] = {
    "continue_result": [Continue()],
    "replace_output": [ReplaceOutput(output="redacted"), ReplaceOutput(output=None)],
    "replace_message": [ReplaceMessage(message="failed")],
}
_MSGS = [SystemModelMessage(content="note"), UserModelMessage(content=[ModelTextPart(text="u")])]
AFTER_STEP: dict[str, list[Any]] = {
    "next_step": [
        NextStep(),
        NextStep(append_model_messages=_MSGS),
        NextStep(append_model_messages=[]),
        NextStep(replace_model_messages=_MSGS),
        NextStep(replace_model_messages=[]),
    ],
    "complete": [Complete(), Complete(reason="ENOUGH")],
}

DECISION_CASES = [
    (
        "prepare_run",
        plugin_pb2.PrepareRunResponse,
        PREPARE_RUN,
        convert.prepare_run_result_to_proto,
        _with_resolve(convert.prepare_run_result_from_proto),
    ),
    (
        "prepare_model_step",
        plugin_pb2.PrepareModelStepResponse,
        PREPARE_MODEL_STEP,
        convert.prepare_model_step_result_to_proto,
        _with_resolve(convert.prepare_model_step_result_from_proto),
    ),
    (
        "before_tool_call",
        plugin_pb2.BeforeToolCallResponse,
        BEFORE_TOOL_CALL,
        convert.before_tool_call_result_to_proto,
        convert.before_tool_call_result_from_proto,
    ),
    (
        "after_tool_result",
        plugin_pb2.AfterToolResultResponse,
        AFTER_TOOL_RESULT,
        convert.after_tool_result_result_to_proto,
        convert.after_tool_result_result_from_proto,
    ),
    (
        "after_step",
        plugin_pb2.AfterStepResponse,
        AFTER_STEP,
        convert.after_step_result_to_proto,
        convert.after_step_result_from_proto,
    ),
]
_IDS = [case[0] for case in DECISION_CASES]


@pytest.mark.parametrize(
    ("phase", "response", "arms", "to_proto", "from_proto"), DECISION_CASES, ids=_IDS
)
def test_decisions_roundtrip_on_every_arm(
    phase: str,
    response: type[ProtoMessage],
    arms: dict[str, list[Any]],
    to_proto: Callable[[Any], ProtoMessage],
    from_proto: Callable[[Any], Any],
) -> None:
    assert sorted(arms) == sorted(_oneof(response, "decision"))
    for arm, decisions in arms.items():
        for decision in decisions:
            pb = _assert_roundtrip(decision, to_proto, from_proto)
            assert pb.WhichOneof("decision") == arm
    # No decision: an unset oneof, and back.
    pb = to_proto(None)
    assert pb.WhichOneof("decision") is None
    assert from_proto(pb) is None


def test_respond_outcome_defaults_to_completed() -> None:
    pb = plugin_pb2.PrepareRunResponse(
        respond=lifecycle_pb2.RespondDecision(response=model_pb2.AssistantResponse())
    )
    assert convert.prepare_run_result_from_proto(pb, resolve) == Respond(
        response=AssistantResponse(parts=[])
    )


def test_continue_with_a_list_of_patches_is_folded() -> None:
    decision = Continue(
        patch=[  # type: ignore[arg-type]
            ModelStepPatch(tools=[ToolManifestEntry(name="a")], provider_options={"x": {"a": 1}}),
            {"provider_options": {"y": {"b": 2}}},
        ]
    )
    pb = convert.prepare_model_step_result_to_proto(decision)
    back = convert.prepare_model_step_result_from_proto(pb, resolve)
    assert back == Continue(
        patch=ModelStepPatch(
            tools=[ToolManifestEntry(name="a")], provider_options={"x": {"a": 1}, "y": {"b": 2}}
        )
    )
    # An empty list is no patch.
    empty = convert.prepare_run_result_to_proto(Continue(patch=[]))  # type: ignore[arg-type]
    assert empty.HasField("continue_run")
    assert not empty.continue_run.HasField("patch")


def test_next_step_with_replace_and_append_becomes_one_replacement() -> None:
    decision = NextStep(append_model_messages=_MSGS[1:], replace_model_messages=_MSGS[:1])
    pb = convert.after_step_result_to_proto(decision)
    assert pb.next_step.WhichOneof("patch") == "replace_model_messages"
    assert convert.after_step_result_from_proto(pb) == NextStep(replace_model_messages=_MSGS)


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        (None, None),
        (HistoryRewritePatch(metadata={"a": 1}), HistoryRewritePatch(metadata={"a": 1})),
        (HistoryRewritePatch(private_metadata={}), HistoryRewritePatch(private_metadata={})),
        (
            HistoryRewritePatch(metadata={"a": None}, private_metadata={"b": [1]}),
            HistoryRewritePatch(metadata={"a": None}, private_metadata={"b": [1]}),
        ),
        (HistoryRewritePatch(), None),
    ],
    ids=["none", "metadata", "empty-private", "both", "neither"],
)
def test_history_rewrite_patch_roundtrip(
    patch: HistoryRewritePatch | None, expected: HistoryRewritePatch | None
) -> None:
    pb = _reparse(convert.history_rewrite_patch_to_proto(patch))
    assert convert.history_rewrite_patch_from_proto(pb) == expected


# ---------------------------------------------------------------------- enums

ENUMS: list[tuple[Any, list[str], Callable[[Any], int], Callable[..., Any]]] = [
    (lifecycle_pb2.LifecyclePhase, list(PHASES), convert.phase_to_proto, convert.phase_from_proto),
    (
        model_pb2.ToolSource,
        list(get_args(ToolSourceName)),
        convert.tool_source_to_proto,
        convert.tool_source_from_proto,
    ),
    (
        tools_pb2.ToolResultStatus,
        RESULT_STATUSES,
        convert.tool_result_status_to_proto,
        convert.tool_result_status_from_proto,
    ),
    (
        tools_pb2.ToolResultSource,
        RESULT_SOURCES,
        convert.tool_result_source_to_proto,
        convert.tool_result_source_from_proto,
    ),
]


@pytest.mark.parametrize(
    ("proto_enum", "values", "to_proto", "from_proto"),
    ENUMS,
    ids=[row[0].DESCRIPTOR.name for row in ENUMS],
)
def test_enum_maps_are_bijections(
    proto_enum: Any,
    values: list[str],
    to_proto: Callable[[Any], int],
    from_proto: Callable[..., Any],
) -> None:
    assert {to_proto(v) for v in values} == set(proto_enum.values()) - {0}
    assert [from_proto(to_proto(v)) for v in values] == values
    with pytest.raises(ValueError, match="unknown"):
        from_proto(99)
    with pytest.raises(ValueError, match="UNSPECIFIED"):
        from_proto(0)
    with pytest.raises(ValueError, match="has no"):
        to_proto("bogus")


def test_phase_names_match_the_proto_names() -> None:
    for phase in PHASES:
        name = lifecycle_pb2.LifecyclePhase.Name(convert.phase_to_proto(phase))
        assert name == f"LIFECYCLE_PHASE_{phase.upper()}"


def test_every_tool_choice_mode_converts() -> None:
    modes = [m for m in model_pb2.ToolChoiceMode.values() if m]
    for mode in modes:
        choice = convert.tool_choice_from_proto(model_pb2.ToolChoice(mode=mode, tool_name="t"))
        assert choice is not None
        assert convert.tool_choice_to_proto(choice).mode == mode
    assert len(modes) == len(get_args(ToolChoice.model_fields["mode"].annotation))


# ------------------------------------------------------------------ bad input

_UNSET_USER_PART = model_pb2.ModelMessage(
    user=model_pb2.UserModelMessage(content=[model_pb2.UserContentPart()])
)


@pytest.mark.parametrize(
    ("convert_fn", "pb", "pattern"),
    [
        (convert.model_message_from_proto, model_pb2.ModelMessage(), r"ModelMessage\.message"),
        (
            convert.model_message_from_proto,
            _UNSET_USER_PART,
            r"UserModelMessage\.content\[0\]: UserContentPart\.part",
        ),
        (
            lambda pb: convert.model_messages_from_proto(
                [model_pb2.ModelMessage(), pb], path="X.messages"
            ),
            _UNSET_USER_PART,
            r"X\.messages\[0\]: ModelMessage\.message",
        ),
        (
            convert.model_message_from_proto,
            model_pb2.ModelMessage(
                assistant=model_pb2.AssistantModelMessage(
                    content=[
                        model_pb2.AssistantContentPart(text=model_pb2.ModelTextPart()),
                        model_pb2.AssistantContentPart(),
                    ]
                )
            ),
            r"AssistantModelMessage\.content\[1\]: AssistantContentPart\.part",
        ),
        (
            convert.model_message_from_proto,
            model_pb2.ModelMessage(
                tool=model_pb2.ToolModelMessage(content=[model_pb2.ModelToolResultPart()])
            ),
            r"ToolModelMessage\.content\[0\]: ModelToolResultPart\.output is required",
        ),
        (
            convert.tool_result_output_from_proto,
            model_pb2.ToolResultOutput(),
            r"ToolResultOutput\.output",
        ),
        (
            convert.tool_manifest_entry_from_proto,
            model_pb2.ToolManifestEntry(name="t"),
            r"ToolManifestEntry\.source.*UNSPECIFIED",
        ),
        (
            convert.tool_manifest_entry_from_proto,
            model_pb2.ToolManifestEntry(name="t", source=99),  # type: ignore[arg-type]
            r"ToolManifestEntry\.source: unknown ToolSource value 99",
        ),
        (
            convert.tool_choice_from_proto,
            model_pb2.ToolChoice(mode=99),  # type: ignore[arg-type]
            r"ToolChoice\.mode: unknown",
        ),
        (
            _with_resolve(convert.model_step_request_from_proto),
            model_pb2.ModelStepRequest(),
            r"ModelStepRequest\.model is required",
        ),
        (
            _with_resolve(convert.model_step_request_from_proto),
            model_pb2.ModelStepRequest(model="nope:x"),
            r"ModelStepRequest\.model: unknown model provider",
        ),
        (
            _with_resolve(convert.model_step_request_from_proto),
            model_pb2.ModelStepRequest(
                model="a:b",
                tools=[
                    model_pb2.ToolManifestEntry(source=model_pb2.TOOL_SOURCE_MCP),
                    model_pb2.ToolManifestEntry(),
                ],
            ),
            r"ModelStepRequest\.tools\[1\]: ToolManifestEntry\.source",
        ),
        (
            _with_resolve(convert.model_step_patch_from_proto),
            model_pb2.ModelStepPatch(model="nope:x"),
            r"ModelStepPatch\.model: unknown model provider",
        ),
        (
            _with_resolve(convert.run_patch_from_proto),
            model_pb2.RunPatch(model=""),
            r"RunPatch\.model is required",
        ),
        (
            _with_resolve(convert.model_step_patch_from_proto),
            model_pb2.ModelStepPatch(
                append_model_messages=model_pb2.ModelMessageList(
                    messages=[model_pb2.ModelMessage()]
                )
            ),
            r"ModelStepPatch\.append_model_messages\[0\]: ModelMessage\.message",
        ),
        (
            _with_resolve(convert.model_call_patch_from_proto),
            model_pb2.ModelCallPatch(timeout_ms=-1),
            r"ModelCallPatch\.timeout_ms: must not be negative",
        ),
        (
            convert.assistant_response_from_proto,
            model_pb2.AssistantResponse(parts=[{}]),
            r"AssistantResponse\.parts\[0\]: MessagePart\.part",
        ),
        (
            convert.history_rewrite_from_proto,
            lifecycle_pb2.HistoryRewrite(before_version=1),
            r"HistoryRewrite\.rewrite",
        ),
        (
            convert.history_rewrite_from_proto,
            lifecycle_pb2.HistoryRewrite(
                visibility=lifecycle_pb2.VisibilityRewrite(
                    changes=[lifecycle_pb2.VisibilityChange(message_id="m")]
                )
            ),
            r"VisibilityRewrite\.changes\[0\]: VisibilityChange\.before is required",
        ),
        (
            convert.step_abort_from_proto,
            lifecycle_pb2.StepAbort(outcome=runs_pb2.RUN_OUTCOME_COMPLETED),
            r"StepAbort\.outcome: RUN_OUTCOME_COMPLETED is not allowed",
        ),
        (
            convert.step_abort_from_proto,
            lifecycle_pb2.StepAbort(outcome=99),  # type: ignore[arg-type]
            r"StepAbort\.outcome: unknown RunOutcome value 99",
        ),
        (
            convert.tool_info_from_proto,
            tools_pb2.ToolInfo(name="t"),
            r"ToolInfo\.source.*UNSPECIFIED",
        ),
        (
            convert.tool_result_from_proto,
            tools_pb2.ToolResult(source=tools_pb2.TOOL_RESULT_SOURCE_SKIP),
            r"ToolResult\.status.*UNSPECIFIED",
        ),
        (
            convert.tool_result_from_proto,
            tools_pb2.ToolResult(status=tools_pb2.TOOL_RESULT_STATUS_OUTPUT_ERROR, source=99),  # type: ignore[arg-type]
            r"ToolResult\.source: unknown ToolResultSource value 99",
        ),
        (
            convert.tool_entry_from_proto,
            tools_pb2.ToolExecutionEntry(),
            r"ToolExecutionEntry\.entry",
        ),
        (
            convert.tool_entry_from_proto,
            tools_pb2.ToolExecutionEntry(
                resume=tools_pb2.ResumeEntry(resume=struct_pb2.Value(number_value=math.nan))
            ),
            r"ResumeEntry\.resume",
        ),
        (
            convert.step_summary_from_proto,
            plugin_pb2.StepSummary(),
            r"StepSummary\.message is required",
        ),
        (
            convert.step_summary_from_proto,
            plugin_pb2.StepSummary(
                message=threads_pb2.LifecycleMessage(
                    message=threads_pb2.Message(role=1, create_time={})
                ),
                finish_reason=99,  # type: ignore[arg-type]
            ),
            r"StepSummary\.finish_reason: unknown FinishReason value 99",
        ),
        (
            convert.step_summary_from_proto,
            plugin_pb2.StepSummary(
                message=threads_pb2.LifecycleMessage(
                    message=threads_pb2.Message(role=1, create_time={})
                ),
                tool_calls=[
                    chunks_pb2.ToolCallChunk(),
                    chunks_pb2.ToolCallChunk(input=struct_pb2.Value()),
                ],
            ),
            r"StepSummary\.tool_calls\[1\]: ToolCallChunk\.input",
        ),
        (
            _with_resolve(convert.prepare_run_result_from_proto),
            plugin_pb2.PrepareRunResponse(respond=lifecycle_pb2.RespondDecision()),
            r"RespondDecision\.response is required",
        ),
        (
            _with_resolve(convert.prepare_model_step_result_from_proto),
            plugin_pb2.PrepareModelStepResponse(
                respond=lifecycle_pb2.RespondDecision(
                    response=model_pb2.AssistantResponse(), outcome=runs_pb2.RUN_OUTCOME_FAILED
                )
            ),
            r"RespondDecision\.outcome: RUN_OUTCOME_FAILED is not allowed",
        ),
        (
            _with_resolve(convert.prepare_run_result_from_proto),
            plugin_pb2.PrepareRunResponse(
                continue_run=plugin_pb2.RunContinue(patch=model_pb2.RunPatch(model="nope:x"))
            ),
            r"RunPatch\.model: unknown model provider",
        ),
        (
            convert.after_step_result_from_proto,
            plugin_pb2.AfterStepResponse(
                next_step=plugin_pb2.NextStepDecision(
                    replace_model_messages=model_pb2.ModelMessageList(messages=[{}])
                )
            ),
            r"NextStepDecision\.replace_model_messages\[0\]: ModelMessage\.message",
        ),
        (convert.phase_from_proto, 0, r"LifecyclePhase.*UNSPECIFIED"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_malformed_protos_are_rejected(
    convert_fn: Callable[[Any], Any], pb: Any, pattern: str
) -> None:
    with pytest.raises(ValueError, match=pattern):
        convert_fn(pb)


@pytest.mark.parametrize(
    ("convert_fn", "value", "pattern"),
    [
        (
            convert.model_call_patch_to_proto,
            ModelCallPatch(signal=AbortSignal()),
            r"ModelCallPatch\.signal: an AbortSignal cannot cross the wire",
        ),
        (
            convert.model_step_patch_to_proto,
            ModelCallPatch(timeout=1.0),
            r"ModelStepPatch: a step patch cannot carry timeout",
        ),
        (
            convert.model_call_patch_to_proto,
            ModelCallPatch(timeout=0),
            r"ModelCallPatch\.timeout: must be a positive",
        ),
        (convert.model_call_patch_to_proto, ModelCallPatch(timeout=-1.0), r"positive"),
        (convert.model_call_patch_to_proto, ModelCallPatch(timeout=math.inf), r"positive finite"),
        (convert.model_call_patch_to_proto, ModelCallPatch(timeout="1"), r"expected seconds"),
        (
            convert.run_patch_to_proto,
            RunPatch(max_steps="3"),
            r"RunPatch\.max_steps: expected an int",
        ),
        (convert.run_patch_to_proto, RunPatch(max_steps=2**31), r"[Vv]alue out of range|int32"),
        (convert.run_patch_to_proto, ModelStepPatch(), r"RunPatch: expected RunPatch"),
        (
            convert.run_patch_to_proto,
            RunPatch(model="anthropic:x"),
            r"RunPatch\.model: expected a LanguageModel",
        ),
        (
            convert.model_step_patch_to_proto,
            ModelStepPatch(messages=[SystemModelMessage(content="a"), TextPart(text="b")]),
            r"ModelStepPatch\.messages\[1\]: ModelMessage: not a model message",
        ),
        (
            convert.model_step_patch_to_proto,
            ModelStepPatch(tools=ToolManifestEntry(name="t")),
            r"ModelStepPatch\.tools: expected a list",
        ),
        (
            convert.model_step_patch_to_proto,
            ModelStepPatch(provider_options={"bad": math.nan}),
            r"ModelStepPatch\.provider_options",
        ),
        (
            convert.model_step_patch_to_proto,
            ModelStepPatch(tool_choice="auto"),
            r"ToolChoice: expected ToolChoice",
        ),
        (
            convert.model_message_to_proto,
            UserModelMessage.model_construct(content=[ModelReasoningPart(text="r")]),
            r"UserModelMessage\.content\[0\]: not user content",
        ),
        (
            convert.prepare_run_result_to_proto,
            Block(reason="x"),
            r"prepare_run: not a prepare_run decision",
        ),
        (
            convert.prepare_run_result_to_proto,
            Continue(patch=ModelStepPatch()),
            r"RunContinue\.patch: .*expected RunPatch",
        ),
        (
            convert.prepare_model_step_result_to_proto,
            Fail(reason="x"),
            r"prepare_model_step: not a prepare_model_step decision",
        ),
        (
            convert.before_tool_call_result_to_proto,
            Continue(patch=RunPatch()),
            r"before_tool_call: Continue carries no patch",
        ),
        (
            convert.after_tool_result_result_to_proto,
            Skip(output=1),
            r"after_tool_result: not an? after_tool_result decision",
        ),
        (
            convert.after_step_result_to_proto,
            Continue(),
            r"after_step: not an? after_step decision",
        ),
        (
            convert.history_rewrite_patch_to_proto,
            Continue(),
            r"prepare_history_rewrite: not a prepare_history_rewrite decision",
        ),
        (
            convert.history_rewrite_patch_to_proto,
            HistoryRewritePatch(metadata=[1]),  # type: ignore[arg-type]
            r"expected a JSON object",
        ),
        (
            convert.prepare_run_result_to_proto,
            Respond(response=_RESPONSE, outcome="failed"),  # type: ignore[arg-type]
            r"'failed' has no RunOutcome counterpart",
        ),
        (
            convert.step_abort_to_proto,
            StepAbort(reason="x", outcome="completed"),  # type: ignore[arg-type]
            r"'completed' has no RunOutcome counterpart",
        ),
        (convert.phase_to_proto, "before_run", r"'before_run' has no LifecyclePhase"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_bad_domain_values_are_rejected(
    convert_fn: Callable[[Any], Any], value: Any, pattern: str
) -> None:
    with pytest.raises(ValueError, match=pattern):
        convert_fn(value)


def test_tool_call_chunks_in_a_summary_must_be_tool_calls() -> None:
    summary = convert.step_summary_from_proto(
        plugin_pb2.StepSummary(
            message=threads_pb2.LifecycleMessage(
                message=threads_pb2.Message(role=1, create_time={})
            ),
            tool_calls=[chunks_pb2.ToolCallChunk(tool_call_id="c")],
        )
    )
    assert summary.tool_calls == [ToolCallChunk(tool_call_id="c", tool_name="")]
    bad = StepSummary(
        step_id="s",
        index=0,
        message=summary.message,
        finish_reason=None,
        tool_calls=[TextPart(text="x")],  # type: ignore[list-item]
    )
    with pytest.raises(ValueError, match=r"StepSummary\.tool_calls\[0\]: not a ToolCallChunk"):
        convert.step_summary_to_proto(bad)
