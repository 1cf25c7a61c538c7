"""Message parts: the persisted shape of messages (AI SDK UI parts)."""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import Field

from pai_grpc.domain._base import DomainModel, JsonObject, JsonValue

PartState: TypeAlias = Literal["streaming", "done"]
ToolState: TypeAlias = Literal[
    "input-streaming",
    "input-available",
    "approval-requested",
    "approval-responded",
    "output-available",
    "output-error",
    "output-denied",
]


class TextPart(DomainModel):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str
    state: PartState | None = None
    provider_metadata: JsonObject | None = None


class ReasoningPart(DomainModel):
    """Model reasoning; provider metadata carries what replay needs (signatures)."""

    type: Literal["reasoning"] = "reasoning"
    text: str
    state: PartState | None = None
    provider_metadata: JsonObject | None = None


class ToolApproval(DomainModel):
    """The approval attached to a tool invocation; ``approved`` is unset while requested."""

    id: str
    approved: bool | None = None
    reason: str | None = None


class ToolPart(DomainModel):
    """One tool invocation, its input and (eventually) its result."""

    type: Literal["tool"] = "tool"
    tool_call_id: str
    tool_name: str
    state: ToolState
    title: str | None = None
    provider_executed: bool = False
    input: JsonValue = None
    output: JsonValue = None
    error_text: str | None = None
    preliminary: bool = False
    approval: ToolApproval | None = None
    call_provider_metadata: JsonObject | None = None
    result_provider_metadata: JsonObject | None = None


class SourceUrlPart(DomainModel):
    """A cited URL."""

    type: Literal["source-url"] = "source-url"
    source_id: str
    url: str
    title: str | None = None
    provider_metadata: JsonObject | None = None


class SourceDocumentPart(DomainModel):
    """A cited document."""

    type: Literal["source-document"] = "source-document"
    source_id: str
    media_type: str
    title: str
    filename: str | None = None
    provider_metadata: JsonObject | None = None


class FilePart(DomainModel):
    """A file by URL (hosted or ``data:``)."""

    type: Literal["file"] = "file"
    media_type: str
    url: str
    filename: str | None = None
    provider_metadata: JsonObject | None = None


class StepStartPart(DomainModel):
    """Marks where a model step starts inside an assistant message."""

    type: Literal["step-start"] = "step-start"


class DataPart(DomainModel):
    """Registered application data (``data-<name>``)."""

    type: Literal["data"] = "data"
    name: str
    id: str | None = None
    data: JsonValue = None


MessagePart: TypeAlias = Annotated[
    TextPart
    | ReasoningPart
    | ToolPart
    | SourceUrlPart
    | SourceDocumentPart
    | FilePart
    | StepStartPart
    | DataPart,
    Field(discriminator="type"),
]
