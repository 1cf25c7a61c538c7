"""Model messages: ``pai.v1.ModelMessage`` and its content parts.

Also the list helpers the model-side converters share (:func:`convert_each`,
:func:`expect_list`) and the instructions converters: instructions given as a
``str`` are sent as one system message (``""`` as none), exactly as
:func:`pai_grpc.lifecycle.instructions_of` reads them, and come back as a list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from pai.v1 import model_pb2
from pai_grpc.convert._json import (
    EnumMap,
    optional_struct_from_proto,
    optional_struct_to_proto,
    optional_value_from_proto,
    optional_value_to_proto,
    require_oneof,
    unknown_oneof,
    value_from_proto,
    value_to_proto,
)
from pai_grpc.domain import (
    AssistantContent,
    AssistantModelMessage,
    ErrorJsonOutput,
    ErrorTextOutput,
    ExecutionDeniedOutput,
    JsonOutput,
    ModelFilePart,
    ModelMessage,
    ModelReasoningPart,
    ModelTextPart,
    ModelToolCallPart,
    ModelToolResultPart,
    SystemModelMessage,
    TextOutput,
    ToolModelMessage,
    ToolResultOutput,
    ToolSourceName,
    UserContent,
    UserModelMessage,
)
from pai_grpc.lifecycle.internal import instructions_of

TOOL_SOURCES: EnumMap[ToolSourceName, model_pb2.ToolSource] = EnumMap(
    "ToolSource",
    {
        "backend": model_pb2.TOOL_SOURCE_BACKEND,
        "client": model_pb2.TOOL_SOURCE_CLIENT,
        "mcp": model_pb2.TOOL_SOURCE_MCP,
        "subagent": model_pb2.TOOL_SOURCE_SUBAGENT,
    },
)


S = TypeVar("S")
T = TypeVar("T")


def convert_each(path: str, items: Iterable[S], convert: Callable[[S], T]) -> list[T]:
    """Convert every item; a ``ValueError`` is re-raised prefixed with ``path[i]``.

    Raises:
        ValueError: ``convert`` raised it for item ``i``; the message starts
            with ``path[i]: ``.
    """
    out: list[T] = []
    for i, item in enumerate(items):
        try:
            out.append(convert(item))
        except ValueError as exc:
            raise ValueError(f"{path}[{i}]: {exc}") from exc
    return out


def expect_list(value: Any, path: str) -> list[Any]:
    """``value`` as a list (a tuple is accepted); anything else is a ``ValueError`` at ``path``."""
    if not isinstance(value, list | tuple):
        raise ValueError(f"{path}: expected a list, got {type(value).__name__}")
    return list(value)


# ------------------------------------------------------------------------ enums


def tool_source_to_proto(value: ToolSourceName) -> model_pb2.ToolSource:
    """Map a domain tool source to the proto enum."""
    return TOOL_SOURCES.to_proto(value)


def tool_source_from_proto(value: int, *, field: str = "ToolSource") -> ToolSourceName:
    """Map a proto tool source.

    Raises:
        ValueError: The source is UNSPECIFIED or unknown.
    """
    return TOOL_SOURCES.from_proto(value, field)


# ----------------------------------------------------------------- model parts


def _text_to_proto(part: ModelTextPart) -> model_pb2.ModelTextPart:
    return model_pb2.ModelTextPart(
        text=part.text,
        provider_options=optional_struct_to_proto(
            part.provider_options, path="ModelTextPart.provider_options"
        ),
    )


def _text_from_proto(pb: model_pb2.ModelTextPart) -> ModelTextPart:
    return ModelTextPart(
        text=pb.text, provider_options=optional_struct_from_proto(pb, "provider_options")
    )


def _file_to_proto(part: ModelFilePart) -> model_pb2.ModelFilePart:
    return model_pb2.ModelFilePart(
        media_type=part.media_type,
        data=part.data,
        filename=part.filename,
        provider_options=optional_struct_to_proto(
            part.provider_options, path="ModelFilePart.provider_options"
        ),
    )


def _file_from_proto(pb: model_pb2.ModelFilePart) -> ModelFilePart:
    return ModelFilePart(
        media_type=pb.media_type,
        data=pb.data,
        filename=pb.filename if pb.HasField("filename") else None,
        provider_options=optional_struct_from_proto(pb, "provider_options"),
    )


def _reasoning_to_proto(part: ModelReasoningPart) -> model_pb2.ModelReasoningPart:
    return model_pb2.ModelReasoningPart(
        text=part.text,
        provider_options=optional_struct_to_proto(
            part.provider_options, path="ModelReasoningPart.provider_options"
        ),
    )


def _reasoning_from_proto(pb: model_pb2.ModelReasoningPart) -> ModelReasoningPart:
    return ModelReasoningPart(
        text=pb.text, provider_options=optional_struct_from_proto(pb, "provider_options")
    )


def _tool_call_to_proto(part: ModelToolCallPart) -> model_pb2.ModelToolCallPart:
    return model_pb2.ModelToolCallPart(
        tool_call_id=part.tool_call_id,
        tool_name=part.tool_name,
        input=optional_value_to_proto(part.input, path="ModelToolCallPart.input"),
        provider_executed=part.provider_executed,
        provider_options=optional_struct_to_proto(
            part.provider_options, path="ModelToolCallPart.provider_options"
        ),
    )


def _tool_call_from_proto(pb: model_pb2.ModelToolCallPart) -> ModelToolCallPart:
    return ModelToolCallPart(
        tool_call_id=pb.tool_call_id,
        tool_name=pb.tool_name,
        input=optional_value_from_proto(pb, "input"),
        provider_executed=pb.provider_executed,
        provider_options=optional_struct_from_proto(pb, "provider_options"),
    )


def tool_result_output_to_proto(output: ToolResultOutput) -> model_pb2.ToolResultOutput:
    """Convert a model-visible tool outcome to ``pai.v1.ToolResultOutput``.

    A JSON ``null`` output is sent as an explicit ``null_value`` (the oneof
    arm carries presence).

    Raises:
        ValueError: The output is not a known arm, or its JSON is not strict.
    """
    match output:
        case TextOutput(value=value):
            return model_pb2.ToolResultOutput(text=value)
        case JsonOutput(value=value):
            return model_pb2.ToolResultOutput(
                json=value_to_proto(value, path="ToolResultOutput.json")
            )
        case ErrorTextOutput(value=value):
            return model_pb2.ToolResultOutput(error_text=value)
        case ErrorJsonOutput(value=value):
            return model_pb2.ToolResultOutput(
                error_json=value_to_proto(value, path="ToolResultOutput.error_json")
            )
        case ExecutionDeniedOutput(reason=reason):
            return model_pb2.ToolResultOutput(
                execution_denied=model_pb2.ToolResultOutput.ExecutionDenied(reason=reason)
            )
        case _:
            raise ValueError(f"ToolResultOutput: not a tool result output: {output!r}")


def tool_result_output_from_proto(pb: model_pb2.ToolResultOutput) -> ToolResultOutput:
    """Convert a ``pai.v1.ToolResultOutput`` to the domain.

    Raises:
        ValueError: No arm of ``ToolResultOutput.output`` is set, or its JSON
            is not strict.
    """
    match arm := require_oneof(pb, "output"):
        case "text":
            return TextOutput(value=pb.text)
        case "json":
            return JsonOutput(value=value_from_proto(pb.json, path="ToolResultOutput.json"))
        case "error_text":
            return ErrorTextOutput(value=pb.error_text)
        case "error_json":
            return ErrorJsonOutput(
                value=value_from_proto(pb.error_json, path="ToolResultOutput.error_json")
            )
        case "execution_denied":
            denied = pb.execution_denied
            return ExecutionDeniedOutput(
                reason=denied.reason if denied.HasField("reason") else None
            )
        case _:
            raise unknown_oneof(pb, "output", arm)


def _tool_result_to_proto(part: ModelToolResultPart) -> model_pb2.ModelToolResultPart:
    if not isinstance(part, ModelToolResultPart):
        raise ValueError(f"not a ModelToolResultPart: {part!r}")
    return model_pb2.ModelToolResultPart(
        tool_call_id=part.tool_call_id,
        tool_name=part.tool_name,
        output=tool_result_output_to_proto(part.output),
        provider_options=optional_struct_to_proto(
            part.provider_options, path="ModelToolResultPart.provider_options"
        ),
    )


def _tool_result_from_proto(pb: model_pb2.ModelToolResultPart) -> ModelToolResultPart:
    if not pb.HasField("output"):
        raise ValueError("ModelToolResultPart.output is required but not set")
    return ModelToolResultPart(
        tool_call_id=pb.tool_call_id,
        tool_name=pb.tool_name,
        output=tool_result_output_from_proto(pb.output),
        provider_options=optional_struct_from_proto(pb, "provider_options"),
    )


def _user_part_to_proto(part: UserContent) -> model_pb2.UserContentPart:
    match part:
        case ModelTextPart():
            return model_pb2.UserContentPart(text=_text_to_proto(part))
        case ModelFilePart():
            return model_pb2.UserContentPart(file=_file_to_proto(part))
        case _:
            raise ValueError(f"not user content: {part!r}")


def _user_part_from_proto(pb: model_pb2.UserContentPart) -> UserContent:
    match arm := require_oneof(pb, "part"):
        case "text":
            return _text_from_proto(pb.text)
        case "file":
            return _file_from_proto(pb.file)
        case _:
            raise unknown_oneof(pb, "part", arm)


def _assistant_part_to_proto(part: AssistantContent) -> model_pb2.AssistantContentPart:
    match part:
        case ModelTextPart():
            return model_pb2.AssistantContentPart(text=_text_to_proto(part))
        case ModelFilePart():
            return model_pb2.AssistantContentPart(file=_file_to_proto(part))
        case ModelReasoningPart():
            return model_pb2.AssistantContentPart(reasoning=_reasoning_to_proto(part))
        case ModelToolCallPart():
            return model_pb2.AssistantContentPart(tool_call=_tool_call_to_proto(part))
        case ModelToolResultPart():
            return model_pb2.AssistantContentPart(tool_result=_tool_result_to_proto(part))
        case _:
            raise ValueError(f"not assistant content: {part!r}")


def _assistant_part_from_proto(pb: model_pb2.AssistantContentPart) -> AssistantContent:
    match arm := require_oneof(pb, "part"):
        case "text":
            return _text_from_proto(pb.text)
        case "file":
            return _file_from_proto(pb.file)
        case "reasoning":
            return _reasoning_from_proto(pb.reasoning)
        case "tool_call":
            return _tool_call_from_proto(pb.tool_call)
        case "tool_result":
            return _tool_result_from_proto(pb.tool_result)
        case _:
            raise unknown_oneof(pb, "part", arm)


# -------------------------------------------------------------- model messages


def _system_to_proto(message: SystemModelMessage) -> model_pb2.SystemModelMessage:
    if not isinstance(message, SystemModelMessage):
        raise ValueError(f"not a SystemModelMessage: {message!r}")
    return model_pb2.SystemModelMessage(
        content=message.content,
        provider_options=optional_struct_to_proto(
            message.provider_options, path="SystemModelMessage.provider_options"
        ),
    )


def _system_from_proto(pb: model_pb2.SystemModelMessage) -> SystemModelMessage:
    return SystemModelMessage(
        content=pb.content, provider_options=optional_struct_from_proto(pb, "provider_options")
    )


def model_message_to_proto(message: ModelMessage) -> model_pb2.ModelMessage:
    """Convert a domain model message to ``pai.v1.ModelMessage``.

    Args:
        message: Any arm of the :data:`~pai_grpc.domain.ModelMessage` union.

    Returns:
        The proto message with the matching oneof arm set.

    Raises:
        ValueError: The value is not a model message (or holds foreign
            content), or a JSON field is not strict JSON.
    """
    match message:
        case SystemModelMessage():
            return model_pb2.ModelMessage(system=_system_to_proto(message))
        case UserModelMessage(content=content, provider_options=options):
            return model_pb2.ModelMessage(
                user=model_pb2.UserModelMessage(
                    content=convert_each("UserModelMessage.content", content, _user_part_to_proto),
                    provider_options=optional_struct_to_proto(
                        options, path="UserModelMessage.provider_options"
                    ),
                )
            )
        case AssistantModelMessage(content=content, provider_options=options):
            return model_pb2.ModelMessage(
                assistant=model_pb2.AssistantModelMessage(
                    content=convert_each(
                        "AssistantModelMessage.content", content, _assistant_part_to_proto
                    ),
                    provider_options=optional_struct_to_proto(
                        options, path="AssistantModelMessage.provider_options"
                    ),
                )
            )
        case ToolModelMessage(content=content, provider_options=options):
            return model_pb2.ModelMessage(
                tool=model_pb2.ToolModelMessage(
                    content=convert_each(
                        "ToolModelMessage.content", content, _tool_result_to_proto
                    ),
                    provider_options=optional_struct_to_proto(
                        options, path="ToolModelMessage.provider_options"
                    ),
                )
            )
        case _:
            raise ValueError(f"ModelMessage: not a model message: {message!r}")


def model_message_from_proto(pb: model_pb2.ModelMessage) -> ModelMessage:
    """Convert a ``pai.v1.ModelMessage`` to its domain message.

    Raises:
        ValueError: No arm of ``ModelMessage.message`` (or of a content part)
            is set, a tool result has no output, or JSON is not strict.
            Errors inside content name the part index.
    """
    match arm := require_oneof(pb, "message"):
        case "system":
            return _system_from_proto(pb.system)
        case "user":
            user = pb.user
            return UserModelMessage(
                content=convert_each(
                    "UserModelMessage.content", user.content, _user_part_from_proto
                ),
                provider_options=optional_struct_from_proto(user, "provider_options"),
            )
        case "assistant":
            assistant = pb.assistant
            return AssistantModelMessage(
                content=convert_each(
                    "AssistantModelMessage.content", assistant.content, _assistant_part_from_proto
                ),
                provider_options=optional_struct_from_proto(assistant, "provider_options"),
            )
        case "tool":
            tool = pb.tool
            return ToolModelMessage(
                content=convert_each(
                    "ToolModelMessage.content", tool.content, _tool_result_from_proto
                ),
                provider_options=optional_struct_from_proto(tool, "provider_options"),
            )
        case _:
            raise unknown_oneof(pb, "message", arm)


def model_messages_to_proto(
    messages: Sequence[ModelMessage], *, path: str = "messages"
) -> list[model_pb2.ModelMessage]:
    """Convert a list of model messages (errors name ``path[i]``).

    Raises:
        ValueError: ``messages`` is not a list, or as :func:`model_message_to_proto`.
    """
    return convert_each(path, expect_list(messages, path), model_message_to_proto)


def model_messages_from_proto(
    pbs: Iterable[model_pb2.ModelMessage], *, path: str = "messages"
) -> list[ModelMessage]:
    """Convert repeated ``pai.v1.ModelMessage`` (errors name ``path[i]``).

    Raises:
        ValueError: As :func:`model_message_from_proto`, prefixed with ``path[i]``.
    """
    return convert_each(path, pbs, model_message_from_proto)


def message_list_to_proto(value: Any, path: str) -> model_pb2.ModelMessageList:
    """Model messages wrapped in a ``ModelMessageList`` (a patch field with presence)."""
    return model_pb2.ModelMessageList(messages=model_messages_to_proto(value, path=path))


def message_list_from_proto(pb: model_pb2.ModelMessageList, path: str) -> list[ModelMessage]:
    """The model messages of a ``ModelMessageList``."""
    return model_messages_from_proto(pb.messages, path=path)


def instructions_to_proto(value: Any, path: str) -> model_pb2.Instructions:
    """Instructions (a ``str`` or system messages) as ``pai.v1.Instructions``."""
    if not isinstance(value, str):
        value = expect_list(value, path)
    return model_pb2.Instructions(
        messages=convert_each(path, instructions_of(value), _system_to_proto)
    )


def instructions_from_proto(pb: model_pb2.Instructions) -> list[SystemModelMessage]:
    """Instructions as the list of system messages they carry."""
    return [_system_from_proto(message) for message in pb.messages]
