from google.protobuf import struct_pb2 as _struct_pb2
from pai.v1 import runs_pb2 as _runs_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run", "pending_actions")
    RUN_FIELD_NUMBER: _ClassVar[int]
    PENDING_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    run: _runs_pb2.Run
    pending_actions: _containers.RepeatedCompositeFieldContainer[_runs_pb2.PendingAction]
    def __init__(self, run: _Optional[_Union[_runs_pb2.Run, _Mapping]] = ..., pending_actions: _Optional[_Iterable[_Union[_runs_pb2.PendingAction, _Mapping]]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("thread_id", "page_size", "page_token")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    page_size: int
    page_token: str
    def __init__(self, thread_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_runs_pb2.Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[_runs_pb2.Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class StreamRunRequest(_message.Message):
    __slots__ = ("run_id", "after_seq")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_seq: int
    def __init__(self, run_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class StreamRunResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: _runs_pb2.RunEvent
    def __init__(self, event: _Optional[_Union[_runs_pb2.RunEvent, _Mapping]] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _runs_pb2.Run
    def __init__(self, run: _Optional[_Union[_runs_pb2.Run, _Mapping]] = ...) -> None: ...

class ClientToolResult(_message.Message):
    __slots__ = ("output", "error_text")
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_TEXT_FIELD_NUMBER: _ClassVar[int]
    output: _struct_pb2.Value
    error_text: str
    def __init__(self, output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., error_text: _Optional[str] = ...) -> None: ...

class ApprovalDecision(_message.Message):
    __slots__ = ("approved", "reason")
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    approved: bool
    reason: str
    def __init__(self, approved: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ResolvePendingActionRequest(_message.Message):
    __slots__ = ("run_id", "action_id", "tool_result", "approval", "data", "request_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    action_id: str
    tool_result: ClientToolResult
    approval: ApprovalDecision
    data: _struct_pb2.Value
    request_id: str
    def __init__(self, run_id: _Optional[str] = ..., action_id: _Optional[str] = ..., tool_result: _Optional[_Union[ClientToolResult, _Mapping]] = ..., approval: _Optional[_Union[ApprovalDecision, _Mapping]] = ..., data: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ResolvePendingActionResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _runs_pb2.Run
    def __init__(self, run: _Optional[_Union[_runs_pb2.Run, _Mapping]] = ...) -> None: ...
