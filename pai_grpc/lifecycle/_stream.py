"""transform_step_stream helpers: abort() and the application-data writer (TSS-02..04)."""

from __future__ import annotations

from pai_grpc.domain import (
    DocumentSource,
    FileChunk,
    FilePart,
    FinishStepChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningPart,
    ReasoningStartChunk,
    SourceChunk,
    SourceDocumentPart,
    SourceUrlPart,
    StepStartPart,
    StepStreamChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextPart,
    TextStartChunk,
    UrlSource,
    Usage,
)
from pai_grpc.errors import InvalidArgument
from pai_grpc.lifecycle._decisions import AssistantResponse, StepAbort

_TEXT = frozenset({"text-start", "text-delta", "text-end"})


def missing_text_id(chunk: object) -> str | None:
    """The problem with a text chunk lacking its id (TSS-05), or None."""
    kind = getattr(chunk, "type", None)
    if kind in _TEXT and not getattr(chunk, "id", None):
        return f"{kind} needs a text id"
    return None


class AbortStep(Exception):
    """Raised by ``abort()``: the step stops deliberately (not a runtime failure)."""

    def __init__(self, abort: StepAbort) -> None:
        super().__init__(abort.reason)
        self.abort = abort


def response_chunks(response: AssistantResponse, *, prefix: str = "r") -> list[StepStreamChunk]:
    """A hook-authored response as a canonical step stream (PR-05, TSS-05).

    Text keeps explicit start/delta/end boundaries with ids, so synthetic
    responses pass through the same output policy and reducer as model output.
    """
    out: list[StepStreamChunk] = []
    for i, part in enumerate(response.parts):
        block = f"{prefix}{i}"
        match part:
            case TextPart():
                out += [
                    TextStartChunk(id=block, provider_metadata=part.provider_metadata),
                    TextDeltaChunk(id=block, text=part.text),
                    TextEndChunk(id=block),
                ]
            case ReasoningPart():
                out += [
                    ReasoningStartChunk(id=block, provider_metadata=part.provider_metadata),
                    ReasoningDeltaChunk(id=block, text=part.text),
                    ReasoningEndChunk(id=block),
                ]
            case FilePart():
                out.append(
                    FileChunk(
                        media_type=part.media_type,
                        url=part.url,
                        provider_metadata=part.provider_metadata,
                    )
                )
            case SourceUrlPart():
                out.append(
                    SourceChunk(
                        id=part.source_id,
                        source=UrlSource(url=part.url, title=part.title),
                        provider_metadata=part.provider_metadata,
                    )
                )
            case SourceDocumentPart():
                out.append(
                    SourceChunk(
                        id=part.source_id,
                        source=DocumentSource(
                            media_type=part.media_type, title=part.title, filename=part.filename
                        ),
                        provider_metadata=part.provider_metadata,
                    )
                )
            case StepStartPart():
                continue
            case _:
                raise InvalidArgument.field(
                    f"response.parts[{i}]",
                    f"{part.type} parts cannot be authored in a response",
                    reason="BAD_RESPONSE",
                )
    out.append(FinishStepChunk(usage=Usage(), finish_reason="stop"))
    return out
