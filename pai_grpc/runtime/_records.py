"""Storage records <-> domain types (the runtime's side of the storage boundary)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from pai_grpc.convert import chunk_event_to_bytes, run_event_from_bytes, run_event_to_bytes
from pai_grpc.domain import (
    TERMINAL_RUN_STATUSES,
    ChunkEvent,
    CompactedEvent,
    HookFailure,
    LifecycleMessage,
    Message,
    MessagePart,
    PendingAction,
    Run,
    RunError,
    RunEvent,
    RunEventPayload,
    RunExecution,
    StatusEvent,
    StepStreamChunk,
    Thread,
    Usage,
    Visibility,
)
from pai_grpc.streams import EncodedRunEvent
from storage import (
    CompactionMarker,
    EventRecord,
    MessageRecord,
    NewEvent,
    PendingActionRecord,
    RunRecord,
    ThreadRecord,
)

_parts = TypeAdapter(list[MessagePart])
_payload: TypeAdapter[Any] = TypeAdapter(RunEventPayload)


def parts_to_json(parts: Sequence[MessagePart]) -> list[Any]:
    """Message parts as stored (strict JSON, ``None`` fields omitted)."""
    return [p.model_dump(mode="json", exclude_none=True, exclude_defaults=False) for p in parts]


def parts_from_json(raw: list[Any]) -> list[MessagePart]:
    """Stored parts back to domain parts."""
    return _parts.validate_python(raw)


def event_kind(payload: RunEventPayload) -> str:
    """What the log records an event as: its chunk type for chunks, else its arm."""
    if isinstance(payload, ChunkEvent):
        return payload.chunk.type
    return payload.kind


def is_terminal(payload: RunEventPayload) -> bool:
    """Whether an event is its run's terminal status (a stream ends after it)."""
    return isinstance(payload, StatusEvent) and payload.status in TERMINAL_RUN_STATUSES


def encode_event(run_id: str, event: RunEvent) -> tuple[NewEvent, EncodedRunEvent]:
    """An event encoded once: its chunk-log entry and its live form share the body.

    The event is not validated again: the runtime built it from validated
    values (outside input was checked where it entered).
    """
    body = run_event_to_bytes(event)
    payload = event.payload
    return (
        NewEvent(run_id, event.seq, body, event_kind(payload), event.time),
        EncodedRunEvent(event.seq, body, is_terminal(payload)),
    )


def encode_chunk(
    run_id: str, seq: int, time: datetime, chunk: StepStreamChunk
) -> tuple[NewEvent, EncodedRunEvent]:
    """A chunk event encoded once, as :func:`encode_event` encodes it, without building it."""
    body = chunk_event_to_bytes(seq, time, chunk)
    return NewEvent(run_id, seq, body, chunk.type, time), EncodedRunEvent(seq, body)


def encoded_from_record(r: EventRecord) -> EncodedRunEvent:
    """A chunk-log entry as readers receive it.

    A binary entry is passed on as stored (only a status is decoded, to know
    whether it ends the run). An entry logged as JSON before binary events
    (revision 0008) is validated, converted and encoded on every read.
    """
    if r.body is None:
        event = event_from_record(r)
        return EncodedRunEvent(r.seq, run_event_to_bytes(event), is_terminal(event.payload))
    terminal = r.kind == "status" and is_terminal(run_event_from_bytes(r.body).payload)
    return EncodedRunEvent(r.seq, r.body, terminal)


def compaction_marker_body(marker: CompactionMarker) -> bytes:
    """The body of the ``compacted`` event retention stores for a removed stretch."""
    payload = CompactedEvent(
        first_seq=marker.first_seq, last_seq=marker.last_seq, removed_events=marker.removed_events
    )
    return run_event_to_bytes(RunEvent(seq=marker.last_seq, time=marker.time, payload=payload))


def thread_from_record(r: ThreadRecord) -> Thread:
    """The public head of a thread record (private metadata dropped)."""
    return Thread(
        id=r.id,
        agent=r.agent,
        status=r.status,
        version=r.version,
        metadata=r.metadata,
        active_run_id=r.active_run_id,
        message_count=r.message_count,
        created_at=r.created_at,
        updated_at=r.updated_at,
    )


def message_from_record(r: MessageRecord) -> Message:
    """The client-visible message of a record."""
    return Message(
        id=r.id,
        thread_id=r.thread_id,
        role=r.role,
        parts=parts_from_json(r.parts),
        metadata=r.metadata,
        position=r.position,
        run_id=r.run_id,
        step_index=r.step_index,
        created_at=r.created_at,
    )


def lifecycle_message_from_record(r: MessageRecord) -> LifecycleMessage:
    """The trusted message of a record, with visibility and private metadata."""
    return LifecycleMessage(
        message=message_from_record(r),
        visibility=Visibility(transcript=r.visible_transcript, context=r.visible_context),
        private_metadata=r.private_metadata,
    )


def run_from_record(r: RunRecord) -> Run:
    """The public view of a run record (private metadata dropped)."""
    return Run(
        id=r.id,
        thread_id=r.thread_id,
        status=r.status,
        outcome=r.outcome,
        reason=r.reason,
        initiator=r.initiator,
        started_at=r.started_at,
        execution=RunExecution(
            operation=r.operation,
            started_at=r.execution_started_at,
        ),
        metadata=r.metadata,
        usage=Usage.model_validate(r.usage),
        step_count=r.step_count,
        attempts=r.attempts,
        error=RunError.model_validate(r.error) if r.error else None,
        hook_failures=[HookFailure.model_validate(h) for h in r.hook_failures],
        last_seq=r.last_seq,
        created_at=r.created_at,
        updated_at=r.updated_at,
        ended_at=r.ended_at,
    )


def pending_action_from_record(r: PendingActionRecord) -> PendingAction:
    """A pending action of a record."""
    return PendingAction(
        id=r.id,
        run_id=r.run_id,
        thread_id=r.thread_id,
        kind=r.kind,
        status=r.status,
        tool_call_id=r.tool_call_id,
        tool_name=r.tool_name,
        input=r.input,
        request=r.request,
        created_at=r.created_at,
    )


def event_from_record(r: EventRecord) -> RunEvent:
    """A chunk-log entry back to a run event (validated, whichever its encoding)."""
    if r.body is not None:
        return run_event_from_bytes(r.body)
    return RunEvent(seq=r.seq, time=r.created_at, payload=_payload.validate_python(r.event))
