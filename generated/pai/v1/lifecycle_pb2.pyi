import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from pai.v1 import model_pb2 as _model_pb2
from pai.v1 import runs_pb2 as _runs_pb2
from pai.v1 import threads_pb2 as _threads_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LifecyclePhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIFECYCLE_PHASE_UNSPECIFIED: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_PREPARE_RUN: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_RESOLVE_MODEL_CONTEXT: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_PREPARE_HISTORY_REWRITE: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_HISTORY_REWRITTEN: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_PREPARE_MODEL_STEP: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_AROUND_MODEL_CALL: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_TRANSFORM_STEP_STREAM: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_BEFORE_TOOL_CALL: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_AFTER_TOOL_RESULT: _ClassVar[LifecyclePhase]
    LIFECYCLE_PHASE_AFTER_STEP: _ClassVar[LifecyclePhase]
LIFECYCLE_PHASE_UNSPECIFIED: LifecyclePhase
LIFECYCLE_PHASE_PREPARE_RUN: LifecyclePhase
LIFECYCLE_PHASE_RESOLVE_MODEL_CONTEXT: LifecyclePhase
LIFECYCLE_PHASE_PREPARE_HISTORY_REWRITE: LifecyclePhase
LIFECYCLE_PHASE_HISTORY_REWRITTEN: LifecyclePhase
LIFECYCLE_PHASE_PREPARE_MODEL_STEP: LifecyclePhase
LIFECYCLE_PHASE_AROUND_MODEL_CALL: LifecyclePhase
LIFECYCLE_PHASE_TRANSFORM_STEP_STREAM: LifecyclePhase
LIFECYCLE_PHASE_BEFORE_TOOL_CALL: LifecyclePhase
LIFECYCLE_PHASE_AFTER_TOOL_RESULT: LifecyclePhase
LIFECYCLE_PHASE_AFTER_STEP: LifecyclePhase

class LifecycleRunInfo(_message.Message):
    __slots__ = ("run_id", "thread_id", "initiator", "start_time", "execution")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    INITIATOR_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    thread_id: str
    initiator: _runs_pb2.RunInitiator
    start_time: _timestamp_pb2.Timestamp
    execution: _runs_pb2.RunExecution
    def __init__(self, run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., initiator: _Optional[_Union[_runs_pb2.RunInitiator, str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., execution: _Optional[_Union[_runs_pb2.RunExecution, _Mapping]] = ...) -> None: ...

class LifecycleStepInfo(_message.Message):
    __slots__ = ("step_id", "index")
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    step_id: str
    index: int
    def __init__(self, step_id: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class HookContext(_message.Message):
    __slots__ = ("capability_token", "host_target", "run", "step", "agent", "thread_id", "runtime_context")
    CAPABILITY_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HOST_TARGET_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    capability_token: str
    host_target: str
    run: LifecycleRunInfo
    step: LifecycleStepInfo
    agent: str
    thread_id: str
    runtime_context: _struct_pb2.Struct
    def __init__(self, capability_token: _Optional[str] = ..., host_target: _Optional[str] = ..., run: _Optional[_Union[LifecycleRunInfo, _Mapping]] = ..., step: _Optional[_Union[LifecycleStepInfo, _Mapping]] = ..., agent: _Optional[str] = ..., thread_id: _Optional[str] = ..., runtime_context: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ContinueDecision(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RespondDecision(_message.Message):
    __slots__ = ("response", "outcome", "reason")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    response: _model_pb2.AssistantResponse
    outcome: _runs_pb2.RunOutcome
    reason: str
    def __init__(self, response: _Optional[_Union[_model_pb2.AssistantResponse, _Mapping]] = ..., outcome: _Optional[_Union[_runs_pb2.RunOutcome, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class CompleteDecision(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class FailDecision(_message.Message):
    __slots__ = ("reason", "message")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    message: str
    def __init__(self, reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class BlockDecision(_message.Message):
    __slots__ = ("reason", "response")
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    response: _model_pb2.AssistantResponse
    def __init__(self, reason: _Optional[str] = ..., response: _Optional[_Union[_model_pb2.AssistantResponse, _Mapping]] = ...) -> None: ...

class RegenerateRewrite(_message.Message):
    __slots__ = ("target_message_id", "retained_message_ids", "removed_message_ids")
    TARGET_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    RETAINED_MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    target_message_id: str
    retained_message_ids: _containers.RepeatedScalarFieldContainer[str]
    removed_message_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, target_message_id: _Optional[str] = ..., retained_message_ids: _Optional[_Iterable[str]] = ..., removed_message_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class VisibilityChange(_message.Message):
    __slots__ = ("message_id", "before", "after")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    before: _threads_pb2.MessageVisibility
    after: _threads_pb2.MessageVisibility
    def __init__(self, message_id: _Optional[str] = ..., before: _Optional[_Union[_threads_pb2.MessageVisibility, _Mapping]] = ..., after: _Optional[_Union[_threads_pb2.MessageVisibility, _Mapping]] = ...) -> None: ...

class VisibilityRewrite(_message.Message):
    __slots__ = ("changes",)
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[VisibilityChange]
    def __init__(self, changes: _Optional[_Iterable[_Union[VisibilityChange, _Mapping]]] = ...) -> None: ...

class HistoryRewrite(_message.Message):
    __slots__ = ("regenerate", "visibility", "before_version", "after_version")
    REGENERATE_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_FIELD_NUMBER: _ClassVar[int]
    BEFORE_VERSION_FIELD_NUMBER: _ClassVar[int]
    AFTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    regenerate: RegenerateRewrite
    visibility: VisibilityRewrite
    before_version: int
    after_version: int
    def __init__(self, regenerate: _Optional[_Union[RegenerateRewrite, _Mapping]] = ..., visibility: _Optional[_Union[VisibilityRewrite, _Mapping]] = ..., before_version: _Optional[int] = ..., after_version: _Optional[int] = ...) -> None: ...

class StepAbort(_message.Message):
    __slots__ = ("reason", "outcome", "message", "replacement")
    REASON_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENT_FIELD_NUMBER: _ClassVar[int]
    reason: str
    outcome: _runs_pb2.RunOutcome
    message: str
    replacement: _model_pb2.AssistantResponse
    def __init__(self, reason: _Optional[str] = ..., outcome: _Optional[_Union[_runs_pb2.RunOutcome, str]] = ..., message: _Optional[str] = ..., replacement: _Optional[_Union[_model_pb2.AssistantResponse, _Mapping]] = ...) -> None: ...
