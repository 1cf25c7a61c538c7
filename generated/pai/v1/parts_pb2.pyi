from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PartState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PART_STATE_UNSPECIFIED: _ClassVar[PartState]
    PART_STATE_STREAMING: _ClassVar[PartState]
    PART_STATE_DONE: _ClassVar[PartState]

class ToolState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_STATE_UNSPECIFIED: _ClassVar[ToolState]
    TOOL_STATE_INPUT_STREAMING: _ClassVar[ToolState]
    TOOL_STATE_INPUT_AVAILABLE: _ClassVar[ToolState]
    TOOL_STATE_APPROVAL_REQUESTED: _ClassVar[ToolState]
    TOOL_STATE_APPROVAL_RESPONDED: _ClassVar[ToolState]
    TOOL_STATE_OUTPUT_AVAILABLE: _ClassVar[ToolState]
    TOOL_STATE_OUTPUT_ERROR: _ClassVar[ToolState]
    TOOL_STATE_OUTPUT_DENIED: _ClassVar[ToolState]
PART_STATE_UNSPECIFIED: PartState
PART_STATE_STREAMING: PartState
PART_STATE_DONE: PartState
TOOL_STATE_UNSPECIFIED: ToolState
TOOL_STATE_INPUT_STREAMING: ToolState
TOOL_STATE_INPUT_AVAILABLE: ToolState
TOOL_STATE_APPROVAL_REQUESTED: ToolState
TOOL_STATE_APPROVAL_RESPONDED: ToolState
TOOL_STATE_OUTPUT_AVAILABLE: ToolState
TOOL_STATE_OUTPUT_ERROR: ToolState
TOOL_STATE_OUTPUT_DENIED: ToolState

class TextPart(_message.Message):
    __slots__ = ("text", "state", "provider_metadata")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    text: str
    state: PartState
    provider_metadata: _struct_pb2.Struct
    def __init__(self, text: _Optional[str] = ..., state: _Optional[_Union[PartState, str]] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ReasoningPart(_message.Message):
    __slots__ = ("text", "state", "provider_metadata")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    text: str
    state: PartState
    provider_metadata: _struct_pb2.Struct
    def __init__(self, text: _Optional[str] = ..., state: _Optional[_Union[PartState, str]] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolApproval(_message.Message):
    __slots__ = ("id", "approved", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    approved: bool
    reason: str
    def __init__(self, id: _Optional[str] = ..., approved: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ToolPart(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "state", "title", "provider_executed", "input", "output", "error_text", "preliminary", "approval", "call_provider_metadata", "result_provider_metadata")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_EXECUTED_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_TEXT_FIELD_NUMBER: _ClassVar[int]
    PRELIMINARY_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    CALL_PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    RESULT_PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    state: ToolState
    title: str
    provider_executed: bool
    input: _struct_pb2.Value
    output: _struct_pb2.Value
    error_text: str
    preliminary: bool
    approval: ToolApproval
    call_provider_metadata: _struct_pb2.Struct
    result_provider_metadata: _struct_pb2.Struct
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., state: _Optional[_Union[ToolState, str]] = ..., title: _Optional[str] = ..., provider_executed: _Optional[bool] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., error_text: _Optional[str] = ..., preliminary: _Optional[bool] = ..., approval: _Optional[_Union[ToolApproval, _Mapping]] = ..., call_provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., result_provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SourceUrlPart(_message.Message):
    __slots__ = ("source_id", "url", "title", "provider_metadata")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    url: str
    title: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, source_id: _Optional[str] = ..., url: _Optional[str] = ..., title: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SourceDocumentPart(_message.Message):
    __slots__ = ("source_id", "media_type", "title", "filename", "provider_metadata")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    media_type: str
    title: str
    filename: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, source_id: _Optional[str] = ..., media_type: _Optional[str] = ..., title: _Optional[str] = ..., filename: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class FilePart(_message.Message):
    __slots__ = ("media_type", "filename", "url", "provider_metadata")
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    media_type: str
    filename: str
    url: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, media_type: _Optional[str] = ..., filename: _Optional[str] = ..., url: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class StepStartPart(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DataPart(_message.Message):
    __slots__ = ("name", "id", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    id: str
    data: _struct_pb2.Value
    def __init__(self, name: _Optional[str] = ..., id: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class MessagePart(_message.Message):
    __slots__ = ("text", "reasoning", "tool", "source_url", "source_document", "file", "step_start", "data")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_URL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    STEP_START_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    text: TextPart
    reasoning: ReasoningPart
    tool: ToolPart
    source_url: SourceUrlPart
    source_document: SourceDocumentPart
    file: FilePart
    step_start: StepStartPart
    data: DataPart
    def __init__(self, text: _Optional[_Union[TextPart, _Mapping]] = ..., reasoning: _Optional[_Union[ReasoningPart, _Mapping]] = ..., tool: _Optional[_Union[ToolPart, _Mapping]] = ..., source_url: _Optional[_Union[SourceUrlPart, _Mapping]] = ..., source_document: _Optional[_Union[SourceDocumentPart, _Mapping]] = ..., file: _Optional[_Union[FilePart, _Mapping]] = ..., step_start: _Optional[_Union[StepStartPart, _Mapping]] = ..., data: _Optional[_Union[DataPart, _Mapping]] = ...) -> None: ...
