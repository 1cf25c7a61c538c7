"""Model requests and results: settings, tools, the step request, the assistant response.

Covers ``ModelSettings``, ``ToolManifestEntry``, ``ToolChoice``,
``ModelStepRequest`` and ``AssistantResponse``.

Conventions beyond the package ones:

* Models travel as ``provider:model-id`` strings; every ``*_from_proto``
  that reads one takes ``resolve_model`` (e.g.
  :meth:`pai_grpc.models.ModelRegistry.resolve`). A ``ValueError`` it
  raises (``UnknownModel``) is re-raised with the field path.
* In :class:`ModelStepRequest`, where ``provider_tools`` is not sparse,
  ``None`` is unset and ``{}`` round-trips.
* ``ToolChoice`` with ``TOOL_CHOICE_MODE_UNSPECIFIED`` means "no tool choice"
  (``None``, the provider default); this is how a patch clears an inherited
  choice. ``ToolChoice.tool_name`` ``""`` is ``None``.
* ``ModelSettings.stop_sequences`` is a plain ``repeated`` field: ``[]`` and
  ``None`` are both sent empty and read back as ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeAlias

from pai.v1 import model_pb2
from pai_grpc.convert._json import (
    EnumMap,
    object_from_proto,
    optional_struct_from_proto,
    optional_struct_to_proto,
    struct_to_proto,
)
from pai_grpc.convert._model import (
    convert_each,
    expect_list,
    instructions_from_proto,
    instructions_to_proto,
    model_messages_from_proto,
    model_messages_to_proto,
    tool_source_from_proto,
    tool_source_to_proto,
)
from pai_grpc.convert._parts import part_from_proto, part_to_proto
from pai_grpc.domain import ModelSettings, ToolChoice, ToolManifestEntry
from pai_grpc.lifecycle import AbortSignal, AssistantResponse, ModelStepRequest
from pai_grpc.models import LanguageModel, model_name

#: Resolves a ``provider:model-id`` string to a model.
ResolveModel: TypeAlias = Callable[[str], LanguageModel]

ToolChoiceMode: TypeAlias = Literal["auto", "none", "required", "tool"]


TOOL_CHOICE_MODES: EnumMap[ToolChoiceMode, model_pb2.ToolChoiceMode] = EnumMap(
    "ToolChoiceMode",
    {
        "auto": model_pb2.TOOL_CHOICE_MODE_AUTO,
        "none": model_pb2.TOOL_CHOICE_MODE_NONE,
        "required": model_pb2.TOOL_CHOICE_MODE_REQUIRED,
        "tool": model_pb2.TOOL_CHOICE_MODE_TOOL,
    },
)


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


#: Settings with nothing set (immutable, so one instance serves every empty message).
_NO_SETTINGS = ModelSettings()


def model_settings_from_proto(pb: model_pb2.ModelSettings) -> ModelSettings:
    """Convert proto settings; unset fields (and empty ``stop_sequences``) become ``None``."""
    if not pb.ListFields():
        # Most requests set none: skip nine presence checks and a validation.
        return _NO_SETTINGS
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


def tool_manifest_to_proto(value: Any, path: str) -> list[model_pb2.ToolManifestEntry]:
    """A list of tool manifest entries (errors name ``path[i]``)."""
    return convert_each(path, expect_list(value, path), tool_manifest_entry_to_proto)


def tool_manifest_from_proto(
    pbs: Iterable[model_pb2.ToolManifestEntry], path: str
) -> list[ToolManifestEntry]:
    """Repeated tool manifest entries (errors name ``path[i]``)."""
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


def model_spec(model: Any, path: str) -> str:
    """A model as it travels: ``provider:model-id``."""
    if not isinstance(getattr(model, "provider", None), str) or not isinstance(
        getattr(model, "model_id", None), str
    ):
        raise ValueError(f"{path}: expected a LanguageModel, got {type(model).__name__}")
    return model_name(model)


def resolve_spec(resolve_model: ResolveModel, spec: str, path: str) -> LanguageModel:
    """Resolve a ``provider:model-id`` read at ``path`` (required; errors name ``path``)."""
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
        model=model_spec(request.model, "ModelStepRequest.model"),
        instructions=instructions_to_proto(request.instructions, "ModelStepRequest.instructions"),
        messages=model_messages_to_proto(request.messages, path="ModelStepRequest.messages"),
        tools=tool_manifest_to_proto(request.tools, "ModelStepRequest.tools"),
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
    pb: model_pb2.ModelStepRequest,
    resolve_model: ResolveModel,
    *,
    runtime_context: Any = None,
    signal: AbortSignal | None = None,
) -> ModelStepRequest:
    """Convert a ``pai.v1.ModelStepRequest``; runtime-only fields are not on the wire.

    Args:
        pb: The proto request.
        resolve_model: Turns the ``provider:model-id`` string into a model.
        runtime_context: The receiver's runtime context for the request.
        signal: The receiver's abort signal for the request.

    Raises:
        ValueError: ``model`` is empty or cannot be resolved, or a message,
            tool or JSON field is malformed.
    """
    return ModelStepRequest(
        run_id=pb.run_id,
        thread_id=pb.thread_id,
        step_index=pb.step_index,
        model=resolve_spec(resolve_model, pb.model, "ModelStepRequest.model"),
        instructions=instructions_from_proto(pb.instructions),
        messages=model_messages_from_proto(pb.messages, path="ModelStepRequest.messages"),
        tools=tool_manifest_from_proto(pb.tools, "ModelStepRequest.tools"),
        provider_tools=optional_struct_from_proto(pb, "provider_tools"),
        tool_choice=tool_choice_from_proto(pb.tool_choice),
        model_settings=model_settings_from_proto(pb.model_settings),
        provider_options=object_from_proto(pb, "provider_options"),
        runtime_context=runtime_context,
        signal=signal,
    )


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
            expect_list(response.parts, "AssistantResponse.parts"),
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
