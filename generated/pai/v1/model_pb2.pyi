from google.protobuf import struct_pb2 as _struct_pb2
from pai.v1 import parts_pb2 as _parts_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_SOURCE_UNSPECIFIED: _ClassVar[ToolSource]
    TOOL_SOURCE_BACKEND: _ClassVar[ToolSource]
    TOOL_SOURCE_CLIENT: _ClassVar[ToolSource]
    TOOL_SOURCE_MCP: _ClassVar[ToolSource]
    TOOL_SOURCE_SUBAGENT: _ClassVar[ToolSource]

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CHOICE_MODE_UNSPECIFIED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_AUTO: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NONE: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_REQUIRED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_TOOL: _ClassVar[ToolChoiceMode]
TOOL_SOURCE_UNSPECIFIED: ToolSource
TOOL_SOURCE_BACKEND: ToolSource
TOOL_SOURCE_CLIENT: ToolSource
TOOL_SOURCE_MCP: ToolSource
TOOL_SOURCE_SUBAGENT: ToolSource
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
TOOL_CHOICE_MODE_AUTO: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode
TOOL_CHOICE_MODE_TOOL: ToolChoiceMode

class ModelTextPart(_message.Message):
    __slots__ = ("text", "provider_options")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    text: str
    provider_options: _struct_pb2.Struct
    def __init__(self, text: _Optional[str] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ModelFilePart(_message.Message):
    __slots__ = ("media_type", "data", "filename", "provider_options")
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    media_type: str
    data: str
    filename: str
    provider_options: _struct_pb2.Struct
    def __init__(self, media_type: _Optional[str] = ..., data: _Optional[str] = ..., filename: _Optional[str] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ModelReasoningPart(_message.Message):
    __slots__ = ("text", "provider_options")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    text: str
    provider_options: _struct_pb2.Struct
    def __init__(self, text: _Optional[str] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ModelToolCallPart(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "input", "provider_executed", "provider_options")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_EXECUTED_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    input: _struct_pb2.Value
    provider_executed: bool
    provider_options: _struct_pb2.Struct
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., provider_executed: _Optional[bool] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolResultOutput(_message.Message):
    __slots__ = ("text", "json", "error_text", "error_json", "execution_denied")
    class ExecutionDenied(_message.Message):
        __slots__ = ("reason",)
        REASON_FIELD_NUMBER: _ClassVar[int]
        reason: str
        def __init__(self, reason: _Optional[str] = ...) -> None: ...
    TEXT_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_TEXT_FIELD_NUMBER: _ClassVar[int]
    ERROR_JSON_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_DENIED_FIELD_NUMBER: _ClassVar[int]
    text: str
    json: _struct_pb2.Value
    error_text: str
    error_json: _struct_pb2.Value
    execution_denied: ToolResultOutput.ExecutionDenied
    def __init__(self, text: _Optional[str] = ..., json: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., error_text: _Optional[str] = ..., error_json: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., execution_denied: _Optional[_Union[ToolResultOutput.ExecutionDenied, _Mapping]] = ...) -> None: ...

class ModelToolResultPart(_message.Message):
    __slots__ = ("tool_call_id", "tool_name", "output", "provider_options")
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    tool_call_id: str
    tool_name: str
    output: ToolResultOutput
    provider_options: _struct_pb2.Struct
    def __init__(self, tool_call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., output: _Optional[_Union[ToolResultOutput, _Mapping]] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class SystemModelMessage(_message.Message):
    __slots__ = ("content", "provider_options")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    content: str
    provider_options: _struct_pb2.Struct
    def __init__(self, content: _Optional[str] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class UserContentPart(_message.Message):
    __slots__ = ("text", "file")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    text: ModelTextPart
    file: ModelFilePart
    def __init__(self, text: _Optional[_Union[ModelTextPart, _Mapping]] = ..., file: _Optional[_Union[ModelFilePart, _Mapping]] = ...) -> None: ...

class UserModelMessage(_message.Message):
    __slots__ = ("content", "provider_options")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[UserContentPart]
    provider_options: _struct_pb2.Struct
    def __init__(self, content: _Optional[_Iterable[_Union[UserContentPart, _Mapping]]] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class AssistantContentPart(_message.Message):
    __slots__ = ("text", "file", "reasoning", "tool_call", "tool_result")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    text: ModelTextPart
    file: ModelFilePart
    reasoning: ModelReasoningPart
    tool_call: ModelToolCallPart
    tool_result: ModelToolResultPart
    def __init__(self, text: _Optional[_Union[ModelTextPart, _Mapping]] = ..., file: _Optional[_Union[ModelFilePart, _Mapping]] = ..., reasoning: _Optional[_Union[ModelReasoningPart, _Mapping]] = ..., tool_call: _Optional[_Union[ModelToolCallPart, _Mapping]] = ..., tool_result: _Optional[_Union[ModelToolResultPart, _Mapping]] = ...) -> None: ...

class AssistantModelMessage(_message.Message):
    __slots__ = ("content", "provider_options")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[AssistantContentPart]
    provider_options: _struct_pb2.Struct
    def __init__(self, content: _Optional[_Iterable[_Union[AssistantContentPart, _Mapping]]] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolModelMessage(_message.Message):
    __slots__ = ("content", "provider_options")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[ModelToolResultPart]
    provider_options: _struct_pb2.Struct
    def __init__(self, content: _Optional[_Iterable[_Union[ModelToolResultPart, _Mapping]]] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ModelMessage(_message.Message):
    __slots__ = ("system", "user", "assistant", "tool")
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    system: SystemModelMessage
    user: UserModelMessage
    assistant: AssistantModelMessage
    tool: ToolModelMessage
    def __init__(self, system: _Optional[_Union[SystemModelMessage, _Mapping]] = ..., user: _Optional[_Union[UserModelMessage, _Mapping]] = ..., assistant: _Optional[_Union[AssistantModelMessage, _Mapping]] = ..., tool: _Optional[_Union[ToolModelMessage, _Mapping]] = ...) -> None: ...

class ModelMessageList(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ModelMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ModelMessage, _Mapping]]] = ...) -> None: ...

class Instructions(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[SystemModelMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[SystemModelMessage, _Mapping]]] = ...) -> None: ...

class ModelSettings(_message.Message):
    __slots__ = ("max_output_tokens", "temperature", "top_p", "top_k", "stop_sequences", "seed", "presence_penalty", "frequency_penalty", "max_retries")
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    max_output_tokens: int
    temperature: float
    top_p: float
    top_k: int
    stop_sequences: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    presence_penalty: float
    frequency_penalty: float
    max_retries: int
    def __init__(self, max_output_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., stop_sequences: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., max_retries: _Optional[int] = ...) -> None: ...

class ModelSelection(_message.Message):
    __slots__ = ("model", "model_settings", "provider_options")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    model: str
    model_settings: ModelSettings
    provider_options: _struct_pb2.Struct
    def __init__(self, model: _Optional[str] = ..., model_settings: _Optional[_Union[ModelSettings, _Mapping]] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ToolManifestEntry(_message.Message):
    __slots__ = ("name", "description", "input_schema", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    input_schema: _struct_pb2.Struct
    source: ToolSource
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., source: _Optional[_Union[ToolSource, str]] = ...) -> None: ...

class ToolManifest(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolManifestEntry]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolManifestEntry, _Mapping]]] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ("mode", "tool_name")
    MODE_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    mode: ToolChoiceMode
    tool_name: str
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., tool_name: _Optional[str] = ...) -> None: ...

class ModelStepRequest(_message.Message):
    __slots__ = ("run_id", "thread_id", "step_index", "model", "instructions", "messages", "tools", "provider_tools", "tool_choice", "model_settings", "provider_options")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    MODEL_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    thread_id: str
    step_index: int
    model: str
    instructions: Instructions
    messages: _containers.RepeatedCompositeFieldContainer[ModelMessage]
    tools: _containers.RepeatedCompositeFieldContainer[ToolManifestEntry]
    provider_tools: _struct_pb2.Struct
    tool_choice: ToolChoice
    model_settings: ModelSettings
    provider_options: _struct_pb2.Struct
    def __init__(self, run_id: _Optional[str] = ..., thread_id: _Optional[str] = ..., step_index: _Optional[int] = ..., model: _Optional[str] = ..., instructions: _Optional[_Union[Instructions, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[ModelMessage, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[ToolManifestEntry, _Mapping]]] = ..., provider_tools: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., model_settings: _Optional[_Union[ModelSettings, _Mapping]] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ModelStepPatch(_message.Message):
    __slots__ = ("model", "instructions", "messages", "append_model_messages", "tools", "provider_tools", "tool_choice", "model_settings", "provider_options")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    APPEND_MODEL_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    MODEL_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    model: str
    instructions: Instructions
    messages: ModelMessageList
    append_model_messages: ModelMessageList
    tools: ToolManifest
    provider_tools: _struct_pb2.Struct
    tool_choice: ToolChoice
    model_settings: ModelSettings
    provider_options: _struct_pb2.Struct
    def __init__(self, model: _Optional[str] = ..., instructions: _Optional[_Union[Instructions, _Mapping]] = ..., messages: _Optional[_Union[ModelMessageList, _Mapping]] = ..., append_model_messages: _Optional[_Union[ModelMessageList, _Mapping]] = ..., tools: _Optional[_Union[ToolManifest, _Mapping]] = ..., provider_tools: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., model_settings: _Optional[_Union[ModelSettings, _Mapping]] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ModelCallPatch(_message.Message):
    __slots__ = ("patch", "timeout_ms")
    PATCH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    patch: ModelStepPatch
    timeout_ms: int
    def __init__(self, patch: _Optional[_Union[ModelStepPatch, _Mapping]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class RunPatch(_message.Message):
    __slots__ = ("model", "instructions", "append_model_messages", "tools", "provider_tools", "tool_choice", "max_steps", "model_settings", "provider_options")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    APPEND_MODEL_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    MODEL_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    model: str
    instructions: Instructions
    append_model_messages: ModelMessageList
    tools: ToolManifest
    provider_tools: _struct_pb2.Struct
    tool_choice: ToolChoice
    max_steps: int
    model_settings: ModelSettings
    provider_options: _struct_pb2.Struct
    def __init__(self, model: _Optional[str] = ..., instructions: _Optional[_Union[Instructions, _Mapping]] = ..., append_model_messages: _Optional[_Union[ModelMessageList, _Mapping]] = ..., tools: _Optional[_Union[ToolManifest, _Mapping]] = ..., provider_tools: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., max_steps: _Optional[int] = ..., model_settings: _Optional[_Union[ModelSettings, _Mapping]] = ..., provider_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class AssistantResponse(_message.Message):
    __slots__ = ("parts", "metadata")
    PARTS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    parts: _containers.RepeatedCompositeFieldContainer[_parts_pb2.MessagePart]
    metadata: _struct_pb2.Struct
    def __init__(self, parts: _Optional[_Iterable[_Union[_parts_pb2.MessagePart, _Mapping]]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...
