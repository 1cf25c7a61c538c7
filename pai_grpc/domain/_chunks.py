"""The canonical step stream (AI SDK full-stream parts)."""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import Field

from pai_grpc.domain._base import DomainModel, JsonObject, JsonValue

FinishReason: TypeAlias = Literal[
    "stop", "length", "content-filter", "tool-calls", "error", "other"
]


class Usage(DomainModel):
    """Token usage; ``None`` means the provider did not report the figure."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        """Field-wise sum; a figure stays ``None`` only when both sides lack it."""

        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return Usage(
            input_tokens=add(self.input_tokens, other.input_tokens),
            output_tokens=add(self.output_tokens, other.output_tokens),
            total_tokens=add(self.total_tokens, other.total_tokens),
            reasoning_tokens=add(self.reasoning_tokens, other.reasoning_tokens),
            cache_read_tokens=add(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens=add(self.cache_write_tokens, other.cache_write_tokens),
        )


class StartChunk(DomainModel):
    """The stream starts."""

    type: Literal["start"] = "start"


class TextStartChunk(DomainModel):
    """A text block opens."""

    type: Literal["text-start"] = "text-start"
    id: str
    provider_metadata: JsonObject | None = None


class TextDeltaChunk(DomainModel):
    """A text fragment."""

    type: Literal["text-delta"] = "text-delta"
    id: str
    text: str
    provider_metadata: JsonObject | None = None


class TextEndChunk(DomainModel):
    """A text block closes."""

    type: Literal["text-end"] = "text-end"
    id: str
    provider_metadata: JsonObject | None = None


class ReasoningStartChunk(DomainModel):
    """A reasoning block opens."""

    type: Literal["reasoning-start"] = "reasoning-start"
    id: str
    provider_metadata: JsonObject | None = None


class ReasoningDeltaChunk(DomainModel):
    """A reasoning fragment (or a metadata-only delta such as a signature)."""

    type: Literal["reasoning-delta"] = "reasoning-delta"
    id: str
    text: str
    provider_metadata: JsonObject | None = None


class ReasoningEndChunk(DomainModel):
    """A reasoning block closes."""

    type: Literal["reasoning-end"] = "reasoning-end"
    id: str
    provider_metadata: JsonObject | None = None


class ToolInputStartChunk(DomainModel):
    """A tool call's input starts streaming."""

    type: Literal["tool-input-start"] = "tool-input-start"
    id: str
    tool_name: str
    provider_executed: bool = False
    title: str | None = None
    provider_metadata: JsonObject | None = None


class ToolInputDeltaChunk(DomainModel):
    """A fragment of a tool call's JSON input text."""

    type: Literal["tool-input-delta"] = "tool-input-delta"
    id: str
    delta: str
    provider_metadata: JsonObject | None = None


class ToolInputEndChunk(DomainModel):
    """A tool call's input finished streaming."""

    type: Literal["tool-input-end"] = "tool-input-end"
    id: str
    provider_metadata: JsonObject | None = None


class ToolCallChunk(DomainModel):
    """A complete tool call; ``invalid`` marks unparsable or schema-invalid input."""

    type: Literal["tool-call"] = "tool-call"
    tool_call_id: str
    tool_name: str
    input: JsonValue = None
    provider_executed: bool = False
    invalid: bool = False
    error_text: str | None = None
    title: str | None = None
    provider_metadata: JsonObject | None = None


class ToolResultChunk(DomainModel):
    """A tool produced output."""

    type: Literal["tool-result"] = "tool-result"
    tool_call_id: str
    tool_name: str
    input: JsonValue = None
    output: JsonValue = None
    provider_executed: bool = False
    preliminary: bool = False
    provider_metadata: JsonObject | None = None


class ToolErrorChunk(DomainModel):
    """A tool failed."""

    type: Literal["tool-error"] = "tool-error"
    tool_call_id: str
    tool_name: str
    input: JsonValue = None
    error_text: str
    provider_executed: bool = False
    provider_metadata: JsonObject | None = None


class ToolApprovalRequestChunk(DomainModel):
    """A tool waits for human approval."""

    type: Literal["tool-approval-request"] = "tool-approval-request"
    approval_id: str
    tool_call_id: str


class ToolOutputDeniedChunk(DomainModel):
    """A tool's approval was denied."""

    type: Literal["tool-output-denied"] = "tool-output-denied"
    tool_call_id: str


class UrlSource(DomainModel):
    """A URL source."""

    source_type: Literal["url"] = "url"
    url: str
    title: str | None = None


class DocumentSource(DomainModel):
    """A document source."""

    source_type: Literal["document"] = "document"
    media_type: str
    title: str
    filename: str | None = None


class SourceChunk(DomainModel):
    """A citation."""

    type: Literal["source"] = "source"
    id: str
    source: Annotated[UrlSource | DocumentSource, Field(discriminator="source_type")]
    provider_metadata: JsonObject | None = None


class FileChunk(DomainModel):
    """A generated file."""

    type: Literal["file"] = "file"
    media_type: str
    url: str
    provider_metadata: JsonObject | None = None


class ReasoningFileChunk(DomainModel):
    """A file produced while reasoning."""

    type: Literal["reasoning-file"] = "reasoning-file"
    media_type: str
    url: str
    provider_metadata: JsonObject | None = None


class DataChunk(DomainModel):
    """Application data; transient data streams live and is never stored."""

    type: Literal["data"] = "data"
    name: str
    id: str | None = None
    data: JsonValue = None
    transient: bool = False


class StartStepChunk(DomainModel):
    """A model step starts."""

    type: Literal["start-step"] = "start-step"
    warnings: list[str] = Field(default_factory=list)


class ResponseInfo(DomainModel):
    """The provider response behind a step."""

    id: str = ""
    model_id: str = ""


class FinishStepChunk(DomainModel):
    """A model step finished."""

    type: Literal["finish-step"] = "finish-step"
    usage: Usage = Field(default_factory=Usage)
    finish_reason: FinishReason = "stop"
    raw_finish_reason: str | None = None
    provider_metadata: JsonObject | None = None
    response: ResponseInfo | None = None


class FinishChunk(DomainModel):
    """The stream finished."""

    type: Literal["finish"] = "finish"
    finish_reason: FinishReason = "stop"
    raw_finish_reason: str | None = None
    total_usage: Usage = Field(default_factory=Usage)


class ErrorChunk(DomainModel):
    """An error the stream reports (the step fails)."""

    type: Literal["error"] = "error"
    reason: str
    message: str = ""


class AbortChunk(DomainModel):
    """The step was aborted; its partial output is discarded."""

    type: Literal["abort"] = "abort"
    reason: str | None = None


StepStreamChunk: TypeAlias = Annotated[
    StartChunk
    | TextStartChunk
    | TextDeltaChunk
    | TextEndChunk
    | ReasoningStartChunk
    | ReasoningDeltaChunk
    | ReasoningEndChunk
    | ToolInputStartChunk
    | ToolInputDeltaChunk
    | ToolInputEndChunk
    | ToolCallChunk
    | ToolResultChunk
    | ToolErrorChunk
    | ToolApprovalRequestChunk
    | ToolOutputDeniedChunk
    | SourceChunk
    | FileChunk
    | ReasoningFileChunk
    | DataChunk
    | StartStepChunk
    | FinishStepChunk
    | FinishChunk
    | ErrorChunk
    | AbortChunk,
    Field(discriminator="type"),
]
