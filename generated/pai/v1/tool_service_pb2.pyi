from google.protobuf import struct_pb2 as _struct_pb2
from pai.v1 import model_pb2 as _model_pb2
from pai.v1 import runs_pb2 as _runs_pb2
from pai.v1 import tools_pb2 as _tools_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[_model_pb2.ToolManifestEntry]
    def __init__(self, tools: _Optional[_Iterable[_Union[_model_pb2.ToolManifestEntry, _Mapping]]] = ...) -> None: ...

class ExecuteToolRequest(_message.Message):
    __slots__ = ("tool_name", "tool_call_id", "input", "entry", "suspend_history", "run_id", "thread_id")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_HISTORY_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    tool_call_id: str
    input: _struct_pb2.Value
    entry: _tools_pb2.ToolExecutionEntry
    suspend_history: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    run_id: str
    thread_id: str
    def __init__(self, tool_name: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., entry: _Optional[_Union[_tools_pb2.ToolExecutionEntry, _Mapping]] = ..., suspend_history: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ..., run_id: _Optional[str] = ..., thread_id: _Optional[str] = ...) -> None: ...

class ToolFailure(_message.Message):
    __slots__ = ("message", "data")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    message: str
    data: _struct_pb2.Value
    def __init__(self, message: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ToolSuspend(_message.Message):
    __slots__ = ("name", "kind", "request")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: _runs_pb2.PendingActionKind
    request: _struct_pb2.Value
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[_runs_pb2.PendingActionKind, str]] = ..., request: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ExecuteToolResponse(_message.Message):
    __slots__ = ("output", "failure", "suspend")
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_FIELD_NUMBER: _ClassVar[int]
    output: _struct_pb2.Value
    failure: ToolFailure
    suspend: ToolSuspend
    def __init__(self, output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., failure: _Optional[_Union[ToolFailure, _Mapping]] = ..., suspend: _Optional[_Union[ToolSuspend, _Mapping]] = ...) -> None: ...
