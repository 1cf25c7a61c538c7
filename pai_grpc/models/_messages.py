"""Persisted messages -> model messages (RT-07).

The model context is converted from the private native messages (never
from a public projection, RMC-10). Each assistant step message becomes an
assistant model message with its text, reasoning and tool calls, followed
by a tool message with the results of tools the runtime or client ran.
Provider-executed tool results stay inline in the assistant message.
"""

from __future__ import annotations

from collections.abc import Iterable

from pai_grpc.domain import (
    AssistantContent,
    AssistantModelMessage,
    ErrorTextOutput,
    ExecutionDeniedOutput,
    FilePart,
    JsonOutput,
    Message,
    ModelFilePart,
    ModelMessage,
    ModelReasoningPart,
    ModelTextPart,
    ModelToolCallPart,
    ModelToolResultPart,
    ReasoningPart,
    SystemModelMessage,
    TextPart,
    ToolModelMessage,
    ToolPart,
    ToolResultOutput,
    UserContent,
    UserModelMessage,
)

#: Marks a file part produced while reasoning (pruned like reasoning, RSN-01).
REASONING_FILE_KEY = "pai_reasoning_file"


def is_reasoning_file(part: FilePart) -> bool:
    """Whether a file part was produced while reasoning."""
    return bool((part.provider_metadata or {}).get(REASONING_FILE_KEY))


def tool_result_output(part: ToolPart) -> ToolResultOutput | None:
    """The model-visible result of a finished tool part (``None`` while unfinished)."""
    match part.state:
        case "output-available":
            return JsonOutput(value=part.output)
        case "output-error":
            return ErrorTextOutput(value=part.error_text or "tool failed")
        case "output-denied":
            reason = part.approval.reason if part.approval else None
            return ExecutionDeniedOutput(reason=reason)
        case _:
            return None


def _user(message: Message) -> UserModelMessage | None:
    content: list[UserContent] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            content.append(ModelTextPart(text=part.text, provider_options=part.provider_metadata))
        elif isinstance(part, FilePart):
            content.append(
                ModelFilePart(
                    media_type=part.media_type,
                    data=part.url,
                    filename=part.filename,
                    provider_options=part.provider_metadata,
                )
            )
    return UserModelMessage(content=content) if content else None


def _assistant(message: Message) -> list[ModelMessage]:
    content: list[AssistantContent] = []
    results: list[ModelToolResultPart] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            content.append(ModelTextPart(text=part.text, provider_options=part.provider_metadata))
        elif isinstance(part, ReasoningPart):
            content.append(
                ModelReasoningPart(text=part.text, provider_options=part.provider_metadata)
            )
        elif isinstance(part, FilePart):
            content.append(
                ModelFilePart(
                    media_type=part.media_type,
                    data=part.url,
                    filename=part.filename,
                    provider_options=part.provider_metadata,
                )
            )
        elif isinstance(part, ToolPart):
            if part.state == "input-streaming":
                continue
            content.append(
                ModelToolCallPart(
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                    # Invalid non-JSON input is not stored (TV-02); replay an empty object
                    # so the model still sees its failed attempt and the error result.
                    input=part.input if part.input is not None else {},
                    provider_executed=part.provider_executed,
                    provider_options=part.call_provider_metadata,
                )
            )
            output = tool_result_output(part)
            if output is None:
                continue
            result = ModelToolResultPart(
                tool_call_id=part.tool_call_id,
                tool_name=part.tool_name,
                output=output,
                provider_options=part.result_provider_metadata,
            )
            if part.provider_executed:
                content.append(result)
            else:
                results.append(result)
    out: list[ModelMessage] = []
    if content:
        out.append(AssistantModelMessage(content=content))
    if results:
        out.append(ToolModelMessage(content=results))
    return out


def to_model_messages(messages: Iterable[Message]) -> list[ModelMessage]:
    """Convert persisted messages (chronological) into model messages."""
    out: list[ModelMessage] = []
    for message in messages:
        if message.role == "system":
            text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
            if text:
                out.append(SystemModelMessage(content=text))
        elif message.role == "user":
            user = _user(message)
            if user is not None:
                out.append(user)
        else:
            out.extend(_assistant(message))
    return out
