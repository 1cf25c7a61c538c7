from google.protobuf import struct_pb2 as _struct_pb2
from pai.v1 import model_pb2 as _model_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolResultStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_RESULT_STATUS_UNSPECIFIED: _ClassVar[ToolResultStatus]
    TOOL_RESULT_STATUS_OUTPUT_AVAILABLE: _ClassVar[ToolResultStatus]
    TOOL_RESULT_STATUS_OUTPUT_ERROR: _ClassVar[ToolResultStatus]

class ToolResultSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_RESULT_SOURCE_UNSPECIFIED: _ClassVar[ToolResultSource]
    TOOL_RESULT_SOURCE_EXECUTE: _ClassVar[ToolResultSource]
    TOOL_RESULT_SOURCE_SKIP: _ClassVar[ToolResultSource]
    TOOL_RESULT_SOURCE_RESUME: _ClassVar[ToolResultSource]
    TOOL_RESULT_SOURCE_CLIENT: _ClassVar[ToolResultSource]
    TOOL_RESULT_SOURCE_MANUAL: _ClassVar[ToolResultSource]
    TOOL_RESULT_SOURCE_REJECT: _ClassVar[ToolResultSource]
    TOOL_RESULT_SOURCE_THROW: _ClassVar[ToolResultSource]
    TOOL_RESULT_SOURCE_FAIL: _ClassVar[ToolResultSource]
    TOOL_RESULT_SOURCE_CANCEL: _ClassVar[ToolResultSource]
    TOOL_RESULT_SOURCE_RECOVERY: _ClassVar[ToolResultSource]
TOOL_RESULT_STATUS_UNSPECIFIED: ToolResultStatus
TOOL_RESULT_STATUS_OUTPUT_AVAILABLE: ToolResultStatus
TOOL_RESULT_STATUS_OUTPUT_ERROR: ToolResultStatus
TOOL_RESULT_SOURCE_UNSPECIFIED: ToolResultSource
TOOL_RESULT_SOURCE_EXECUTE: ToolResultSource
TOOL_RESULT_SOURCE_SKIP: ToolResultSource
TOOL_RESULT_SOURCE_RESUME: ToolResultSource
TOOL_RESULT_SOURCE_CLIENT: ToolResultSource
TOOL_RESULT_SOURCE_MANUAL: ToolResultSource
TOOL_RESULT_SOURCE_REJECT: ToolResultSource
TOOL_RESULT_SOURCE_THROW: ToolResultSource
TOOL_RESULT_SOURCE_FAIL: ToolResultSource
TOOL_RESULT_SOURCE_CANCEL: ToolResultSource
TOOL_RESULT_SOURCE_RECOVERY: ToolResultSource

class ToolInfo(_message.Message):
    __slots__ = ("name", "source", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    source: _model_pb2.ToolSource
    description: str
    def __init__(self, name: _Optional[str] = ..., source: _Optional[_Union[_model_pb2.ToolSource, str]] = ..., description: _Optional[str] = ...) -> None: ...

class InitialEntry(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResumeEntry(_message.Message):
    __slots__ = ("name", "resume", "action_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    resume: _struct_pb2.Value
    action_id: str
    def __init__(self, name: _Optional[str] = ..., resume: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., action_id: _Optional[str] = ...) -> None: ...

class ToolExecutionEntry(_message.Message):
    __slots__ = ("initial", "resume")
    INITIAL_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    initial: InitialEntry
    resume: ResumeEntry
    def __init__(self, initial: _Optional[_Union[InitialEntry, _Mapping]] = ..., resume: _Optional[_Union[ResumeEntry, _Mapping]] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("status", "output", "error", "message", "reason", "source")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    status: ToolResultStatus
    output: _struct_pb2.Value
    error: _struct_pb2.Value
    message: str
    reason: str
    source: ToolResultSource
    def __init__(self, status: _Optional[_Union[ToolResultStatus, str]] = ..., output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., error: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., message: _Optional[str] = ..., reason: _Optional[str] = ..., source: _Optional[_Union[ToolResultSource, str]] = ...) -> None: ...
