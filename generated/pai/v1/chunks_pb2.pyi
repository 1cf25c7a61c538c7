from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_CONTENT_FILTER: _ClassVar[FinishReason]
    FINISH_REASON_TOOL_CALLS: _ClassVar[FinishReason]
    FINISH_REASON_ERROR: _ClassVar[FinishReason]
    FINISH_REASON_OTHER: _ClassVar[FinishReason]
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_CONTENT_FILTER: FinishReason
FINISH_REASON_TOOL_CALLS: FinishReason
FINISH_REASON_ERROR: FinishReason
FINISH_REASON_OTHER: FinishReason

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "total_tokens", "reasoning_tokens", "cache_read_tokens", "cache_write_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REASONING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    total_tokens: int
    reasoning_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ..., reasoning_tokens: _Optional[int] = ..., cache_read_tokens: _Optional[int] = ..., cache_write_tokens: _Optional[int] = ...) -> None: ...

class StartChunk(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TextStartChunk(_message.Message):
    __slots__ = ("id", "provider_metadata")
    ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class TextDeltaChunk(_message.Message):
    __slots__ = ("id", "text", "provider_metadata")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class TextEndChunk(_message.Message):
    __slots__ = ("id", "provider_metadata")
    ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ReasoningStartChunk(_message.Message):
    __slots__ = ("id", "provider_metadata")
    ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ReasoningDeltaChunk(_message.Message):
    __slots__ = ("id", "text", "provider_metadata")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ReasoningEndChunk(_message.Message):
    __slots__ = ("id", "provider_metadata")
    ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolInputStartChunk(_message.Message):
    __slots__ = ("id", "tool_name", "provider_executed", "title", "provider_metadata")
    ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_EXECUTED_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    tool_name: str
    provider_executed: bool
    title: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., tool_name: _Optional[str] = ..., provider_executed: _Optional[bool] = ..., title: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolInputDeltaChunk(_message.Message):
    __slots__ = ("id", "delta", "provider_metadata")
    ID_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    delta: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., delta: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolInputEndChunk(_message.Message):
    __slots__ = ("id", "provider_metadata")
    ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolCallChunk(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "input", "provider_executed", "invalid", "error_text", "title", "provider_metadata")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_EXECUTED_FIELD_NUMBER: _ClassVar[int]
    INVALID_FIELD_NUMBER: _ClassVar[int]
    ERROR_TEXT_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    input: _struct_pb2.Value
    provider_executed: bool
    invalid: bool
    error_text: str
    title: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., provider_executed: _Optional[bool] = ..., invalid: _Optional[bool] = ..., error_text: _Optional[str] = ..., title: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolResultChunk(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "input", "output", "provider_executed", "preliminary", "provider_metadata")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_EXECUTED_FIELD_NUMBER: _ClassVar[int]
    PRELIMINARY_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    input: _struct_pb2.Value
    output: _struct_pb2.Value
    provider_executed: bool
    preliminary: bool
    provider_metadata: _struct_pb2.Struct
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., provider_executed: _Optional[bool] = ..., preliminary: _Optional[bool] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolErrorChunk(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "input", "error_text", "provider_executed", "provider_metadata")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_TEXT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_EXECUTED_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    input: _struct_pb2.Value
    error_text: str
    provider_executed: bool
    provider_metadata: _struct_pb2.Struct
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., error_text: _Optional[str] = ..., provider_executed: _Optional[bool] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolApprovalRequestChunk(_message.Message):
    __slots__ = ("approval_id", "tool_call_id")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    tool_call_id: str
    def __init__(self, approval_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class ToolOutputDeniedChunk(_message.Message):
    __slots__ = ("tool_call_id",)
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    def __init__(self, tool_call_id: _Optional[str] = ...) -> None: ...

class UrlSource(_message.Message):
    __slots__ = ("url", "title")
    URL_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    url: str
    title: str
    def __init__(self, url: _Optional[str] = ..., title: _Optional[str] = ...) -> None: ...

class DocumentSource(_message.Message):
    __slots__ = ("media_type", "title", "filename")
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    media_type: str
    title: str
    filename: str
    def __init__(self, media_type: _Optional[str] = ..., title: _Optional[str] = ..., filename: _Optional[str] = ...) -> None: ...

class SourceChunk(_message.Message):
    __slots__ = ("id", "url", "document", "provider_metadata")
    ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    url: UrlSource
    document: DocumentSource
    provider_metadata: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., url: _Optional[_Union[UrlSource, _Mapping]] = ..., document: _Optional[_Union[DocumentSource, _Mapping]] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("media_type", "url", "provider_metadata")
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    media_type: str
    url: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, media_type: _Optional[str] = ..., url: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ReasoningFileChunk(_message.Message):
    __slots__ = ("media_type", "url", "provider_metadata")
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    media_type: str
    url: str
    provider_metadata: _struct_pb2.Struct
    def __init__(self, media_type: _Optional[str] = ..., url: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class DataChunk(_message.Message):
    __slots__ = ("name", "id", "data", "transient")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TRANSIENT_FIELD_NUMBER: _ClassVar[int]
    name: str
    id: str
    data: _struct_pb2.Value
    transient: bool
    def __init__(self, name: _Optional[str] = ..., id: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., transient: _Optional[bool] = ...) -> None: ...

class StartStepChunk(_message.Message):
    __slots__ = ("warnings",)
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class ResponseInfo(_message.Message):
    __slots__ = ("id", "model_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    model_id: str
    def __init__(self, id: _Optional[str] = ..., model_id: _Optional[str] = ...) -> None: ...

class FinishStepChunk(_message.Message):
    __slots__ = ("usage", "finish_reason", "raw_finish_reason", "provider_metadata", "response")
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    RAW_FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    usage: Usage
    finish_reason: FinishReason
    raw_finish_reason: str
    provider_metadata: _struct_pb2.Struct
    response: ResponseInfo
    def __init__(self, usage: _Optional[_Union[Usage, _Mapping]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., raw_finish_reason: _Optional[str] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., response: _Optional[_Union[ResponseInfo, _Mapping]] = ...) -> None: ...

class FinishChunk(_message.Message):
    __slots__ = ("finish_reason", "raw_finish_reason", "total_usage")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    RAW_FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    TOTAL_USAGE_FIELD_NUMBER: _ClassVar[int]
    finish_reason: FinishReason
    raw_finish_reason: str
    total_usage: Usage
    def __init__(self, finish_reason: _Optional[_Union[FinishReason, str]] = ..., raw_finish_reason: _Optional[str] = ..., total_usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class ErrorChunk(_message.Message):
    __slots__ = ("reason", "message")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    message: str
    def __init__(self, reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class AbortChunk(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class StepStreamChunk(_message.Message):
    __slots__ = ("start", "text_start", "text_delta", "text_end", "reasoning_start", "reasoning_delta", "reasoning_end", "tool_input_start", "tool_input_delta", "tool_input_end", "tool_call", "tool_result", "tool_error", "tool_approval_request", "tool_output_denied", "source", "file", "reasoning_file", "data", "start_step", "finish_step", "finish", "error", "abort")
    START_FIELD_NUMBER: _ClassVar[int]
    TEXT_START_FIELD_NUMBER: _ClassVar[int]
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    TEXT_END_FIELD_NUMBER: _ClassVar[int]
    REASONING_START_FIELD_NUMBER: _ClassVar[int]
    REASONING_DELTA_FIELD_NUMBER: _ClassVar[int]
    REASONING_END_FIELD_NUMBER: _ClassVar[int]
    TOOL_INPUT_START_FIELD_NUMBER: _ClassVar[int]
    TOOL_INPUT_DELTA_FIELD_NUMBER: _ClassVar[int]
    TOOL_INPUT_END_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    TOOL_ERROR_FIELD_NUMBER: _ClassVar[int]
    TOOL_APPROVAL_REQUEST_FIELD_NUMBER: _ClassVar[int]
    TOOL_OUTPUT_DENIED_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    REASONING_FILE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    START_STEP_FIELD_NUMBER: _ClassVar[int]
    FINISH_STEP_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    start: StartChunk
    text_start: TextStartChunk
    text_delta: TextDeltaChunk
    text_end: TextEndChunk
    reasoning_start: ReasoningStartChunk
    reasoning_delta: ReasoningDeltaChunk
    reasoning_end: ReasoningEndChunk
    tool_input_start: ToolInputStartChunk
    tool_input_delta: ToolInputDeltaChunk
    tool_input_end: ToolInputEndChunk
    tool_call: ToolCallChunk
    tool_result: ToolResultChunk
    tool_error: ToolErrorChunk
    tool_approval_request: ToolApprovalRequestChunk
    tool_output_denied: ToolOutputDeniedChunk
    source: SourceChunk
    file: FileChunk
    reasoning_file: ReasoningFileChunk
    data: DataChunk
    start_step: StartStepChunk
    finish_step: FinishStepChunk
    finish: FinishChunk
    error: ErrorChunk
    abort: AbortChunk
    def __init__(self, start: _Optional[_Union[StartChunk, _Mapping]] = ..., text_start: _Optional[_Union[TextStartChunk, _Mapping]] = ..., text_delta: _Optional[_Union[TextDeltaChunk, _Mapping]] = ..., text_end: _Optional[_Union[TextEndChunk, _Mapping]] = ..., reasoning_start: _Optional[_Union[ReasoningStartChunk, _Mapping]] = ..., reasoning_delta: _Optional[_Union[ReasoningDeltaChunk, _Mapping]] = ..., reasoning_end: _Optional[_Union[ReasoningEndChunk, _Mapping]] = ..., tool_input_start: _Optional[_Union[ToolInputStartChunk, _Mapping]] = ..., tool_input_delta: _Optional[_Union[ToolInputDeltaChunk, _Mapping]] = ..., tool_input_end: _Optional[_Union[ToolInputEndChunk, _Mapping]] = ..., tool_call: _Optional[_Union[ToolCallChunk, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResultChunk, _Mapping]] = ..., tool_error: _Optional[_Union[ToolErrorChunk, _Mapping]] = ..., tool_approval_request: _Optional[_Union[ToolApprovalRequestChunk, _Mapping]] = ..., tool_output_denied: _Optional[_Union[ToolOutputDeniedChunk, _Mapping]] = ..., source: _Optional[_Union[SourceChunk, _Mapping]] = ..., file: _Optional[_Union[FileChunk, _Mapping]] = ..., reasoning_file: _Optional[_Union[ReasoningFileChunk, _Mapping]] = ..., data: _Optional[_Union[DataChunk, _Mapping]] = ..., start_step: _Optional[_Union[StartStepChunk, _Mapping]] = ..., finish_step: _Optional[_Union[FinishStepChunk, _Mapping]] = ..., finish: _Optional[_Union[FinishChunk, _Mapping]] = ..., error: _Optional[_Union[ErrorChunk, _Mapping]] = ..., abort: _Optional[_Union[AbortChunk, _Mapping]] = ...) -> None: ...
