"""Message parts: :data:`pai_grpc.domain.MessagePart` <-> ``pai.v1.MessagePart``.

Optional domain fields (``X | None``) map to unset proto fields; a JSON
``null`` in a ``Value`` field (``ToolPart.input``/``output``,
``DataPart.data``) is also sent as an unset field, so both read back as
``None``.
"""

from __future__ import annotations

from typing import assert_never

from pai.v1 import parts_pb2
from pai_grpc.convert._json import (
    EnumMap,
    optional_struct_from_proto,
    optional_struct_to_proto,
    optional_value_from_proto,
    optional_value_to_proto,
    require_oneof,
    unknown_oneof,
)
from pai_grpc.domain import (
    DataPart,
    FilePart,
    MessagePart,
    PartState,
    ReasoningPart,
    SourceDocumentPart,
    SourceUrlPart,
    StepStartPart,
    TextPart,
    ToolApproval,
    ToolPart,
    ToolState,
)

PART_STATES: EnumMap[PartState, parts_pb2.PartState] = EnumMap(
    "PartState",
    {"streaming": parts_pb2.PART_STATE_STREAMING, "done": parts_pb2.PART_STATE_DONE},
)

TOOL_STATES: EnumMap[ToolState, parts_pb2.ToolState] = EnumMap(
    "ToolState",
    {
        "input-streaming": parts_pb2.TOOL_STATE_INPUT_STREAMING,
        "input-available": parts_pb2.TOOL_STATE_INPUT_AVAILABLE,
        "approval-requested": parts_pb2.TOOL_STATE_APPROVAL_REQUESTED,
        "approval-responded": parts_pb2.TOOL_STATE_APPROVAL_RESPONDED,
        "output-available": parts_pb2.TOOL_STATE_OUTPUT_AVAILABLE,
        "output-error": parts_pb2.TOOL_STATE_OUTPUT_ERROR,
        "output-denied": parts_pb2.TOOL_STATE_OUTPUT_DENIED,
    },
)


def part_state_to_proto(value: PartState | None) -> parts_pb2.PartState:
    """Map a text/reasoning part state; ``None`` gives ``PART_STATE_UNSPECIFIED``."""
    return parts_pb2.PART_STATE_UNSPECIFIED if value is None else PART_STATES.to_proto(value)


def part_state_from_proto(value: int, *, field: str = "PartState") -> PartState | None:
    """Map a proto part state; UNSPECIFIED gives ``None``.

    Raises:
        ValueError: The number is not a known ``PartState``.
    """
    return PART_STATES.optional_from_proto(value, field)


def tool_state_to_proto(value: ToolState) -> parts_pb2.ToolState:
    """Map a tool part state to the proto enum."""
    return TOOL_STATES.to_proto(value)


def tool_state_from_proto(value: int, *, field: str = "ToolState") -> ToolState:
    """Map a proto tool state.

    Raises:
        ValueError: The state is UNSPECIFIED or unknown.
    """
    return TOOL_STATES.from_proto(value, field)


# ---------------------------------------------------------------------- to proto


def _text_to_proto(part: TextPart) -> parts_pb2.TextPart:
    return parts_pb2.TextPart(
        text=part.text,
        state=part_state_to_proto(part.state),
        provider_metadata=optional_struct_to_proto(
            part.provider_metadata, path="TextPart.provider_metadata"
        ),
    )


def _reasoning_to_proto(part: ReasoningPart) -> parts_pb2.ReasoningPart:
    return parts_pb2.ReasoningPart(
        text=part.text,
        state=part_state_to_proto(part.state),
        provider_metadata=optional_struct_to_proto(
            part.provider_metadata, path="ReasoningPart.provider_metadata"
        ),
    )


def _approval_to_proto(approval: ToolApproval | None) -> parts_pb2.ToolApproval | None:
    if approval is None:
        return None
    return parts_pb2.ToolApproval(
        id=approval.id, approved=approval.approved, reason=approval.reason
    )


def _tool_to_proto(part: ToolPart) -> parts_pb2.ToolPart:
    return parts_pb2.ToolPart(
        tool_call_id=part.tool_call_id,
        tool_name=part.tool_name,
        state=tool_state_to_proto(part.state),
        title=part.title,
        provider_executed=part.provider_executed,
        input=optional_value_to_proto(part.input, path="ToolPart.input"),
        output=optional_value_to_proto(part.output, path="ToolPart.output"),
        error_text=part.error_text,
        preliminary=part.preliminary,
        approval=_approval_to_proto(part.approval),
        call_provider_metadata=optional_struct_to_proto(
            part.call_provider_metadata, path="ToolPart.call_provider_metadata"
        ),
        result_provider_metadata=optional_struct_to_proto(
            part.result_provider_metadata, path="ToolPart.result_provider_metadata"
        ),
    )


def _source_url_to_proto(part: SourceUrlPart) -> parts_pb2.SourceUrlPart:
    return parts_pb2.SourceUrlPart(
        source_id=part.source_id,
        url=part.url,
        title=part.title,
        provider_metadata=optional_struct_to_proto(
            part.provider_metadata, path="SourceUrlPart.provider_metadata"
        ),
    )


def _source_document_to_proto(part: SourceDocumentPart) -> parts_pb2.SourceDocumentPart:
    return parts_pb2.SourceDocumentPart(
        source_id=part.source_id,
        media_type=part.media_type,
        title=part.title,
        filename=part.filename,
        provider_metadata=optional_struct_to_proto(
            part.provider_metadata, path="SourceDocumentPart.provider_metadata"
        ),
    )


def _file_to_proto(part: FilePart) -> parts_pb2.FilePart:
    return parts_pb2.FilePart(
        media_type=part.media_type,
        filename=part.filename,
        url=part.url,
        provider_metadata=optional_struct_to_proto(
            part.provider_metadata, path="FilePart.provider_metadata"
        ),
    )


def _data_to_proto(part: DataPart) -> parts_pb2.DataPart:
    return parts_pb2.DataPart(
        name=part.name,
        id=part.id,
        data=optional_value_to_proto(part.data, path="DataPart.data"),
    )


def part_to_proto(part: MessagePart) -> parts_pb2.MessagePart:
    """Convert a domain message part to ``pai.v1.MessagePart``.

    Args:
        part: Any arm of the :data:`~pai_grpc.domain.MessagePart` union.

    Returns:
        The proto part with the matching oneof arm set.

    Raises:
        ValueError: A JSON field (input, output, data, provider metadata)
            is not strict JSON.
    """
    match part:
        case TextPart():
            return parts_pb2.MessagePart(text=_text_to_proto(part))
        case ReasoningPart():
            return parts_pb2.MessagePart(reasoning=_reasoning_to_proto(part))
        case ToolPart():
            return parts_pb2.MessagePart(tool=_tool_to_proto(part))
        case SourceUrlPart():
            return parts_pb2.MessagePart(source_url=_source_url_to_proto(part))
        case SourceDocumentPart():
            return parts_pb2.MessagePart(source_document=_source_document_to_proto(part))
        case FilePart():
            return parts_pb2.MessagePart(file=_file_to_proto(part))
        case StepStartPart():
            return parts_pb2.MessagePart(step_start=parts_pb2.StepStartPart())
        case DataPart():
            return parts_pb2.MessagePart(data=_data_to_proto(part))
        case _:
            assert_never(part)


# -------------------------------------------------------------------- from proto


def _text_from_proto(pb: parts_pb2.TextPart) -> TextPart:
    return TextPart(
        text=pb.text,
        state=part_state_from_proto(pb.state, field="TextPart.state"),
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _reasoning_from_proto(pb: parts_pb2.ReasoningPart) -> ReasoningPart:
    return ReasoningPart(
        text=pb.text,
        state=part_state_from_proto(pb.state, field="ReasoningPart.state"),
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _approval_from_proto(pb: parts_pb2.ToolPart) -> ToolApproval | None:
    if not pb.HasField("approval"):
        return None
    approval = pb.approval
    return ToolApproval(
        id=approval.id,
        approved=approval.approved if approval.HasField("approved") else None,
        reason=approval.reason if approval.HasField("reason") else None,
    )


def _tool_from_proto(pb: parts_pb2.ToolPart) -> ToolPart:
    return ToolPart(
        tool_call_id=pb.tool_call_id,
        tool_name=pb.tool_name,
        state=tool_state_from_proto(pb.state, field="ToolPart.state"),
        title=pb.title if pb.HasField("title") else None,
        provider_executed=pb.provider_executed,
        input=optional_value_from_proto(pb, "input"),
        output=optional_value_from_proto(pb, "output"),
        error_text=pb.error_text if pb.HasField("error_text") else None,
        preliminary=pb.preliminary,
        approval=_approval_from_proto(pb),
        call_provider_metadata=optional_struct_from_proto(pb, "call_provider_metadata"),
        result_provider_metadata=optional_struct_from_proto(pb, "result_provider_metadata"),
    )


def _source_url_from_proto(pb: parts_pb2.SourceUrlPart) -> SourceUrlPart:
    return SourceUrlPart(
        source_id=pb.source_id,
        url=pb.url,
        title=pb.title if pb.HasField("title") else None,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _source_document_from_proto(pb: parts_pb2.SourceDocumentPart) -> SourceDocumentPart:
    return SourceDocumentPart(
        source_id=pb.source_id,
        media_type=pb.media_type,
        title=pb.title,
        filename=pb.filename if pb.HasField("filename") else None,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _file_from_proto(pb: parts_pb2.FilePart) -> FilePart:
    return FilePart(
        media_type=pb.media_type,
        url=pb.url,
        filename=pb.filename if pb.HasField("filename") else None,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _data_from_proto(pb: parts_pb2.DataPart) -> DataPart:
    return DataPart(
        name=pb.name,
        id=pb.id if pb.HasField("id") else None,
        data=optional_value_from_proto(pb, "data"),
    )


def part_from_proto(pb: parts_pb2.MessagePart) -> MessagePart:
    """Convert a ``pai.v1.MessagePart`` to its domain part.

    Args:
        pb: The proto part.

    Returns:
        The domain part of the arm that is set.

    Raises:
        ValueError: No arm of ``MessagePart.part`` is set, ``ToolPart.state``
            is UNSPECIFIED or unknown, or a JSON field is not strict JSON.
    """
    match arm := require_oneof(pb, "part"):
        case "text":
            return _text_from_proto(pb.text)
        case "reasoning":
            return _reasoning_from_proto(pb.reasoning)
        case "tool":
            return _tool_from_proto(pb.tool)
        case "source_url":
            return _source_url_from_proto(pb.source_url)
        case "source_document":
            return _source_document_from_proto(pb.source_document)
        case "file":
            return _file_from_proto(pb.file)
        case "step_start":
            return StepStartPart()
        case "data":
            return _data_from_proto(pb.data)
        case _:
            raise unknown_oneof(pb, "part", arm)
