"""The step reducer: canonical step-stream chunks -> message parts.

Follows the AI SDK's UI-message stream processing: text and reasoning keep
explicit start/delta/end boundaries keyed by id (a delta without a start is
an error), tool parts advance through their states, a data part with the
same name and id replaces the earlier one, and transient data is never
stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pai_grpc.domain import (
    AbortChunk,
    DataChunk,
    DataPart,
    DocumentSource,
    ErrorChunk,
    FileChunk,
    FilePart,
    FinishChunk,
    FinishReason,
    FinishStepChunk,
    JsonObject,
    MessagePart,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningFileChunk,
    ReasoningPart,
    ReasoningStartChunk,
    SourceChunk,
    SourceDocumentPart,
    SourceUrlPart,
    StartChunk,
    StartStepChunk,
    StepStartPart,
    StepStreamChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextPart,
    TextStartChunk,
    ToolApproval,
    ToolApprovalRequestChunk,
    ToolCallChunk,
    ToolErrorChunk,
    ToolInputDeltaChunk,
    ToolInputEndChunk,
    ToolInputStartChunk,
    ToolOutputDeniedChunk,
    ToolPart,
    ToolResultChunk,
    Usage,
)
from pai_grpc.models import REASONING_FILE_KEY


class StreamProtocolError(Exception):
    """The chunk sequence breaks the stream grammar (e.g. a delta without a start)."""


def _merge_meta(a: JsonObject | None, b: JsonObject | None) -> JsonObject | None:
    if not b:
        return a
    out = dict(a or {})
    for provider, value in b.items():
        if isinstance(value, dict) and isinstance(out.get(provider), dict):
            out[provider] = {**out[provider], **value}
        else:
            out[provider] = value
    return out


@dataclass
class StepReducer:
    """Accumulates one step's chunks into parts, in arrival order."""

    _parts: list[MessagePart] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: FinishReason | None = None
    raw_finish_reason: str | None = None
    provider_metadata: JsonObject | None = None
    error: ErrorChunk | None = None
    aborted: AbortChunk | None = None
    tool_calls: list[ToolCallChunk] = field(default_factory=list)
    _open: dict[tuple[str, str], int] = field(default_factory=dict)
    _tool_index: dict[str, int] = field(default_factory=dict)
    _tool_text: dict[str, str] = field(default_factory=dict)
    #: Text of open text/reasoning parts (by index) not yet folded into the part:
    #: copying the part on every delta made a long step's deltas quadratic.
    _pending: dict[int, list[str]] = field(default_factory=dict)
    #: Input text of streaming tool calls not yet folded into their parts, by call id:
    #: parsing the input so far on every delta made a long input quadratic.
    _tool_pending: dict[str, list[str]] = field(default_factory=dict)

    @property
    def parts(self) -> list[MessagePart]:
        """The step's parts so far, in arrival order (open blocks hold their text so far)."""
        for i in list(self._pending):
            self._fold(i)
        self._fold_tools()
        return self._parts

    def _fold_tools(self) -> None:
        """Fold every streaming tool call's pending input text into its part."""
        for call_id in list(self._tool_pending):
            self._fold_tool(call_id)

    def _fold_tool(self, call_id: str) -> None:
        """Fold call ``call_id``'s pending input text into its part (parsed as far as it goes)."""
        pieces = self._tool_pending.pop(call_id, None)
        if pieces:
            text = self._tool_text[call_id] = self._tool_text[call_id] + "".join(pieces)
            i = self._tool_index[call_id]
            part = self._parts[i]
            assert isinstance(part, ToolPart)
            self._parts[i] = part.model_copy(update={"input": _partial_json(text)})

    def _fold(self, i: int) -> None:
        """Fold the pending text of part ``i`` into it."""
        pieces = self._pending.pop(i, None)
        if pieces:
            part = self._parts[i]
            assert isinstance(part, TextPart | ReasoningPart)
            self._parts[i] = part.model_copy(update={"text": part.text + "".join(pieces)})

    def _append_text(self, i: int, text: str, provider_metadata: JsonObject | None) -> None:
        """A text or reasoning delta: buffered, unless it carries metadata to merge."""
        if not provider_metadata:
            self._pending.setdefault(i, []).append(text)
            return
        self._fold(i)
        part = self._parts[i]
        assert isinstance(part, TextPart | ReasoningPart)
        self._parts[i] = part.model_copy(
            update={
                "text": part.text + text,
                "provider_metadata": _merge_meta(part.provider_metadata, provider_metadata),
            }
        )

    def apply(self, chunk: StepStreamChunk) -> None:
        """Fold one chunk into the step."""
        if self._tool_pending and not isinstance(chunk, ToolInputDeltaChunk):
            # Whatever comes next sees the inputs as if each delta had been applied.
            self._fold_tools()
        match chunk:
            case StartChunk() | FinishChunk():
                pass
            case StartStepChunk():
                self.parts.append(StepStartPart())
            case TextStartChunk():
                self._open[("text", chunk.id)] = len(self.parts)
                self.parts.append(
                    TextPart(text="", state="streaming", provider_metadata=chunk.provider_metadata)
                )
            case TextDeltaChunk():
                i = self._index("text", chunk.id, chunk.type)
                self._append_text(i, chunk.text, chunk.provider_metadata)
            case TextEndChunk():
                i = self._index("text", chunk.id, chunk.type)
                self._fold(i)
                part = self.parts[i]
                assert isinstance(part, TextPart)
                self.parts[i] = part.model_copy(
                    update={
                        "state": "done",
                        "provider_metadata": _merge_meta(
                            part.provider_metadata, chunk.provider_metadata
                        ),
                    }
                )
                del self._open[("text", chunk.id)]
            case ReasoningStartChunk():
                self._open[("reasoning", chunk.id)] = len(self.parts)
                self.parts.append(
                    ReasoningPart(
                        text="", state="streaming", provider_metadata=chunk.provider_metadata
                    )
                )
            case ReasoningDeltaChunk():
                i = self._index("reasoning", chunk.id, chunk.type)
                self._append_text(i, chunk.text, chunk.provider_metadata)
            case ReasoningEndChunk():
                i = self._index("reasoning", chunk.id, chunk.type)
                self._fold(i)
                r = self.parts[i]
                assert isinstance(r, ReasoningPart)
                self.parts[i] = r.model_copy(
                    update={
                        "state": "done",
                        "provider_metadata": _merge_meta(
                            r.provider_metadata, chunk.provider_metadata
                        ),
                    }
                )
                del self._open[("reasoning", chunk.id)]
            case ToolInputStartChunk():
                self._tool_text[chunk.id] = ""
                self._upsert_tool(
                    chunk.id,
                    tool_name=chunk.tool_name,
                    state="input-streaming",
                    provider_executed=chunk.provider_executed,
                    title=chunk.title,
                    call_provider_metadata=chunk.provider_metadata,
                )
            case ToolInputDeltaChunk():
                if chunk.id not in self._tool_text:
                    raise StreamProtocolError(f"tool-input-delta for unknown call {chunk.id!r}")
                self._tool_pending.setdefault(chunk.id, []).append(chunk.delta)
            case ToolInputEndChunk():
                if chunk.id not in self._tool_text:
                    raise StreamProtocolError(f"tool-input-end for unknown call {chunk.id!r}")
            case ToolCallChunk():
                self._tool_call(chunk)
            case ToolResultChunk():
                self._tool_result(chunk)
            case ToolErrorChunk():
                self._tool_error(chunk)
            case ToolApprovalRequestChunk():
                self._require_tool(chunk.tool_call_id)
                self._upsert_tool(
                    chunk.tool_call_id,
                    state="approval-requested",
                    approval=ToolApproval(id=chunk.approval_id),
                )
            case ToolOutputDeniedChunk():
                part = self._require_tool(chunk.tool_call_id)
                approval = part.approval or ToolApproval(id=chunk.tool_call_id)
                self._upsert_tool(
                    chunk.tool_call_id,
                    state="output-denied",
                    approval=approval.model_copy(update={"approved": False}),
                )
            case SourceChunk():
                self.parts.append(_source_part(chunk))
            case FileChunk():
                self.parts.append(
                    FilePart(
                        media_type=chunk.media_type,
                        url=chunk.url,
                        provider_metadata=chunk.provider_metadata,
                    )
                )
            case ReasoningFileChunk():
                self.parts.append(
                    FilePart(
                        media_type=chunk.media_type,
                        url=chunk.url,
                        provider_metadata=_merge_meta(
                            chunk.provider_metadata, {REASONING_FILE_KEY: True}
                        ),
                    )
                )
            case DataChunk():
                self._data(chunk)
            case FinishStepChunk():
                self.usage = chunk.usage
                self.finish_reason = chunk.finish_reason
                self.raw_finish_reason = chunk.raw_finish_reason
                self.provider_metadata = chunk.provider_metadata
            case ErrorChunk():
                self.error = chunk
            case AbortChunk():
                self.aborted = chunk

    # ---- helpers -----------------------------------------------------------

    def _index(self, kind: str, block_id: str, chunk_type: str) -> int:
        try:
            return self._open[(kind, block_id)]
        except KeyError:
            raise StreamProtocolError(
                f"{chunk_type} for {kind} block {block_id!r} that was not started"
            ) from None

    def _require_tool(self, call_id: str) -> ToolPart:
        i = self._tool_index.get(call_id)
        if i is None:
            raise StreamProtocolError(f"unknown tool call {call_id!r}")
        part = self.parts[i]
        assert isinstance(part, ToolPart)
        return part

    def _upsert_tool(self, call_id: str, **changes: Any) -> ToolPart:
        i = self._tool_index.get(call_id)
        if i is None:
            part = ToolPart(
                tool_call_id=call_id,
                tool_name=changes.pop("tool_name"),
                state=changes.pop("state", "input-streaming"),
                **changes,
            )
            self._tool_index[call_id] = len(self.parts)
            self.parts.append(part)
            return part
        current = self.parts[i]
        assert isinstance(current, ToolPart)
        updated = current.model_copy(update=changes)
        self.parts[i] = updated
        return updated

    def _tool_call(self, chunk: ToolCallChunk) -> None:
        known = self._tool_index.get(chunk.tool_call_id)
        meta = chunk.provider_metadata
        if known is not None:
            existing = self.parts[known]
            assert isinstance(existing, ToolPart)
            meta = _merge_meta(existing.call_provider_metadata, chunk.provider_metadata)
        # A call emitted again under the same id replaces the earlier one: the last is
        # canonical, and only it is validated and executed (TV-01).
        known_calls = [c.tool_call_id for c in self.tool_calls]
        if chunk.tool_call_id in known_calls:
            self.tool_calls[known_calls.index(chunk.tool_call_id)] = chunk
        else:
            self.tool_calls.append(chunk)
        if chunk.invalid:
            self._upsert_tool(
                chunk.tool_call_id,
                tool_name=chunk.tool_name,
                state="output-error",
                input=chunk.input,
                error_text=chunk.error_text or "invalid tool input",
                provider_executed=chunk.provider_executed,
                title=chunk.title,
                call_provider_metadata=meta,
            )
            return
        self._upsert_tool(
            chunk.tool_call_id,
            tool_name=chunk.tool_name,
            state="input-available",
            input=chunk.input,
            error_text=None,
            provider_executed=chunk.provider_executed,
            title=chunk.title,
            call_provider_metadata=meta,
        )

    def _tool_result(self, chunk: ToolResultChunk) -> None:
        part = self._tool_or_new(chunk.tool_call_id, chunk.tool_name, chunk.provider_executed)
        if part.state == "output-error" and part.error_text and not part.output:
            # A result following an invalid call is ignored (TV-03).
            return
        self._upsert_tool(
            chunk.tool_call_id,
            state="output-available",
            output=chunk.output,
            preliminary=chunk.preliminary,
            result_provider_metadata=chunk.provider_metadata,
        )

    def _tool_error(self, chunk: ToolErrorChunk) -> None:
        part = self._tool_or_new(chunk.tool_call_id, chunk.tool_name, chunk.provider_executed)
        if part.state == "output-error":
            return
        self._upsert_tool(
            chunk.tool_call_id,
            state="output-error",
            error_text=chunk.error_text,
            result_provider_metadata=chunk.provider_metadata,
        )

    def _tool_or_new(self, call_id: str, tool_name: str, provider_executed: bool) -> ToolPart:
        if call_id in self._tool_index:
            return self._require_tool(call_id)
        return self._upsert_tool(
            call_id,
            tool_name=tool_name,
            state="input-available",
            provider_executed=provider_executed,
        )

    def _data(self, chunk: DataChunk) -> None:
        if chunk.transient:
            return
        part = DataPart(name=chunk.name, id=chunk.id, data=chunk.data)
        if chunk.id is not None:
            for i, existing in enumerate(self.parts):
                if (
                    isinstance(existing, DataPart)
                    and existing.name == chunk.name
                    and existing.id == chunk.id
                ):
                    self.parts[i] = part
                    return
        self.parts.append(part)

    def finalize(self) -> list[MessagePart]:
        """The step's parts with every open text/reasoning block closed."""
        out: list[MessagePart] = []
        for part in self.parts:
            if isinstance(part, TextPart | ReasoningPart) and part.state == "streaming":
                out.append(part.model_copy(update={"state": "done"}))
            else:
                out.append(part)
        return out

    @property
    def has_content(self) -> bool:
        """Whether the step produced anything beyond its step-start marker."""
        return any(not isinstance(p, StepStartPart) for p in self.parts)


def _source_part(chunk: SourceChunk) -> MessagePart:
    src = chunk.source
    if isinstance(src, DocumentSource):
        return SourceDocumentPart(
            source_id=chunk.id,
            media_type=src.media_type,
            title=src.title,
            filename=src.filename,
            provider_metadata=chunk.provider_metadata,
        )
    return SourceUrlPart(
        source_id=chunk.id, url=src.url, title=src.title, provider_metadata=chunk.provider_metadata
    )


def _partial_json(text: str) -> Any:
    """Best-effort value of a partial JSON text (``None`` until it parses)."""
    try:
        return json.loads(text)
    except ValueError:
        return None


__all__ = ["StepReducer", "StreamProtocolError"]
