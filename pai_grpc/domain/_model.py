"""Model-facing types: model messages (AI SDK ModelMessage), settings, tools, requests.

A ModelMessage carries no run, visibility or private-metadata facts; it is
what a provider sees.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import Field

from pai_grpc.domain._base import DomainModel, JsonObject, JsonValue


class ModelTextPart(DomainModel):
    """Text content."""

    type: Literal["text"] = "text"
    text: str
    provider_options: JsonObject | None = None


class ModelFilePart(DomainModel):
    """File content (URL or ``data:`` URL)."""

    type: Literal["file"] = "file"
    media_type: str
    data: str
    filename: str | None = None
    provider_options: JsonObject | None = None


class ModelReasoningPart(DomainModel):
    """Reasoning replayed to the provider (signatures live in provider options)."""

    type: Literal["reasoning"] = "reasoning"
    text: str
    provider_options: JsonObject | None = None


class ModelToolCallPart(DomainModel):
    """A tool call made by the assistant."""

    type: Literal["tool-call"] = "tool-call"
    tool_call_id: str
    tool_name: str
    input: JsonValue = None
    provider_executed: bool = False
    provider_options: JsonObject | None = None


class TextOutput(DomainModel):
    """A text tool result."""

    type: Literal["text"] = "text"
    value: str


class JsonOutput(DomainModel):
    """A JSON tool result."""

    type: Literal["json"] = "json"
    value: JsonValue = None


class ErrorTextOutput(DomainModel):
    """A tool error as text."""

    type: Literal["error-text"] = "error-text"
    value: str


class ErrorJsonOutput(DomainModel):
    """A tool error as JSON."""

    type: Literal["error-json"] = "error-json"
    value: JsonValue = None


class ExecutionDeniedOutput(DomainModel):
    """The tool call was denied (approval refused)."""

    type: Literal["execution-denied"] = "execution-denied"
    reason: str | None = None


ToolResultOutput: TypeAlias = Annotated[
    TextOutput | JsonOutput | ErrorTextOutput | ErrorJsonOutput | ExecutionDeniedOutput,
    Field(discriminator="type"),
]


class ModelToolResultPart(DomainModel):
    """The result of a tool call, as the model sees it."""

    type: Literal["tool-result"] = "tool-result"
    tool_call_id: str
    tool_name: str
    output: ToolResultOutput
    provider_options: JsonObject | None = None


UserContent: TypeAlias = Annotated[ModelTextPart | ModelFilePart, Field(discriminator="type")]
AssistantContent: TypeAlias = Annotated[
    ModelTextPart | ModelFilePart | ModelReasoningPart | ModelToolCallPart | ModelToolResultPart,
    Field(discriminator="type"),
]


class SystemModelMessage(DomainModel):
    """System instructions."""

    role: Literal["system"] = "system"
    content: str
    provider_options: JsonObject | None = None


class UserModelMessage(DomainModel):
    """User input."""

    role: Literal["user"] = "user"
    content: list[UserContent]
    provider_options: JsonObject | None = None


class AssistantModelMessage(DomainModel):
    """Assistant output (provider-executed tool results stay inline)."""

    role: Literal["assistant"] = "assistant"
    content: list[AssistantContent]
    provider_options: JsonObject | None = None


class ToolModelMessage(DomainModel):
    """Results of tools the runtime or the client executed."""

    role: Literal["tool"] = "tool"
    content: list[ModelToolResultPart]
    provider_options: JsonObject | None = None


ModelMessage: TypeAlias = Annotated[
    SystemModelMessage | UserModelMessage | AssistantModelMessage | ToolModelMessage,
    Field(discriminator="role"),
]


class ModelSettings(DomainModel):
    """Portable generation settings; merged field by field (CFG-02)."""

    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    max_retries: int | None = None

    def merged(self, later: ModelSettings | None) -> ModelSettings:
        """``self`` overridden by every field ``later`` sets."""
        if later is None:
            return self
        return self.model_copy(update=later.model_dump(exclude_none=True))


ToolSourceName: TypeAlias = Literal["backend", "client", "mcp", "subagent"]


class ToolManifestEntry(DomainModel):
    """A tool as advertised to the model."""

    name: str
    description: str = ""
    input_schema: JsonObject = Field(default_factory=lambda: {"type": "object"})
    source: ToolSourceName = "backend"


class ToolChoice(DomainModel):
    """How the model may use tools."""

    mode: Literal["auto", "none", "required", "tool"] = "auto"
    tool_name: str | None = None
