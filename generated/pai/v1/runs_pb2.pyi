import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from pai.v1 import chunks_pb2 as _chunks_pb2
from pai.v1 import threads_pb2 as _threads_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_QUEUED: _ClassVar[RunStatus]
    RUN_STATUS_RUNNING: _ClassVar[RunStatus]
    RUN_STATUS_WAITING: _ClassVar[RunStatus]
    RUN_STATUS_COMPLETED: _ClassVar[RunStatus]
    RUN_STATUS_FAILED: _ClassVar[RunStatus]
    RUN_STATUS_CANCELLED: _ClassVar[RunStatus]

class RunOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_OUTCOME_UNSPECIFIED: _ClassVar[RunOutcome]
    RUN_OUTCOME_COMPLETED: _ClassVar[RunOutcome]
    RUN_OUTCOME_BLOCKED: _ClassVar[RunOutcome]
    RUN_OUTCOME_FAILED: _ClassVar[RunOutcome]
    RUN_OUTCOME_CANCELLED: _ClassVar[RunOutcome]

class RunInitiator(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_INITIATOR_UNSPECIFIED: _ClassVar[RunInitiator]
    RUN_INITIATOR_SEND: _ClassVar[RunInitiator]
    RUN_INITIATOR_TRIGGER: _ClassVar[RunInitiator]
    RUN_INITIATOR_REGENERATE: _ClassVar[RunInitiator]

class RunOperation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_OPERATION_UNSPECIFIED: _ClassVar[RunOperation]
    RUN_OPERATION_SEND: _ClassVar[RunOperation]
    RUN_OPERATION_TRIGGER: _ClassVar[RunOperation]
    RUN_OPERATION_REGENERATE: _ClassVar[RunOperation]
    RUN_OPERATION_RESUME: _ClassVar[RunOperation]

class PendingActionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PENDING_ACTION_KIND_UNSPECIFIED: _ClassVar[PendingActionKind]
    PENDING_ACTION_KIND_CLIENT_TOOL: _ClassVar[PendingActionKind]
    PENDING_ACTION_KIND_APPROVAL: _ClassVar[PendingActionKind]
    PENDING_ACTION_KIND_DATA: _ClassVar[PendingActionKind]

class PendingActionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PENDING_ACTION_STATUS_UNSPECIFIED: _ClassVar[PendingActionStatus]
    PENDING_ACTION_STATUS_OPEN: _ClassVar[PendingActionStatus]
    PENDING_ACTION_STATUS_RESOLVED: _ClassVar[PendingActionStatus]
    PENDING_ACTION_STATUS_CANCELLED: _ClassVar[PendingActionStatus]
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_QUEUED: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_WAITING: RunStatus
RUN_STATUS_COMPLETED: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_CANCELLED: RunStatus
RUN_OUTCOME_UNSPECIFIED: RunOutcome
RUN_OUTCOME_COMPLETED: RunOutcome
RUN_OUTCOME_BLOCKED: RunOutcome
RUN_OUTCOME_FAILED: RunOutcome
RUN_OUTCOME_CANCELLED: RunOutcome
RUN_INITIATOR_UNSPECIFIED: RunInitiator
RUN_INITIATOR_SEND: RunInitiator
RUN_INITIATOR_TRIGGER: RunInitiator
RUN_INITIATOR_REGENERATE: RunInitiator
RUN_OPERATION_UNSPECIFIED: RunOperation
RUN_OPERATION_SEND: RunOperation
RUN_OPERATION_TRIGGER: RunOperation
RUN_OPERATION_REGENERATE: RunOperation
RUN_OPERATION_RESUME: RunOperation
PENDING_ACTION_KIND_UNSPECIFIED: PendingActionKind
PENDING_ACTION_KIND_CLIENT_TOOL: PendingActionKind
PENDING_ACTION_KIND_APPROVAL: PendingActionKind
PENDING_ACTION_KIND_DATA: PendingActionKind
PENDING_ACTION_STATUS_UNSPECIFIED: PendingActionStatus
PENDING_ACTION_STATUS_OPEN: PendingActionStatus
PENDING_ACTION_STATUS_RESOLVED: PendingActionStatus
PENDING_ACTION_STATUS_CANCELLED: PendingActionStatus

class RunExecution(_message.Message):
    __slots__ = ("operation", "start_time")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    operation: RunOperation
    start_time: _timestamp_pb2.Timestamp
    def __init__(self, operation: _Optional[_Union[RunOperation, str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunError(_message.Message):
    __slots__ = ("reason", "message")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    message: str
    def __init__(self, reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class HookFailure(_message.Message):
    __slots__ = ("plugin", "phase", "reason", "count")
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    plugin: str
    phase: str
    reason: str
    count: int
    def __init__(self, plugin: _Optional[str] = ..., phase: _Optional[str] = ..., reason: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("id", "thread_id", "status", "outcome", "reason", "initiator", "start_time", "execution", "metadata", "usage", "step_count", "attempts", "error", "hook_failures", "last_seq", "create_time", "update_time", "end_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    INITIATOR_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HOOK_FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    thread_id: str
    status: RunStatus
    outcome: RunOutcome
    reason: str
    initiator: RunInitiator
    start_time: _timestamp_pb2.Timestamp
    execution: RunExecution
    metadata: _struct_pb2.Struct
    usage: _chunks_pb2.Usage
    step_count: int
    attempts: int
    error: RunError
    hook_failures: _containers.RepeatedCompositeFieldContainer[HookFailure]
    last_seq: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., thread_id: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., outcome: _Optional[_Union[RunOutcome, str]] = ..., reason: _Optional[str] = ..., initiator: _Optional[_Union[RunInitiator, str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., execution: _Optional[_Union[RunExecution, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., usage: _Optional[_Union[_chunks_pb2.Usage, _Mapping]] = ..., step_count: _Optional[int] = ..., attempts: _Optional[int] = ..., error: _Optional[_Union[RunError, _Mapping]] = ..., hook_failures: _Optional[_Iterable[_Union[HookFailure, _Mapping]]] = ..., last_seq: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunHandle(_message.Message):
    __slots__ = ("run_id", "thread_id", "status", "message_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    thread_id: str
    status: RunStatus
    message_id: str
    def __init__(self, run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., message_id: _Optional[str] = ...) -> None: ...

class PendingAction(_message.Message):
    __slots__ = ("id", "run_id", "thread_id", "kind", "status", "tool_call_id", "tool_name", "input", "request", "create_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    thread_id: str
    kind: PendingActionKind
    status: PendingActionStatus
    tool_call_id: str
    tool_name: str
    input: _struct_pb2.Value
    request: _struct_pb2.Value
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., kind: _Optional[_Union[PendingActionKind, str]] = ..., status: _Optional[_Union[PendingActionStatus, str]] = ..., tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., request: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunStatusEvent(_message.Message):
    __slots__ = ("status", "outcome", "reason", "error")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    status: RunStatus
    outcome: RunOutcome
    reason: str
    error: RunError
    def __init__(self, status: _Optional[_Union[RunStatus, str]] = ..., outcome: _Optional[_Union[RunOutcome, str]] = ..., reason: _Optional[str] = ..., error: _Optional[_Union[RunError, _Mapping]] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("seq", "time", "chunk", "status", "message", "pending_action", "compacted", "hook_call")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PENDING_ACTION_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    HOOK_CALL_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time: _timestamp_pb2.Timestamp
    chunk: _chunks_pb2.StepStreamChunk
    status: RunStatusEvent
    message: _threads_pb2.Message
    pending_action: PendingAction
    compacted: CompactedEvents
    hook_call: HookCallEvent
    def __init__(self, seq: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., chunk: _Optional[_Union[_chunks_pb2.StepStreamChunk, _Mapping]] = ..., status: _Optional[_Union[RunStatusEvent, _Mapping]] = ..., message: _Optional[_Union[_threads_pb2.Message, _Mapping]] = ..., pending_action: _Optional[_Union[PendingAction, _Mapping]] = ..., compacted: _Optional[_Union[CompactedEvents, _Mapping]] = ..., hook_call: _Optional[_Union[HookCallEvent, _Mapping]] = ...) -> None: ...

class HookCallEvent(_message.Message):
    __slots__ = ("phase", "hook", "outcome", "decision", "duration_ms", "step", "reason")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    HOOK_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    phase: str
    hook: str
    outcome: str
    decision: str
    duration_ms: float
    step: int
    reason: str
    def __init__(self, phase: _Optional[str] = ..., hook: _Optional[str] = ..., outcome: _Optional[str] = ..., decision: _Optional[str] = ..., duration_ms: _Optional[float] = ..., step: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class CompactedEvents(_message.Message):
    __slots__ = ("first_seq", "last_seq", "removed_events")
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    REMOVED_EVENTS_FIELD_NUMBER: _ClassVar[int]
    first_seq: int
    last_seq: int
    removed_events: int
    def __init__(self, first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ..., removed_events: _Optional[int] = ...) -> None: ...
