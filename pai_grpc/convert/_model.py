"""Model-side types: model messages, settings, tools, the step request and its patches.

Covers ``pai.v1.ModelMessage`` (and its content parts),
``ModelSettings``, ``ToolManifestEntry``, ``ToolChoice``,
``ModelStepRequest``, the sparse ``ModelStepPatch`` / ``ModelCallPatch`` /
``RunPatch`` and ``AssistantResponse``.

Conventions beyond the package ones:

* Models travel as ``provider:model-id`` strings; every ``*_from_proto``
  that reads one takes ``resolve_model`` (e.g.
  :meth:`pai_grpc.models.ModelRegistry.resolve`). A ``ValueError`` it
  raises (``UnknownModel``) is re-raised with the field path.
* Patches are sparse: a field left :data:`~pai_grpc.lifecycle.UNSET` is an
  absent proto field and an absent proto field reads back as ``UNSET``.
  Every patch field has presence on the wire (``optional`` scalars, wrapper
  messages for lists), so explicit empty values (``tools=[]``,
  ``provider_options={}``, ``ModelSettings()``) survive.
* ``provider_tools=None`` (no provider tools) is sent as an empty
  ``Struct`` and an empty ``Struct`` reads back as ``None``: the runtime
  treats ``None`` and ``{}`` alike. In :class:`ModelStepRequest`, where the
  field is not sparse, ``None`` is unset and ``{}`` round-trips.
* ``ToolChoice`` with ``TOOL_CHOICE_MODE_UNSPECIFIED`` means "no tool choice"
  (``None``, the provider default); this is how a patch clears an inherited
  choice. ``ToolChoice.tool_name`` ``""`` is ``None``.
* Instructions given as a ``str`` are sent as one system message (``""`` as
  none), exactly as :func:`pai_grpc.lifecycle.instructions_of` reads them,
  and come back as a list.
* ``ModelSettings.stop_sequences`` is a plain ``repeated`` field: ``[]`` and
  ``None`` are both sent empty and read back as ``None``.
* ``ModelCallPatch.timeout`` (seconds) is ``timeout_ms`` (0: none, read back
  as ``UNSET``); positive timeouts are rounded to whole milliseconds (at
  least 1). ``timeout=None`` (clear an outer timeout) cannot be told from
  ``UNSET`` on the wire and is sent as 0. ``signal`` cannot cross the wire:
  a patch carrying one is a :class:`ValueError` (strip it first).
* Lists of patches (what :func:`pai_grpc.lifecycle.compose_lifecycle`
  returns) are folded into one with :func:`fold_patches`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from typing import Any, Literal, TypeAlias, TypeVar

from pai.v1 import model_pb2
from pai_grpc.convert._json import (
    EnumMap,
    object_from_proto,
    optional_struct_from_proto,
    optional_struct_to_proto,
    optional_value_from_proto,
    optional_value_to_proto,
    require_oneof,
    struct_to_proto,
    unknown_oneof,
    value_from_proto,
    value_to_proto,
)
from pai_grpc.convert._parts import part_from_proto, part_to_proto
from pai_grpc.domain import (
    AssistantModelMessage,
    ErrorJsonOutput,
    ErrorTextOutput,
    ExecutionDeniedOutput,
    JsonOutput,
    ModelFilePart,
    ModelMessage,
    ModelReasoningPart,
    ModelSettings,
    ModelTextPart,
    ModelToolCallPart,
    ModelToolResultPart,
    SystemModelMessage,
    TextOutput,
    ToolChoice,
    ToolManifestEntry,
    ToolModelMessage,
    ToolResultOutput,
    ToolSourceName,
    UserModelMessage,
)
from pai_grpc.domain._model import AssistantContent, UserContent
from pai_grpc.errors import InvalidArgument
from pai_grpc.lifecycle._decisions import AssistantResponse
from pai_grpc.lifecycle._patches import (
    UNSET,
    ModelCallPatch,
    ModelStepPatch,
    ModelStepRequest,
    RunPatch,
    coerce_patch,
    instructions_of,
)
from pai_grpc.models import LanguageModel

#: Resolves a ``provider:model-id`` string to a model.
ResolveModel: TypeAlias = Callable[[str], LanguageModel]

ToolChoiceMode: TypeAlias = Literal["auto", "none", "required", "tool"]

TOOL_SOURCES: EnumMap[ToolSourceName, model_pb2.ToolSource] = EnumMap(
    "ToolSource",
    {
        "backend": model_pb2.TOOL_SOURCE_BACKEND,
        "client": model_pb2.TOOL_SOURCE_CLIENT,
        "mcp": model_pb2.TOOL_SOURCE_MCP,
        "subagent": model_pb2.TOOL_SOURCE_SUBAGENT,
    },
)

TOOL_CHOICE_MODES: EnumMap[ToolChoiceMode, model_pb2.ToolChoiceMode] = EnumMap(
    "ToolChoiceMode",
    {
        "auto": model_pb2.TOOL_CHOICE_MODE_AUTO,
        "none": model_pb2.TOOL_CHOICE_MODE_NONE,
        "required": model_pb2.TOOL_CHOICE_MODE_REQUIRED,
        "tool": model_pb2.TOOL_CHOICE_MODE_TOOL,
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


def _list(value: Any, path: str) -> list[Any]:
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
    return convert_each(path, _list(messages, path), model_message_to_proto)


def model_messages_from_proto(
    pbs: Iterable[model_pb2.ModelMessage], *, path: str = "messages"
) -> list[ModelMessage]:
    """Convert repeated ``pai.v1.ModelMessage`` (errors name ``path[i]``).

    Raises:
        ValueError: As :func:`model_message_from_proto`, prefixed with ``path[i]``.
    """
    return convert_each(path, pbs, model_message_from_proto)


def _message_list_to_proto(value: Any, path: str) -> model_pb2.ModelMessageList:
    return model_pb2.ModelMessageList(messages=model_messages_to_proto(value, path=path))


def _message_list_from_proto(pb: model_pb2.ModelMessageList, path: str) -> list[ModelMessage]:
    return model_messages_from_proto(pb.messages, path=path)


def _instructions_to_proto(value: Any, path: str) -> model_pb2.Instructions:
    if not isinstance(value, str):
        value = _list(value, path)
    return model_pb2.Instructions(
        messages=convert_each(path, instructions_of(value), _system_to_proto)
    )


def _instructions_from_proto(pb: model_pb2.Instructions) -> list[SystemModelMessage]:
    return [_system_from_proto(message) for message in pb.messages]


# --------------------------------------------------------------- settings, tools


def model_settings_to_proto(settings: ModelSettings) -> model_pb2.ModelSettings:
    """Convert portable settings; ``None`` fields stay unset.

    ``stop_sequences`` has no presence on the wire: ``[]`` is sent like ``None``.

    Raises:
        ValueError: An integer does not fit its proto field.
    """
    if not isinstance(settings, ModelSettings):
        raise ValueError(f"ModelSettings: expected ModelSettings, got {type(settings).__name__}")
    return model_pb2.ModelSettings(
        max_output_tokens=settings.max_output_tokens,
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        stop_sequences=settings.stop_sequences or [],
        seed=settings.seed,
        presence_penalty=settings.presence_penalty,
        frequency_penalty=settings.frequency_penalty,
        max_retries=settings.max_retries,
    )


def model_settings_from_proto(pb: model_pb2.ModelSettings) -> ModelSettings:
    """Convert proto settings; unset fields (and empty ``stop_sequences``) become ``None``."""
    return ModelSettings(
        max_output_tokens=pb.max_output_tokens if pb.HasField("max_output_tokens") else None,
        temperature=pb.temperature if pb.HasField("temperature") else None,
        top_p=pb.top_p if pb.HasField("top_p") else None,
        top_k=pb.top_k if pb.HasField("top_k") else None,
        stop_sequences=list(pb.stop_sequences) or None,
        seed=pb.seed if pb.HasField("seed") else None,
        presence_penalty=pb.presence_penalty if pb.HasField("presence_penalty") else None,
        frequency_penalty=pb.frequency_penalty if pb.HasField("frequency_penalty") else None,
        max_retries=pb.max_retries if pb.HasField("max_retries") else None,
    )


def tool_manifest_entry_to_proto(entry: ToolManifestEntry) -> model_pb2.ToolManifestEntry:
    """Convert an advertised tool (the input schema is always sent).

    Raises:
        ValueError: The value is not a ``ToolManifestEntry``, or its schema
            is not strict JSON.
    """
    if not isinstance(entry, ToolManifestEntry):
        raise ValueError(
            f"ToolManifestEntry: expected ToolManifestEntry, got {type(entry).__name__}"
        )
    return model_pb2.ToolManifestEntry(
        name=entry.name,
        description=entry.description,
        input_schema=struct_to_proto(entry.input_schema, path="ToolManifestEntry.input_schema"),
        source=tool_source_to_proto(entry.source),
    )


def tool_manifest_entry_from_proto(pb: model_pb2.ToolManifestEntry) -> ToolManifestEntry:
    """Convert a ``pai.v1.ToolManifestEntry``.

    An unset ``input_schema`` reads as the domain default
    (``{"type": "object"}``); a set, empty one as ``{}``.

    Raises:
        ValueError: ``source`` is UNSPECIFIED or unknown, or the schema is
            not strict JSON.
    """
    source = tool_source_from_proto(pb.source, field="ToolManifestEntry.source")
    if not pb.HasField("input_schema"):
        return ToolManifestEntry(name=pb.name, description=pb.description, source=source)
    return ToolManifestEntry(
        name=pb.name,
        description=pb.description,
        input_schema=object_from_proto(pb, "input_schema"),
        source=source,
    )


def _tools_to_proto(value: Any, path: str) -> list[model_pb2.ToolManifestEntry]:
    return convert_each(path, _list(value, path), tool_manifest_entry_to_proto)


def _tools_from_proto(
    pbs: Iterable[model_pb2.ToolManifestEntry], path: str
) -> list[ToolManifestEntry]:
    return convert_each(path, pbs, tool_manifest_entry_from_proto)


def tool_choice_to_proto(choice: ToolChoice | None) -> model_pb2.ToolChoice:
    """Convert a tool choice; ``None`` (no choice) is ``TOOL_CHOICE_MODE_UNSPECIFIED``.

    Raises:
        ValueError: The value is not a ``ToolChoice`` (or ``None``).
    """
    if choice is None:
        return model_pb2.ToolChoice()
    if not isinstance(choice, ToolChoice):
        raise ValueError(f"ToolChoice: expected ToolChoice, got {type(choice).__name__}")
    return model_pb2.ToolChoice(
        mode=TOOL_CHOICE_MODES.to_proto(choice.mode), tool_name=choice.tool_name or ""
    )


def tool_choice_from_proto(pb: model_pb2.ToolChoice) -> ToolChoice | None:
    """Convert a ``pai.v1.ToolChoice``; mode UNSPECIFIED gives ``None`` (no choice).

    Raises:
        ValueError: The mode is unknown.
    """
    mode = TOOL_CHOICE_MODES.optional_from_proto(pb.mode, "ToolChoice.mode")
    if mode is None:
        return None
    return ToolChoice(mode=mode, tool_name=pb.tool_name or None)


def _model_spec(model: Any, path: str) -> str:
    provider = getattr(model, "provider", None)
    model_id = getattr(model, "model_id", None)
    if not isinstance(provider, str) or not isinstance(model_id, str):
        raise ValueError(f"{path}: expected a LanguageModel, got {type(model).__name__}")
    return f"{provider}:{model_id}"


def _resolve(resolve_model: ResolveModel, spec: str, path: str) -> LanguageModel:
    if not spec:
        raise ValueError(f"{path} is required but not set")
    try:
        return resolve_model(spec)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


# ------------------------------------------------------------------- request


def model_step_request_to_proto(request: ModelStepRequest) -> model_pb2.ModelStepRequest:
    """Convert the effective request of a model step.

    The model is sent as ``provider:model-id``. The runtime-only fields
    (``runtime_context``, ``signal``, ``attempt_signals``, ``timeout``) are
    not part of the contract and are not sent.

    Raises:
        ValueError: A message, tool or JSON field is malformed, or
            ``step_index`` does not fit an int32.
    """
    return model_pb2.ModelStepRequest(
        run_id=request.run_id,
        thread_id=request.thread_id,
        step_index=request.step_index,
        model=_model_spec(request.model, "ModelStepRequest.model"),
        instructions=_instructions_to_proto(request.instructions, "ModelStepRequest.instructions"),
        messages=model_messages_to_proto(request.messages, path="ModelStepRequest.messages"),
        tools=_tools_to_proto(request.tools, "ModelStepRequest.tools"),
        provider_tools=optional_struct_to_proto(
            request.provider_tools, path="ModelStepRequest.provider_tools"
        ),
        tool_choice=None
        if request.tool_choice is None
        else tool_choice_to_proto(request.tool_choice),
        model_settings=model_settings_to_proto(request.model_settings),
        provider_options=struct_to_proto(
            request.provider_options, path="ModelStepRequest.provider_options"
        ),
    )


def model_step_request_from_proto(
    pb: model_pb2.ModelStepRequest, resolve_model: ResolveModel
) -> ModelStepRequest:
    """Convert a ``pai.v1.ModelStepRequest``; runtime-only fields keep their defaults.

    Args:
        pb: The proto request.
        resolve_model: Turns the ``provider:model-id`` string into a model.

    Raises:
        ValueError: ``model`` is empty or cannot be resolved, or a message,
            tool or JSON field is malformed.
    """
    return ModelStepRequest(
        run_id=pb.run_id,
        thread_id=pb.thread_id,
        step_index=pb.step_index,
        model=_resolve(resolve_model, pb.model, "ModelStepRequest.model"),
        instructions=_instructions_from_proto(pb.instructions),
        messages=model_messages_from_proto(pb.messages, path="ModelStepRequest.messages"),
        tools=_tools_from_proto(pb.tools, "ModelStepRequest.tools"),
        provider_tools=optional_struct_from_proto(pb, "provider_tools"),
        tool_choice=tool_choice_from_proto(pb.tool_choice),
        model_settings=model_settings_from_proto(pb.model_settings),
        provider_options=object_from_proto(pb, "provider_options"),
    )


# -------------------------------------------------------------------- patches

P = TypeVar("P", bound=ModelStepPatch | RunPatch)

# Cleared by a patch that carries ``model`` (a fresh route, see apply_patch).
_ROUTE_FIELDS = ("model_settings", "provider_options", "provider_tools", "tool_choice")


def _coerce(patch: Any, kind: type[Any], path: str) -> Any:
    if isinstance(patch, ModelStepPatch) and issubclass(kind, ModelStepPatch):
        return patch  # a step patch in a model-call fold (or the reverse: checked by fields)
    try:
        return coerce_patch(patch, kind, where=path)
    except InvalidArgument as exc:
        raise ValueError(f"{path}: {exc}") from exc


def fold_patches(patches: Any, kind: type[P], *, path: str = "patch") -> P | None:
    """Fold a patch, or a list of patches applied left to right, into one sparse patch.

    This is how a :class:`~pai_grpc.lifecycle.Continue` whose ``patch`` is a
    list (as :func:`~pai_grpc.lifecycle.compose_lifecycle` returns) becomes
    the single patch the contract carries. Later fields win;
    ``model_settings`` merge field by field (:meth:`ModelSettings.merged`),
    ``provider_options`` shallowly by key, ``append_model_messages``
    concatenate; everything else is replaced. Two rules keep the fold equal to
    applying the patches one by one with :func:`~pai_grpc.lifecycle.apply_patch`:
    a patch carrying ``model`` drops the ``model_settings``,
    ``provider_options``, ``provider_tools`` and ``tool_choice`` folded so
    far (a fresh route clears them), and a patch carrying ``messages`` drops
    the ``append_model_messages`` folded so far (they were appended to the
    list it replaces). ``signal`` (model-call patches only) is replaced, not
    combined.

    Args:
        patches: ``None``, one patch, or a list of them (``None`` items are
            skipped). Dicts are accepted like hook results
            (:func:`~pai_grpc.lifecycle.coerce_patch`).
        kind: The patch class of the result (``RunPatch``,
            ``ModelStepPatch`` or ``ModelCallPatch``).
        path: Where the patches sit, for error messages.

    Returns:
        The folded patch, or ``None`` when there is no patch at all.

    Raises:
        ValueError: An item is not a ``kind`` (or a dict of its fields), or
            sets a field ``kind`` does not have.
    """
    items = list(patches) if isinstance(patches, list | tuple) else [patches]
    names = [f.name for f in fields(kind)]
    folded: dict[str, Any] = {}
    found = False
    for i, raw in enumerate(items):
        where = f"{path}[{i}]" if isinstance(patches, list | tuple) else path
        if raw is None:
            continue
        patch = _coerce(raw, kind, where)
        found = True
        values = {f.name: getattr(patch, f.name) for f in fields(patch)}
        values = {name: value for name, value in values.items() if value is not UNSET}
        extra = sorted(set(values) - set(names))
        if extra:
            raise ValueError(f"{where}: a {kind.__name__} cannot carry {extra}")
        if "model" in values:
            for name in _ROUTE_FIELDS:
                folded.pop(name, None)
        if "messages" in values:
            folded.pop("append_model_messages", None)
        for name, value in values.items():
            if name not in folded:
                folded[name] = value
            elif name == "model_settings" and isinstance(folded[name], ModelSettings):
                folded[name] = folded[name].merged(value)
            elif name == "provider_options" and isinstance(folded[name], dict):
                folded[name] = {**folded[name], **value} if isinstance(value, dict) else value
            elif name == "append_model_messages":
                folded[name] = [*_list(folded[name], where), *_list(value, where)]
            else:
                folded[name] = value
    return kind(**folded) if found else None


def _sparse_to_proto(patch: ModelStepPatch | RunPatch, path: str) -> dict[str, Any]:
    """The fields a step patch and a run patch share, as constructor arguments."""
    out: dict[str, Any] = {}
    if patch.model is not UNSET:
        out["model"] = _model_spec(patch.model, f"{path}.model")
    if patch.instructions is not UNSET:
        out["instructions"] = _instructions_to_proto(patch.instructions, f"{path}.instructions")
    if patch.append_model_messages is not UNSET:
        out["append_model_messages"] = _message_list_to_proto(
            patch.append_model_messages, f"{path}.append_model_messages"
        )
    if patch.tools is not UNSET:
        out["tools"] = model_pb2.ToolManifest(tools=_tools_to_proto(patch.tools, f"{path}.tools"))
    if patch.provider_tools is not UNSET:
        out["provider_tools"] = struct_to_proto(
            patch.provider_tools or {}, path=f"{path}.provider_tools"
        )
    if patch.tool_choice is not UNSET:
        out["tool_choice"] = tool_choice_to_proto(patch.tool_choice)
    if patch.model_settings is not UNSET and patch.model_settings is not None:
        out["model_settings"] = model_settings_to_proto(patch.model_settings)
    if patch.provider_options is not UNSET:
        out["provider_options"] = struct_to_proto(
            patch.provider_options, path=f"{path}.provider_options"
        )
    return out


def _sparse_from_proto(
    pb: model_pb2.ModelStepPatch | model_pb2.RunPatch, resolve_model: ResolveModel
) -> dict[str, Any]:
    name = pb.DESCRIPTOR.name
    out: dict[str, Any] = {}
    if pb.HasField("model"):
        out["model"] = _resolve(resolve_model, pb.model, f"{name}.model")
    if pb.HasField("instructions"):
        out["instructions"] = _instructions_from_proto(pb.instructions)
    if pb.HasField("append_model_messages"):
        out["append_model_messages"] = _message_list_from_proto(
            pb.append_model_messages, f"{name}.append_model_messages"
        )
    if pb.HasField("tools"):
        out["tools"] = _tools_from_proto(pb.tools.tools, f"{name}.tools")
    if pb.HasField("provider_tools"):
        out["provider_tools"] = object_from_proto(pb, "provider_tools") or None
    if pb.HasField("tool_choice"):
        out["tool_choice"] = tool_choice_from_proto(pb.tool_choice)
    if pb.HasField("model_settings"):
        out["model_settings"] = model_settings_from_proto(pb.model_settings)
    if pb.HasField("provider_options"):
        out["provider_options"] = object_from_proto(pb, "provider_options")
    return out


def model_step_patch_to_proto(patch: ModelStepPatch) -> model_pb2.ModelStepPatch:
    """Convert a sparse step patch; ``UNSET`` fields stay absent.

    Raises:
        ValueError: A field is malformed, or the patch is a
            ``ModelCallPatch`` carrying ``signal``/``timeout`` (a step patch
            cannot hold them).
    """
    path = "ModelStepPatch"
    if not isinstance(patch, ModelStepPatch):
        raise ValueError(f"{path}: expected ModelStepPatch, got {type(patch).__name__}")
    if isinstance(patch, ModelCallPatch):
        for extra in ("signal", "timeout"):
            if getattr(patch, extra) not in (UNSET, None):
                raise ValueError(f"{path}: a step patch cannot carry {extra}")
    out = _sparse_to_proto(patch, path)
    if patch.messages is not UNSET:
        out["messages"] = _message_list_to_proto(patch.messages, f"{path}.messages")
    return model_pb2.ModelStepPatch(**out)


def model_step_patch_from_proto(
    pb: model_pb2.ModelStepPatch, resolve_model: ResolveModel
) -> ModelStepPatch:
    """Convert a ``pai.v1.ModelStepPatch``; absent fields are ``UNSET``.

    Raises:
        ValueError: ``model`` cannot be resolved, or a field is malformed.
    """
    out = _sparse_from_proto(pb, resolve_model)
    if pb.HasField("messages"):
        out["messages"] = _message_list_from_proto(pb.messages, "ModelStepPatch.messages")
    return ModelStepPatch(**out)


def _timeout_ms(timeout: Any, path: str) -> int:
    if timeout is UNSET or timeout is None:
        return 0
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ValueError(f"{path}: expected seconds, got {type(timeout).__name__}")
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"{path}: must be a positive finite number of seconds, got {timeout!r}")
    return max(1, round(timeout * 1000))


def model_call_patch_to_proto(patch: ModelStepPatch) -> model_pb2.ModelCallPatch:
    """Convert a model-call patch; ``timeout`` (seconds) becomes ``timeout_ms``.

    ``UNSET`` and ``None`` timeouts are both sent as 0 (none); a plain
    :class:`ModelStepPatch` is a model-call patch without a timeout.

    Raises:
        ValueError: The patch carries a ``signal`` (it cannot cross the wire),
            the timeout is not a positive finite number, or a field is
            malformed.
    """
    path = "ModelCallPatch"
    if not isinstance(patch, ModelStepPatch):
        raise ValueError(f"{path}: expected ModelCallPatch, got {type(patch).__name__}")
    timeout: Any = UNSET
    if isinstance(patch, ModelCallPatch):
        if patch.signal is not UNSET and patch.signal is not None:
            raise ValueError(f"{path}.signal: an AbortSignal cannot cross the wire; use timeout")
        timeout = patch.timeout
    step = _sparse_to_proto(patch, f"{path}.patch")
    if patch.messages is not UNSET:
        step["messages"] = _message_list_to_proto(patch.messages, f"{path}.patch.messages")
    return model_pb2.ModelCallPatch(
        patch=model_pb2.ModelStepPatch(**step),
        timeout_ms=_timeout_ms(timeout, f"{path}.timeout"),
    )


def model_call_patch_from_proto(
    pb: model_pb2.ModelCallPatch, resolve_model: ResolveModel
) -> ModelCallPatch:
    """Convert a ``pai.v1.ModelCallPatch``; ``timeout_ms`` 0 leaves ``timeout`` ``UNSET``.

    An unset ``patch`` is an empty step patch.

    Raises:
        ValueError: ``timeout_ms`` is negative, or as
            :func:`model_step_patch_from_proto`.
    """
    if pb.timeout_ms < 0:
        raise ValueError(f"ModelCallPatch.timeout_ms: must not be negative, got {pb.timeout_ms}")
    step = model_step_patch_from_proto(pb.patch, resolve_model)
    values = {f.name: getattr(step, f.name) for f in fields(step)}
    timeout = pb.timeout_ms / 1000 if pb.timeout_ms else UNSET
    return ModelCallPatch(**values, timeout=timeout)


def run_patch_to_proto(patch: RunPatch) -> model_pb2.RunPatch:
    """Convert a sparse run patch; ``UNSET`` fields stay absent.

    Raises:
        ValueError: A field is malformed, or ``max_steps`` is not an int32.
    """
    path = "RunPatch"
    if not isinstance(patch, RunPatch):
        raise ValueError(f"{path}: expected RunPatch, got {type(patch).__name__}")
    out = _sparse_to_proto(patch, path)
    if patch.max_steps is not UNSET:
        if isinstance(patch.max_steps, bool) or not isinstance(patch.max_steps, int):
            raise ValueError(f"{path}.max_steps: expected an int, got {patch.max_steps!r}")
        out["max_steps"] = patch.max_steps
    return model_pb2.RunPatch(**out)


def run_patch_from_proto(pb: model_pb2.RunPatch, resolve_model: ResolveModel) -> RunPatch:
    """Convert a ``pai.v1.RunPatch``; absent fields are ``UNSET``.

    Raises:
        ValueError: ``model`` cannot be resolved, or a field is malformed.
    """
    out = _sparse_from_proto(pb, resolve_model)
    if pb.HasField("max_steps"):
        out["max_steps"] = pb.max_steps
    return RunPatch(**out)


# --------------------------------------------------------- assistant response


def assistant_response_to_proto(response: AssistantResponse) -> model_pb2.AssistantResponse:
    """Convert a hook-authored assistant response (metadata always sent).

    Raises:
        ValueError: The value is not an ``AssistantResponse``, or a part or
            the metadata is not strict JSON.
    """
    if not isinstance(response, AssistantResponse):
        raise ValueError(
            f"AssistantResponse: expected AssistantResponse, got {type(response).__name__}"
        )
    return model_pb2.AssistantResponse(
        parts=convert_each(
            "AssistantResponse.parts",
            _list(response.parts, "AssistantResponse.parts"),
            part_to_proto,
        ),
        metadata=struct_to_proto(response.metadata, path="AssistantResponse.metadata"),
    )


def assistant_response_from_proto(pb: model_pb2.AssistantResponse) -> AssistantResponse:
    """Convert a ``pai.v1.AssistantResponse``; unset metadata reads as ``{}``.

    Raises:
        ValueError: A part has no arm set, or JSON is not strict.
    """
    return AssistantResponse(
        parts=convert_each("AssistantResponse.parts", pb.parts, part_from_proto),
        metadata=object_from_proto(pb, "metadata"),
    )
