"""Raw Messages API stream events -> canonical step-stream chunks.

Pure mapping, no I/O: :class:`StreamMapper` takes each event as the JSON the
API sent (``event.to_dict()``) and returns the chunks it produces. Dispatch is
on the ``type`` field, never on the SDK class: the SDK builds unknown events
and blocks loosely into whichever class comes first in its union.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pai_grpc.domain import (
    DocumentSource,
    FinishReason,
    FinishStepChunk,
    JsonObject,
    JsonValue,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    ResponseInfo,
    SourceChunk,
    StepStreamChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolCallChunk,
    ToolInputDeltaChunk,
    ToolInputEndChunk,
    ToolInputStartChunk,
    ToolResultChunk,
    UrlSource,
    Usage,
)

_FINISH_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool-calls",
    "refusal": "content-filter",
}
# Citation locations in documents; the media type is what the location implies.
_DOCUMENT_CITATIONS = {
    "char_location": "text/plain",
    "content_block_location": "text/plain",
    "page_location": "application/pdf",
}


def finish_reason(stop_reason: str | None) -> FinishReason:
    """The canonical finish reason of an Anthropic ``stop_reason``."""
    return _FINISH_REASONS.get(stop_reason or "", "other")


def usage_from_anthropic(raw: Mapping[str, Any]) -> Usage:
    """Canonical usage from an Anthropic usage object.

    Anthropic reports uncached input only in ``input_tokens``; the total input
    adds the tokens written to and read from the prompt cache.
    """
    uncached = _int(raw.get("input_tokens"))
    cache_write = _int(raw.get("cache_creation_input_tokens"))
    cache_read = _int(raw.get("cache_read_input_tokens"))
    output = _int(raw.get("output_tokens"))
    parts = [n for n in (uncached, cache_write, cache_read) if n is not None]
    input_tokens = sum(parts) if parts else None
    details = raw.get("output_tokens_details")
    reasoning = _int(details.get("thinking_tokens")) if isinstance(details, dict) else None
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output,
        total_tokens=(
            input_tokens + output if input_tokens is not None and output is not None else None
        ),
        reasoning_tokens=reasoning,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class _Block:
    """What the mapper remembers about one open content block."""

    kind: Literal["text", "reasoning", "tool", "ignored"]
    id: str
    tool_name: str = ""
    provider_executed: bool = False
    start_input: JsonValue = None
    json_parts: list[str] = field(default_factory=list)
    sources: int = 0


@dataclass
class StreamMapper:
    """Maps one message's raw stream events to canonical chunks.

    Feed every event in order with :meth:`feed`; after ``message_stop`` the
    mapper is :attr:`finished` and has produced the step's ``finish-step``.
    """

    message_id: str = ""
    model: str = ""
    stop_reason: str | None = None
    stop_sequence: str | None = None
    finished: bool = False
    _usage: JsonObject = field(default_factory=dict)
    _extra_metadata: JsonObject = field(default_factory=dict)
    _blocks: dict[int, _Block] = field(default_factory=dict)
    # Server tool calls by id, so their results can name the tool and input.
    _server_calls: dict[str, tuple[str, JsonValue]] = field(default_factory=dict)

    def feed(self, event: Mapping[str, Any]) -> list[StepStreamChunk]:
        """The chunks one raw event produces (often none)."""
        if self.finished:
            return []
        kind = event.get("type")
        if kind == "message_start":
            self._message_start(_obj(event.get("message")))
            return []
        if kind == "content_block_start":
            return self._block_start(_index(event), _obj(event.get("content_block")))
        if kind == "content_block_delta":
            return self._block_delta(_index(event), _obj(event.get("delta")))
        if kind == "content_block_stop":
            return self._block_stop(_index(event))
        if kind == "message_delta":
            self._message_delta(_obj(event.get("delta")), _obj(event.get("usage")))
            return []
        if kind == "message_stop":
            self.finished = True
            return [self.finish_step()]
        return []  # ping and event types this mapper does not know

    def finish_step(self) -> FinishStepChunk:
        """The step's ``finish-step`` chunk from what the stream reported so far."""
        metadata: JsonObject = {
            "usage": dict(self._usage),
            "stop_sequence": self.stop_sequence,
            **self._extra_metadata,
        }
        return FinishStepChunk(
            usage=usage_from_anthropic(self._usage),
            finish_reason=finish_reason(self.stop_reason),
            raw_finish_reason=self.stop_reason,
            provider_metadata={"anthropic": metadata},
            response=ResponseInfo(id=self.message_id, model_id=self.model),
        )

    # --- message -------------------------------------------------------------

    def _message_start(self, message: JsonObject) -> None:
        self.message_id = str(message.get("id") or "")
        self.model = str(message.get("model") or "")
        self._usage = dict(_obj(message.get("usage")))

    def _message_delta(self, delta: JsonObject, usage: JsonObject) -> None:
        if delta.get("stop_reason") is not None:
            self.stop_reason = str(delta["stop_reason"])
        if "stop_sequence" in delta:
            self.stop_sequence = delta["stop_sequence"]
        for key in ("container", "stop_details"):
            if delta.get(key) is not None:
                self._extra_metadata[key] = delta[key]
        # Usage in message_delta is cumulative: overwrite, and keep the
        # message_start figures the delta does not repeat.
        self._usage.update({k: v for k, v in usage.items() if v is not None})

    # --- content blocks ------------------------------------------------------

    def _block_id(self, index: int) -> str:
        return f"{self.message_id}:{index}" if self.message_id else str(index)

    def _block_start(self, index: int, block: JsonObject) -> list[StepStreamChunk]:
        kind = str(block.get("type"))
        block_id = self._block_id(index)
        if kind == "text":
            self._blocks[index] = _Block("text", block_id)
            text = block.get("text")
            chunks: list[StepStreamChunk] = [TextStartChunk(id=block_id)]
            if isinstance(text, str) and text:
                chunks.append(TextDeltaChunk(id=block_id, text=text))
            return chunks
        if kind == "thinking":
            self._blocks[index] = _Block("reasoning", block_id)
            chunks = [ReasoningStartChunk(id=block_id)]
            thinking = block.get("thinking")
            if isinstance(thinking, str) and thinking:
                chunks.append(ReasoningDeltaChunk(id=block_id, text=thinking))
            signature = block.get("signature")
            if isinstance(signature, str) and signature:
                chunks.append(_signature_delta(block_id, signature))
            return chunks
        if kind == "redacted_thinking":
            self._blocks[index] = _Block("reasoning", block_id)
            metadata = {"anthropic": {"redactedData": block.get("data")}}
            return [ReasoningStartChunk(id=block_id, provider_metadata=metadata)]
        if kind in ("tool_use", "server_tool_use"):
            tool = _Block(
                "tool",
                str(block.get("id")),
                tool_name=str(block.get("name")),
                provider_executed=kind == "server_tool_use",
                start_input=block.get("input"),
            )
            self._blocks[index] = tool
            return [
                ToolInputStartChunk(
                    id=tool.id, tool_name=tool.tool_name, provider_executed=tool.provider_executed
                )
            ]
        self._blocks[index] = _Block("ignored", block_id)
        if kind.endswith("_tool_result"):
            return [self._server_tool_result(kind, block)]
        return []

    def _server_tool_result(self, kind: str, block: JsonObject) -> ToolResultChunk:
        call_id = str(block.get("tool_use_id"))
        name, tool_input = self._server_calls.get(
            call_id, (kind.removesuffix("_tool_result"), None)
        )
        return ToolResultChunk(
            tool_call_id=call_id,
            tool_name=name,
            input=tool_input,
            output=block.get("content"),
            provider_executed=True,
        )

    def _block_delta(self, index: int, delta: JsonObject) -> list[StepStreamChunk]:
        block = self._blocks.get(index)
        if block is None or block.kind == "ignored":
            return []
        kind = delta.get("type")
        if kind == "text_delta" and block.kind == "text":
            text = str(delta.get("text") or "")
            return [TextDeltaChunk(id=block.id, text=text)] if text else []
        if kind == "thinking_delta" and block.kind == "reasoning":
            text = str(delta.get("thinking") or "")
            return [ReasoningDeltaChunk(id=block.id, text=text)] if text else []
        if kind == "signature_delta" and block.kind == "reasoning":
            return [_signature_delta(block.id, str(delta.get("signature") or ""))]
        if kind == "input_json_delta" and block.kind == "tool":
            fragment = str(delta.get("partial_json") or "")
            if not fragment:
                return []
            block.json_parts.append(fragment)
            return [ToolInputDeltaChunk(id=block.id, delta=fragment)]
        if kind == "citations_delta" and block.kind == "text":
            source = _source(block, _obj(delta.get("citation")))
            return [source] if source is not None else []
        return []

    def _block_stop(self, index: int) -> list[StepStreamChunk]:
        block = self._blocks.pop(index, None)
        if block is None or block.kind == "ignored":
            return []
        if block.kind == "text":
            return [TextEndChunk(id=block.id)]
        if block.kind == "reasoning":
            return [ReasoningEndChunk(id=block.id)]
        return [ToolInputEndChunk(id=block.id), self._tool_call(block)]

    def _tool_call(self, block: _Block) -> ToolCallChunk:
        text = "".join(block.json_parts)
        invalid = False
        error_text: str | None = None
        tool_input: JsonValue
        if not text:
            # Input that did not stream arrives whole in content_block_start.
            tool_input = block.start_input if isinstance(block.start_input, dict) else {}
        else:
            try:
                tool_input = json.loads(text)
            except json.JSONDecodeError as e:
                tool_input, invalid = None, True
                error_text = f"Invalid JSON in tool input: {e}"
        if block.provider_executed:
            self._server_calls[block.id] = (block.tool_name, tool_input)
        return ToolCallChunk(
            tool_call_id=block.id,
            tool_name=block.tool_name,
            input=tool_input,
            provider_executed=block.provider_executed,
            invalid=invalid,
            error_text=error_text,
        )


def _signature_delta(block_id: str, signature: str) -> ReasoningDeltaChunk:
    # The signature must be replayed with the thinking text, so it travels as
    # metadata of an empty reasoning delta.
    return ReasoningDeltaChunk(
        id=block_id, text="", provider_metadata={"anthropic": {"signature": signature}}
    )


def _source(block: _Block, citation: JsonObject) -> SourceChunk | None:
    kind = citation.get("type")
    source: UrlSource | DocumentSource
    if kind == "web_search_result_location":
        source = UrlSource(url=str(citation.get("url")), title=_str_or_none(citation.get("title")))
    elif kind == "search_result_location":
        source = UrlSource(
            url=str(citation.get("source")), title=_str_or_none(citation.get("title"))
        )
    elif isinstance(kind, str) and kind in _DOCUMENT_CITATIONS:
        source = DocumentSource(
            media_type=_DOCUMENT_CITATIONS[kind],
            title=_str_or_none(citation.get("document_title")) or "Untitled document",
        )
    else:
        return None
    source_id = f"{block.id}:source:{block.sources}"
    block.sources += 1
    return SourceChunk(id=source_id, source=source, provider_metadata={"anthropic": citation})


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _obj(value: Any) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _index(event: Mapping[str, Any]) -> int:
    index = event.get("index")
    return index if isinstance(index, int) else -1
