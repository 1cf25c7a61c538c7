"""Round-trip properties of the protobuf <-> domain conversion layer."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeVar, get_args

import pytest
from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.message import Message as ProtoMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from pai.v1 import chunks_pb2, parts_pb2, runs_pb2, threads_pb2
from pai_grpc import convert
from pai_grpc.domain import (
    AbortChunk,
    ChunkEvent,
    CompactedEvent,
    DataChunk,
    DataPart,
    DocumentSource,
    ErrorChunk,
    FileChunk,
    FilePart,
    FinishChunk,
    FinishReason,
    FinishStepChunk,
    HookCallEvent,
    HookFailure,
    LifecycleMessage,
    Message,
    MessageEvent,
    MessagePart,
    MessageView,
    PartState,
    PendingAction,
    PendingActionEvent,
    PendingActionKind,
    PendingActionStatus,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningFileChunk,
    ReasoningPart,
    ReasoningStartChunk,
    ResponseInfo,
    Role,
    Run,
    RunError,
    RunEvent,
    RunEventPayload,
    RunExecution,
    RunHandle,
    RunInitiator,
    RunOperation,
    RunOutcome,
    RunStatus,
    SortOrder,
    SourceChunk,
    SourceDocumentPart,
    SourceUrlPart,
    StartChunk,
    StartStepChunk,
    StatusEvent,
    StepStartPart,
    StepStreamChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextPart,
    TextStartChunk,
    Thread,
    ThreadStatus,
    ToolApproval,
    ToolApprovalRequestChunk,
    ToolCallChunk,
    ToolErrorChunk,
    ToolInputDeltaChunk,
    ToolInputEndChunk,
    ToolInputStartChunk,
    ToolOutputDeniedChunk,
    ToolPart,
    ToolResultChunk,
    ToolState,
    UrlSource,
    Usage,
    Visibility,
)

T = TypeVar("T")
PB = TypeVar("PB", bound=ProtoMessage)

SAFE = 2**53 - 1
INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
COUNT64 = st.integers(0, 2**63 - 1)
COUNT32 = st.integers(0, 2**31 - 1)

# ------------------------------------------------------------------ strategies

text = st.text(max_size=12)
keys = st.text(max_size=8)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE, SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(keys, json_values, max_size=4)
timestamps = st.datetimes(timezones=st.just(UTC))


def opt(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[T | None]:
    return st.none() | strategy


metadata = opt(json_objects)
part_states = opt(st.sampled_from(["streaming", "done"]))
tool_states = st.sampled_from(
    [
        "input-streaming",
        "input-available",
        "approval-requested",
        "approval-responded",
        "output-available",
        "output-error",
        "output-denied",
    ]
)
finish_reasons = st.sampled_from(
    ["stop", "length", "content-filter", "tool-calls", "error", "other"]
)

PART_ARMS: dict[str, tuple[type[Any], st.SearchStrategy[Any]]] = {
    "text": (
        TextPart,
        st.builds(TextPart, text=text, state=part_states, provider_metadata=metadata),
    ),
    "reasoning": (
        ReasoningPart,
        st.builds(ReasoningPart, text=text, state=part_states, provider_metadata=metadata),
    ),
    "tool": (
        ToolPart,
        st.builds(
            ToolPart,
            tool_call_id=text,
            tool_name=text,
            state=tool_states,
            title=opt(text),
            provider_executed=st.booleans(),
            input=json_values,
            output=json_values,
            error_text=opt(text),
            preliminary=st.booleans(),
            approval=opt(
                st.builds(ToolApproval, id=text, approved=opt(st.booleans()), reason=opt(text))
            ),
            call_provider_metadata=metadata,
            result_provider_metadata=metadata,
        ),
    ),
    "source_url": (
        SourceUrlPart,
        st.builds(
            SourceUrlPart, source_id=text, url=text, title=opt(text), provider_metadata=metadata
        ),
    ),
    "source_document": (
        SourceDocumentPart,
        st.builds(
            SourceDocumentPart,
            source_id=text,
            media_type=text,
            title=text,
            filename=opt(text),
            provider_metadata=metadata,
        ),
    ),
    "file": (
        FilePart,
        st.builds(
            FilePart, media_type=text, url=text, filename=opt(text), provider_metadata=metadata
        ),
    ),
    "step_start": (StepStartPart, st.builds(StepStartPart)),
    "data": (DataPart, st.builds(DataPart, name=text, id=opt(text), data=json_values)),
}
message_parts: st.SearchStrategy[MessagePart] = st.one_of(*(s for _, s in PART_ARMS.values()))

usages = st.builds(
    Usage,
    input_tokens=opt(INT64),
    output_tokens=opt(INT64),
    total_tokens=opt(INT64),
    reasoning_tokens=opt(INT64),
    cache_read_tokens=opt(INT64),
    cache_write_tokens=opt(INT64),
)


def _id_meta(cls: type[Any], **extra: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.builds(cls, id=text, provider_metadata=metadata, **extra)


CHUNK_ARMS: dict[str, tuple[type[Any], st.SearchStrategy[Any]]] = {
    "start": (StartChunk, st.builds(StartChunk)),
    "text_start": (TextStartChunk, _id_meta(TextStartChunk)),
    "text_delta": (TextDeltaChunk, _id_meta(TextDeltaChunk, text=text)),
    "text_end": (TextEndChunk, _id_meta(TextEndChunk)),
    "reasoning_start": (ReasoningStartChunk, _id_meta(ReasoningStartChunk)),
    "reasoning_delta": (ReasoningDeltaChunk, _id_meta(ReasoningDeltaChunk, text=text)),
    "reasoning_end": (ReasoningEndChunk, _id_meta(ReasoningEndChunk)),
    "tool_input_start": (
        ToolInputStartChunk,
        _id_meta(
            ToolInputStartChunk, tool_name=text, provider_executed=st.booleans(), title=opt(text)
        ),
    ),
    "tool_input_delta": (ToolInputDeltaChunk, _id_meta(ToolInputDeltaChunk, delta=text)),
    "tool_input_end": (ToolInputEndChunk, _id_meta(ToolInputEndChunk)),
    "tool_call": (
        ToolCallChunk,
        st.builds(
            ToolCallChunk,
            tool_call_id=text,
            tool_name=text,
            input=json_values,
            provider_executed=st.booleans(),
            invalid=st.booleans(),
            error_text=opt(text),
            title=opt(text),
            provider_metadata=metadata,
        ),
    ),
    "tool_result": (
        ToolResultChunk,
        st.builds(
            ToolResultChunk,
            tool_call_id=text,
            tool_name=text,
            input=json_values,
            output=json_values,
            provider_executed=st.booleans(),
            preliminary=st.booleans(),
            provider_metadata=metadata,
        ),
    ),
    "tool_error": (
        ToolErrorChunk,
        st.builds(
            ToolErrorChunk,
            tool_call_id=text,
            tool_name=text,
            input=json_values,
            error_text=text,
            provider_executed=st.booleans(),
            provider_metadata=metadata,
        ),
    ),
    "tool_approval_request": (
        ToolApprovalRequestChunk,
        st.builds(ToolApprovalRequestChunk, approval_id=text, tool_call_id=text),
    ),
    "tool_output_denied": (
        ToolOutputDeniedChunk,
        st.builds(ToolOutputDeniedChunk, tool_call_id=text),
    ),
    "source": (
        SourceChunk,
        _id_meta(
            SourceChunk,
            source=st.builds(UrlSource, url=text, title=opt(text))
            | st.builds(DocumentSource, media_type=text, title=text, filename=opt(text)),
        ),
    ),
    "file": (
        FileChunk,
        st.builds(FileChunk, media_type=text, url=text, provider_metadata=metadata),
    ),
    "reasoning_file": (
        ReasoningFileChunk,
        st.builds(ReasoningFileChunk, media_type=text, url=text, provider_metadata=metadata),
    ),
    "data": (
        DataChunk,
        st.builds(DataChunk, name=text, id=opt(text), data=json_values, transient=st.booleans()),
    ),
    "start_step": (StartStepChunk, st.builds(StartStepChunk, warnings=st.lists(text, max_size=3))),
    "finish_step": (
        FinishStepChunk,
        st.builds(
            FinishStepChunk,
            usage=usages,
            finish_reason=finish_reasons,
            raw_finish_reason=opt(text),
            provider_metadata=metadata,
            response=opt(st.builds(ResponseInfo, id=text, model_id=text)),
        ),
    ),
    "finish": (
        FinishChunk,
        st.builds(
            FinishChunk,
            finish_reason=finish_reasons,
            raw_finish_reason=opt(text),
            total_usage=usages,
        ),
    ),
    "error": (ErrorChunk, st.builds(ErrorChunk, reason=text, message=text)),
    "abort": (AbortChunk, st.builds(AbortChunk, reason=opt(text))),
}
stream_chunks: st.SearchStrategy[StepStreamChunk] = st.one_of(*(s for _, s in CHUNK_ARMS.values()))

threads = st.builds(
    Thread,
    id=text,
    agent=text,
    status=st.sampled_from(["idle", "running", "waiting"]),
    version=INT64,
    metadata=json_objects,
    active_run_id=opt(text),
    message_count=INT64,
    created_at=timestamps,
    updated_at=timestamps,
)
messages = st.builds(
    Message,
    id=text,
    thread_id=text,
    role=st.sampled_from(["system", "user", "assistant"]),
    parts=st.lists(message_parts, max_size=3),
    metadata=json_objects,
    position=INT64,
    run_id=opt(text),
    step_index=opt(INT32),
    created_at=timestamps,
)
lifecycle_messages = st.builds(
    LifecycleMessage,
    message=messages,
    visibility=st.builds(Visibility, transcript=st.booleans(), context=st.booleans()),
    private_metadata=json_objects,
)

run_statuses = st.sampled_from(["queued", "running", "waiting", "completed", "failed", "cancelled"])
run_outcomes = opt(st.sampled_from(["completed", "blocked", "failed", "cancelled"]))
run_errors = opt(st.builds(RunError, reason=text, message=text))
runs = st.builds(
    Run,
    id=text,
    thread_id=text,
    status=run_statuses,
    outcome=run_outcomes,
    reason=opt(text),
    initiator=st.sampled_from(["send", "trigger", "regenerate"]),
    started_at=opt(timestamps),
    execution=st.builds(
        RunExecution,
        operation=st.sampled_from(["send", "trigger", "regenerate", "resume"]),
        started_at=opt(timestamps),
    ),
    metadata=json_objects,
    usage=usages,
    step_count=INT32,
    attempts=INT32,
    error=run_errors,
    hook_failures=st.lists(
        st.builds(HookFailure, plugin=text, phase=text, reason=text, count=INT32), max_size=3
    ),
    last_seq=INT64,
    created_at=timestamps,
    updated_at=timestamps,
    ended_at=opt(timestamps),
)
run_handles = st.builds(
    RunHandle, run_id=text, thread_id=text, status=run_statuses, message_id=opt(text)
)
pending_actions = st.builds(
    PendingAction,
    id=text,
    run_id=text,
    thread_id=text,
    kind=st.sampled_from(["client_tool", "approval", "data"]),
    status=st.sampled_from(["open", "resolved", "cancelled"]),
    tool_call_id=text,
    tool_name=text,
    input=json_values,
    request=json_values,
    created_at=timestamps,
)
EVENT_ARMS: dict[str, tuple[type[Any], st.SearchStrategy[Any]]] = {
    "chunk": (ChunkEvent, st.builds(ChunkEvent, chunk=stream_chunks)),
    "status": (
        StatusEvent,
        st.builds(
            StatusEvent,
            status=run_statuses,
            outcome=run_outcomes,
            reason=opt(text),
            error=run_errors,
        ),
    ),
    "message": (MessageEvent, st.builds(MessageEvent, message=messages)),
    "pending_action": (PendingActionEvent, st.builds(PendingActionEvent, action=pending_actions)),
    "compacted": (
        CompactedEvent,
        st.builds(CompactedEvent, first_seq=INT64, last_seq=INT64, removed_events=INT64),
    ),
    "hook_call": (
        HookCallEvent,
        st.builds(
            HookCallEvent,
            phase=text,
            hook=text,
            outcome=st.sampled_from(["ok", "error", "failed_open", "timeout"]),
            decision=text,
            duration_ms=st.floats(allow_nan=False, allow_infinity=False),
            step=opt(st.integers(-(2**31), 2**31 - 1)),
            reason=opt(text),
        ),
    ),
}
run_events = st.builds(
    RunEvent,
    seq=INT64,
    time=timestamps,
    payload=st.one_of(*(s for _, s in EVENT_ARMS.values())),
)

# ------------------------------------------------------------------- helpers


def _reparse(pb: PB) -> PB:
    """Serialise to bytes and parse back into a fresh message of the same type."""
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


def _union_members(union: object) -> set[type[Any]]:
    """The classes of an ``Annotated[A | B | ..., Field(...)]`` discriminated union."""
    (inner, *_) = get_args(union)
    return set(get_args(inner))


# ------------------------------------------------------------- round trips

ROUNDTRIP = settings(max_examples=60, deadline=None)
PER_ARM = settings(max_examples=25, deadline=None)


@ROUNDTRIP
@given(json_values)
def test_value_roundtrip(value: Any) -> None:
    _assert_roundtrip(value, convert.value_to_proto, convert.value_from_proto)


@ROUNDTRIP
@given(json_objects)
def test_struct_roundtrip(value: dict[str, Any]) -> None:
    _assert_roundtrip(value, convert.struct_to_proto, convert.struct_from_proto)


@ROUNDTRIP
@given(timestamps)
def test_timestamp_roundtrip(value: datetime) -> None:
    pb = _assert_roundtrip(value, convert.timestamp_to_proto, convert.timestamp_from_proto)
    assert convert.timestamp_from_proto(pb).tzinfo is UTC


@ROUNDTRIP
@given(message_parts)
def test_part_roundtrip(part: MessagePart) -> None:
    _assert_roundtrip(part, convert.part_to_proto, convert.part_from_proto)


@ROUNDTRIP
@given(stream_chunks)
def test_chunk_roundtrip(chunk: StepStreamChunk) -> None:
    _assert_roundtrip(chunk, convert.chunk_to_proto, convert.chunk_from_proto)


@ROUNDTRIP
@given(usages)
def test_usage_roundtrip(usage: Usage) -> None:
    _assert_roundtrip(usage, convert.usage_to_proto, convert.usage_from_proto)


@ROUNDTRIP
@given(threads)
def test_thread_roundtrip(thread: Thread) -> None:
    pb = _assert_roundtrip(thread, convert.thread_to_proto, convert.thread_from_proto)
    assert pb.etag == thread.etag


@ROUNDTRIP
@given(messages)
def test_message_roundtrip(message: Message) -> None:
    _assert_roundtrip(message, convert.message_to_proto, convert.message_from_proto)


@ROUNDTRIP
@given(lifecycle_messages)
def test_lifecycle_message_roundtrip(message: LifecycleMessage) -> None:
    _assert_roundtrip(
        message, convert.lifecycle_message_to_proto, convert.lifecycle_message_from_proto
    )


@ROUNDTRIP
@given(runs)
def test_run_roundtrip(run: Run) -> None:
    _assert_roundtrip(run, convert.run_to_proto, convert.run_from_proto)


@ROUNDTRIP
@given(run_handles)
def test_run_handle_roundtrip(handle: RunHandle) -> None:
    _assert_roundtrip(handle, convert.run_handle_to_proto, convert.run_handle_from_proto)


@ROUNDTRIP
@given(pending_actions)
def test_pending_action_roundtrip(action: PendingAction) -> None:
    _assert_roundtrip(action, convert.pending_action_to_proto, convert.pending_action_from_proto)


@ROUNDTRIP
@given(run_events)
def test_run_event_roundtrip(event: RunEvent) -> None:
    _assert_roundtrip(event, convert.run_event_to_proto, convert.run_event_from_proto)


@ROUNDTRIP
@given(INT64, timestamps, stream_chunks)
def test_a_chunk_event_encodes_as_its_run_event(
    seq: int, time: datetime, chunk: StepStreamChunk
) -> None:
    """The runtime encodes a step's chunks without building their events: the same bytes."""
    event = RunEvent(seq=seq, time=time, payload=ChunkEvent(chunk=chunk))
    assert convert.chunk_event_to_bytes(seq, time, chunk) == convert.run_event_to_bytes(event)


#: The delta arms, with and without provider metadata (the encoder's fast path takes them without).
delta_chunks = st.one_of(
    *(
        CHUNK_ARMS[arm][1].map(lambda c: c.model_copy(update={"provider_metadata": None}))
        for arm in ("text_delta", "reasoning_delta", "tool_input_delta")
    ),
    *(CHUNK_ARMS[arm][1] for arm in ("text_delta", "reasoning_delta", "tool_input_delta")),
)
#: UTC instants, and the same instants at another offset (the fast path takes UTC only).
any_offset_times = st.builds(
    lambda t, minutes: t.astimezone(timezone(timedelta(minutes=minutes))) if minutes else t,
    timestamps.filter(
        lambda t: datetime(2, 1, 1, tzinfo=UTC) < t < datetime(9998, 1, 1, tzinfo=UTC)
    ),
    st.sampled_from([0, 0, 330, -480]),
)


@settings(max_examples=300, deadline=None)
@given(INT64, any_offset_times, delta_chunks)
def test_a_delta_event_encodes_as_its_run_event(
    seq: int, time: datetime, chunk: StepStreamChunk
) -> None:
    """Deltas are set in place rather than built: byte for byte what the built event encodes."""
    event = RunEvent(seq=seq, time=time, payload=ChunkEvent(chunk=chunk))
    body = convert.chunk_event_to_bytes(seq, time, chunk)
    assert body == convert.run_event_to_bytes(event)
    assert convert.run_event_from_bytes(body) == event
    # The chunk alone too (what a transforming plugin is sent and sends back).
    proto = convert.chunk_to_proto(chunk)
    assert convert.chunk_from_proto(proto) == chunk
    if chunk.provider_metadata is None:  # type: ignore[union-attr]
        arm, cls, text = _DELTA_PROTOS[type(chunk)]
        built = chunks_pb2.StepStreamChunk(
            **{arm: cls(id=chunk.id, **{text: getattr(chunk, text)})}  # type: ignore[union-attr]
        )
        assert proto.SerializeToString() == built.SerializeToString()


#: Delta classes -> their arm, proto class and text field, spelled out as a reference.
_DELTA_PROTOS: dict[type, tuple[str, Any, str]] = {
    TextDeltaChunk: ("text_delta", chunks_pb2.TextDeltaChunk, "text"),
    ReasoningDeltaChunk: ("reasoning_delta", chunks_pb2.ReasoningDeltaChunk, "text"),
    ToolInputDeltaChunk: ("tool_input_delta", chunks_pb2.ToolInputDeltaChunk, "delta"),
}


# -------------------------------------------------------- oneof arm coverage

PART_ONEOF = [f.name for f in parts_pb2.MessagePart.DESCRIPTOR.oneofs_by_name["part"].fields]
CHUNK_ONEOF = [f.name for f in chunks_pb2.StepStreamChunk.DESCRIPTOR.oneofs_by_name["chunk"].fields]
EVENT_ONEOF = [f.name for f in runs_pb2.RunEvent.DESCRIPTOR.oneofs_by_name["event"].fields]


@pytest.mark.parametrize(
    ("oneof", "arms"),
    [(PART_ONEOF, PART_ARMS), (CHUNK_ONEOF, CHUNK_ARMS), (EVENT_ONEOF, EVENT_ARMS)],
    ids=["MessagePart", "StepStreamChunk", "RunEvent"],
)
def test_strategies_cover_every_oneof_arm(
    oneof: list[str], arms: dict[str, tuple[type[Any], Any]]
) -> None:
    assert sorted(arms) == sorted(oneof)


@pytest.mark.parametrize(
    ("union", "arms"),
    [(MessagePart, PART_ARMS), (StepStreamChunk, CHUNK_ARMS), (RunEventPayload, EVENT_ARMS)],
    ids=["MessagePart", "StepStreamChunk", "RunEventPayload"],
)
def test_strategies_cover_every_domain_arm(
    union: object, arms: dict[str, tuple[type[Any], Any]]
) -> None:
    assert {cls for cls, _ in arms.values()} == _union_members(union)


@PER_ARM
@pytest.mark.parametrize("arm", PART_ONEOF)
@given(data=st.data())
def test_every_part_arm_converts(arm: str, data: st.DataObject) -> None:
    cls, strategy = PART_ARMS[arm]
    part = data.draw(strategy)
    assert isinstance(part, cls)
    pb = _assert_roundtrip(part, convert.part_to_proto, convert.part_from_proto)
    assert pb.WhichOneof("part") == arm


@PER_ARM
@pytest.mark.parametrize("arm", CHUNK_ONEOF)
@given(data=st.data())
def test_every_chunk_arm_converts(arm: str, data: st.DataObject) -> None:
    cls, strategy = CHUNK_ARMS[arm]
    chunk = data.draw(strategy)
    assert isinstance(chunk, cls)
    pb = _assert_roundtrip(chunk, convert.chunk_to_proto, convert.chunk_from_proto)
    assert pb.WhichOneof("chunk") == arm


@PER_ARM
@pytest.mark.parametrize("arm", EVENT_ONEOF)
@given(data=st.data())
def test_every_run_event_arm_converts(arm: str, data: st.DataObject) -> None:
    cls, strategy = EVENT_ARMS[arm]
    event = RunEvent(seq=data.draw(INT64), time=data.draw(timestamps), payload=data.draw(strategy))
    assert isinstance(event.payload, cls)
    pb = _assert_roundtrip(event, convert.run_event_to_proto, convert.run_event_from_proto)
    assert pb.WhichOneof("event") == arm


REQUIRED_ENUMS: list[tuple[Any, object, Callable[[Any], int], Callable[..., Any]]] = [
    (threads_pb2.MessageRole, Role, convert.role_to_proto, convert.role_from_proto),
    (
        threads_pb2.ThreadStatus,
        ThreadStatus,
        convert.thread_status_to_proto,
        convert.thread_status_from_proto,
    ),
    (
        threads_pb2.MessageView,
        MessageView,
        convert.message_view_to_proto,
        convert.message_view_from_proto,
    ),
    (threads_pb2.SortOrder, SortOrder, convert.sort_order_to_proto, convert.sort_order_from_proto),
    (parts_pb2.ToolState, ToolState, convert.tool_state_to_proto, convert.tool_state_from_proto),
    (
        chunks_pb2.FinishReason,
        FinishReason,
        convert.finish_reason_to_proto,
        convert.finish_reason_from_proto,
    ),
    (runs_pb2.RunStatus, RunStatus, convert.run_status_to_proto, convert.run_status_from_proto),
    (
        runs_pb2.RunInitiator,
        RunInitiator,
        convert.run_initiator_to_proto,
        convert.run_initiator_from_proto,
    ),
    (
        runs_pb2.RunOperation,
        RunOperation,
        convert.run_operation_to_proto,
        convert.run_operation_from_proto,
    ),
    (
        runs_pb2.PendingActionKind,
        PendingActionKind,
        convert.pending_action_kind_to_proto,
        convert.pending_action_kind_from_proto,
    ),
    (
        runs_pb2.PendingActionStatus,
        PendingActionStatus,
        convert.pending_action_status_to_proto,
        convert.pending_action_status_from_proto,
    ),
]
OPTIONAL_ENUMS: list[tuple[Any, object, Callable[[Any], int], Callable[..., Any]]] = [
    (parts_pb2.PartState, PartState, convert.part_state_to_proto, convert.part_state_from_proto),
    (runs_pb2.RunOutcome, RunOutcome, convert.run_outcome_to_proto, convert.run_outcome_from_proto),
]


def _check_bijection(
    proto_enum: Any, literal: object, to_proto: Callable[[Any], int], from_proto: Callable[..., Any]
) -> None:
    values = list(get_args(literal))
    assert {to_proto(v) for v in values} == set(proto_enum.values()) - {0}
    assert [from_proto(to_proto(v)) for v in values] == values
    with pytest.raises(ValueError, match="unknown"):
        from_proto(99)


@pytest.mark.parametrize(
    ("proto_enum", "literal", "to_proto", "from_proto"),
    REQUIRED_ENUMS,
    ids=[row[0].DESCRIPTOR.name for row in REQUIRED_ENUMS],
)
def test_required_enum_maps_are_bijections(
    proto_enum: Any, literal: object, to_proto: Callable[[Any], int], from_proto: Callable[..., Any]
) -> None:
    _check_bijection(proto_enum, literal, to_proto, from_proto)
    with pytest.raises(ValueError, match="UNSPECIFIED"):
        from_proto(0)


@pytest.mark.parametrize(
    ("proto_enum", "literal", "to_proto", "from_proto"),
    OPTIONAL_ENUMS,
    ids=[row[0].DESCRIPTOR.name for row in OPTIONAL_ENUMS],
)
def test_optional_enum_maps_are_bijections(
    proto_enum: Any, literal: object, to_proto: Callable[[Any], int], from_proto: Callable[..., Any]
) -> None:
    _check_bijection(proto_enum, literal, to_proto, from_proto)
    assert to_proto(None) == 0
    assert from_proto(0) is None


# ------------------------------------------------------------- conventions


@ROUNDTRIP
@given(st.integers(-SAFE, SAFE))
def test_safe_integers_come_back_as_int(value: int) -> None:
    back = convert.value_from_proto(convert.value_to_proto(value))
    assert type(back) is int
    assert back == value


@ROUNDTRIP
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_come_back_equal(value: float) -> None:
    back = convert.value_from_proto(convert.value_to_proto(value))
    assert back == value
    if not value.is_integer() or abs(value) > SAFE:
        assert type(back) is float
    else:
        assert type(back) is int


def test_integral_double_beyond_safe_range_stays_float() -> None:
    assert type(convert.value_from_proto(struct_pb2.Value(number_value=2.0**53))) is float
    assert convert.value_from_proto(struct_pb2.Value(number_value=float(SAFE))) == SAFE


def test_json_null_and_absent_value_are_both_unset() -> None:
    part = ToolPart(tool_call_id="c", tool_name="t", state="input-available", input=None)
    pb = convert.part_to_proto(part)
    assert not pb.tool.HasField("input")
    assert not pb.tool.HasField("output")
    explicit_null = parts_pb2.MessagePart(
        tool=parts_pb2.ToolPart(
            tool_call_id="c",
            tool_name="t",
            state=parts_pb2.TOOL_STATE_INPUT_AVAILABLE,
            input=struct_pb2.Value(null_value=struct_pb2.NULL_VALUE),
        )
    )
    assert convert.part_from_proto(explicit_null) == part
    # Nested nulls are real JSON values and survive.
    nested = part.model_copy(update={"input": [None, {"a": None}]})
    assert convert.part_from_proto(convert.part_to_proto(nested)) == nested


def test_optional_struct_presence_is_kept() -> None:
    empty = TextPart(text="x", provider_metadata={})
    absent = TextPart(text="x")
    assert convert.part_to_proto(empty).text.HasField("provider_metadata")
    assert not convert.part_to_proto(absent).text.HasField("provider_metadata")
    assert convert.part_from_proto(_reparse(convert.part_to_proto(empty))) == empty
    assert convert.part_from_proto(_reparse(convert.part_to_proto(absent))) == absent


def _timestamp(seconds: int = 0) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=seconds)


def _thread_pb(**overrides: Any) -> threads_pb2.Thread:
    fields: dict[str, Any] = {
        "id": "thr_1",
        "agent": "a",
        "status": threads_pb2.THREAD_STATUS_IDLE,
        "version": 3,
        "create_time": _timestamp(),
        "update_time": _timestamp(),
    }
    fields.update(overrides)
    return threads_pb2.Thread(**fields)


def test_unset_metadata_reads_as_empty_and_etag_is_ignored() -> None:
    thread = convert.thread_from_proto(_thread_pb(etag='"garbage"'))
    assert thread.metadata == {}
    assert thread.etag == '"3"'
    assert convert.thread_to_proto(thread).etag == '"3"'


def test_unset_visibility_reads_as_visible() -> None:
    message = threads_pb2.Message(
        id="m", thread_id="t", role=threads_pb2.MESSAGE_ROLE_USER, create_time=_timestamp()
    )
    lifecycle = convert.lifecycle_message_from_proto(threads_pb2.LifecycleMessage(message=message))
    assert lifecycle.visibility == Visibility()
    assert lifecycle.private_metadata == {}


def test_timestamps_are_normalised_to_utc() -> None:
    local = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=timezone(timedelta(hours=-7)))
    back = convert.timestamp_from_proto(convert.timestamp_to_proto(local))
    assert back == local
    assert back.tzinfo is UTC
    assert back.hour == 19


def test_timestamp_nanoseconds_are_truncated_to_microseconds() -> None:
    pb = timestamp_pb2.Timestamp(seconds=0, nanos=1_999)
    assert convert.timestamp_from_proto(pb) == datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC)


# --------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("convert_fn", "pb", "field"),
    [
        (convert.part_from_proto, parts_pb2.MessagePart(), "MessagePart.part"),
        (convert.chunk_from_proto, chunks_pb2.StepStreamChunk(), "StepStreamChunk.chunk"),
        (
            convert.chunk_from_proto,
            chunks_pb2.StepStreamChunk(source=chunks_pb2.SourceChunk(id="s")),
            "SourceChunk.source",
        ),
        (
            convert.run_event_from_proto,
            runs_pb2.RunEvent(seq=1, time=_timestamp()),
            "RunEvent.event",
        ),
    ],
    ids=["part", "chunk", "source", "run-event"],
)
def test_unset_oneof_is_rejected(
    convert_fn: Callable[[Any], Any], pb: ProtoMessage, field: str
) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        convert_fn(pb)


def _run_pb(**overrides: Any) -> runs_pb2.Run:
    fields: dict[str, Any] = {
        "id": "run_1",
        "thread_id": "thr_1",
        "status": runs_pb2.RUN_STATUS_RUNNING,
        "initiator": runs_pb2.RUN_INITIATOR_SEND,
        "execution": runs_pb2.RunExecution(operation=runs_pb2.RUN_OPERATION_SEND),
        "create_time": _timestamp(),
        "update_time": _timestamp(),
    }
    fields.update(overrides)
    return runs_pb2.Run(**fields)


def _action_pb(**overrides: Any) -> runs_pb2.PendingAction:
    fields: dict[str, Any] = {
        "id": "act_1",
        "kind": runs_pb2.PENDING_ACTION_KIND_APPROVAL,
        "status": runs_pb2.PENDING_ACTION_STATUS_OPEN,
        "create_time": _timestamp(),
    }
    fields.update(overrides)
    return runs_pb2.PendingAction(**fields)


def test_valid_fixtures_convert() -> None:
    # The bad-input cases below differ from these in exactly one field.
    assert convert.run_from_proto(_run_pb()).outcome is None
    assert convert.thread_from_proto(_thread_pb()).status == "idle"
    assert convert.pending_action_from_proto(_action_pb()).input is None


@pytest.mark.parametrize(
    ("convert_fn", "pb", "field"),
    [
        (
            convert.part_from_proto,
            parts_pb2.MessagePart(tool=parts_pb2.ToolPart(tool_call_id="c")),
            "ToolPart.state",
        ),
        (
            convert.message_from_proto,
            threads_pb2.Message(id="m", create_time=_timestamp()),
            "Message.role",
        ),
        (convert.thread_from_proto, _thread_pb(status=0), "Thread.status"),
        (convert.run_from_proto, _run_pb(status=0), "Run.status"),
        (convert.run_from_proto, _run_pb(initiator=0), "Run.initiator"),
        (
            convert.run_from_proto,
            _run_pb(execution=runs_pb2.RunExecution()),
            "RunExecution.operation",
        ),
        (convert.run_handle_from_proto, runs_pb2.RunHandle(run_id="r"), "RunHandle.status"),
        (convert.pending_action_from_proto, _action_pb(kind=0), "PendingAction.kind"),
        (convert.pending_action_from_proto, _action_pb(status=0), "PendingAction.status"),
        (
            convert.chunk_from_proto,
            chunks_pb2.StepStreamChunk(finish=chunks_pb2.FinishChunk()),
            "FinishChunk.finish_reason",
        ),
        (
            convert.chunk_from_proto,
            chunks_pb2.StepStreamChunk(finish_step=chunks_pb2.FinishStepChunk()),
            "FinishStepChunk.finish_reason",
        ),
        (
            convert.run_event_from_proto,
            runs_pb2.RunEvent(seq=1, time=_timestamp(), status=runs_pb2.RunStatusEvent()),
            "RunStatusEvent.status",
        ),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_unspecified_required_enum_is_rejected(
    convert_fn: Callable[[Any], Any], pb: ProtoMessage, field: str
) -> None:
    with pytest.raises(ValueError, match=rf"{field.replace('.', '[.]')}.*UNSPECIFIED"):
        convert_fn(pb)


@pytest.mark.parametrize(
    ("convert_fn", "pb", "field"),
    [
        (convert.run_from_proto, _run_pb(execution=None), "Run.execution"),
        (convert.run_from_proto, _run_pb(create_time=None), "Run.create_time"),
        (convert.thread_from_proto, _thread_pb(update_time=None), "Thread.update_time"),
        (
            convert.pending_action_from_proto,
            _action_pb(create_time=None),
            "PendingAction.create_time",
        ),
        (
            convert.lifecycle_message_from_proto,
            threads_pb2.LifecycleMessage(),
            "LifecycleMessage.message",
        ),
        (convert.run_event_from_proto, runs_pb2.RunEvent(seq=1), "RunEvent.time"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_unset_required_message_is_rejected(
    convert_fn: Callable[[Any], Any], pb: ProtoMessage, field: str
) -> None:
    with pytest.raises(ValueError, match=rf"{field.replace('.', '[.]')} is required"):
        convert_fn(pb)


def test_request_enums_accept_a_call_site_default() -> None:
    assert convert.message_view_from_proto(0, default="context") == "context"
    assert convert.sort_order_from_proto(0, default="asc") == "asc"
    assert convert.sort_order_from_proto(threads_pb2.SORT_ORDER_DESC, default="asc") == "desc"
    with pytest.raises(ValueError, match=r"ListMessagesRequest\.order"):
        convert.sort_order_from_proto(0, field="ListMessagesRequest.order")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match="not a JSON number"):
        convert.value_to_proto(bad)
    with pytest.raises(ValueError, match="not a JSON number"):
        convert.value_to_proto({"a": [1, bad]})
    with pytest.raises(ValueError, match="not a JSON number"):
        convert.value_from_proto(struct_pb2.Value(number_value=bad))
    nested = struct_pb2.Struct()
    nested.fields["a"].list_value.values.add().number_value = bad
    with pytest.raises(ValueError, match=r"\$\.a\[0\]"):
        convert.struct_from_proto(nested)
    tool = parts_pb2.ToolPart(
        tool_call_id="c",
        tool_name="t",
        state=parts_pb2.TOOL_STATE_INPUT_AVAILABLE,
        input=struct_pb2.Value(struct_value=nested),
    )
    with pytest.raises(ValueError, match=r"ToolPart\.input\.a\[0\]"):
        convert.part_from_proto(parts_pb2.MessagePart(tool=tool))
    with pytest.raises(ValueError, match=r"TextPart\.provider_metadata"):
        convert.part_to_proto(TextPart(text="x", provider_metadata={"n": bad}))


@pytest.mark.parametrize(
    "bad",
    [b"bytes", (1, 2), {1, 2}, {1: "int key"}, 2**53, -(2**53), object(), [datetime.now(UTC)]],
    ids=["bytes", "tuple", "set", "int-key", "big-int", "big-negative-int", "object", "datetime"],
)
def test_non_json_values_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="not strict JSON"):
        convert.value_to_proto(bad)


def test_struct_to_proto_requires_an_object() -> None:
    with pytest.raises(ValueError, match="expected a JSON object"):
        convert.struct_to_proto([1, 2])  # type: ignore[arg-type]


def test_kindless_value_is_rejected() -> None:
    value = struct_pb2.Value()
    value.list_value.values.add()
    with pytest.raises(ValueError, match=r"\$\[0\]: google\.protobuf\.Value has no kind"):
        convert.value_from_proto(value)


def test_invalid_timestamp_is_rejected() -> None:
    pb = _thread_pb(create_time=timestamp_pb2.Timestamp(seconds=2**62))
    with pytest.raises(ValueError, match=r"Thread\.create_time"):
        convert.thread_from_proto(pb)


def test_naive_datetime_is_rejected() -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        convert.timestamp_to_proto(datetime(2024, 1, 1))
