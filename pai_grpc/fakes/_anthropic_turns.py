"""Scripted turns of the fake Anthropic server, in the Messages API's real SSE format.

A turn is what the server answers one request with: a :class:`StreamTurn`
(a list of SSE events plus how to pace and end them) or an
:class:`HttpErrorTurn`. Builders compose turns from content blocks::

    reply(thinking_block("...", signature="sig"), text_block("Hello"))
    midstream_error("overloaded_error", after_events=3)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeAlias

JsonObject: TypeAlias = dict[str, Any]

DEFAULT_MESSAGE_ID = "msg_fake_01"
DEFAULT_MODEL = "claude-fake-1"
#: message_start usage of :func:`reply` unless ``start_usage`` is given.
DEFAULT_START_USAGE: JsonObject = {
    "input_tokens": 10,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
    "output_tokens": 1,
}
#: message_delta usage of :func:`reply` unless ``usage`` is given.
DEFAULT_DELTA_USAGE: JsonObject = {"output_tokens": 5}

Ending = Literal["complete", "error", "truncate", "disconnect", "stall"]


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event: ``event: <name>`` and one ``data:`` line of JSON."""

    event: str
    data: JsonObject

    def encode(self) -> bytes:
        """The event as it goes on the wire."""
        data = json.dumps(self.data, separators=(",", ":"))
        return f"event: {self.event}\ndata: {data}\n\n".encode()


@dataclass(frozen=True)
class ContentBlock:
    """One content block of a reply: its ``content_block_start`` payload and deltas."""

    start: JsonObject
    deltas: tuple[JsonObject, ...] = ()


@dataclass(frozen=True)
class StreamTurn:
    """A 200 ``text/event-stream`` answer.

    Attributes:
        events: The events, in order.
        delay: Seconds between events.
        first_event_delay: Seconds between the response headers and the first event.
        headers_delay: Seconds before the response headers (time to first byte).
        after_events: With an ending other than ``complete``: how many events
            are sent before it.
        ending: ``complete`` sends every event; ``error`` sends ``error`` as an
            ``event: error``; ``truncate`` ends the body cleanly; ``disconnect``
            drops the connection mid-body; ``stall`` sends every event but
            never ends the body (the server waits for the client to go away).
        error: The body of the ``event: error`` (``ending == "error"``).
    """

    events: tuple[SseEvent, ...]
    delay: float = 0.0
    first_event_delay: float = 0.0
    headers_delay: float = 0.0
    after_events: int | None = None
    ending: Ending = "complete"
    error: JsonObject | None = None

    def sent_events(self) -> tuple[SseEvent, ...]:
        """The events that go out before the ending."""
        if self.ending in ("complete", "stall") or self.after_events is None:
            return self.events
        return self.events[: self.after_events]


@dataclass(frozen=True)
class HttpErrorTurn:
    """An HTTP error answer with a JSON body like the real API's."""

    status: int
    body: JsonObject
    headers: tuple[tuple[str, str], ...] = ()
    headers_delay: float = 0.0


Turn: TypeAlias = StreamTurn | HttpErrorTurn


# --- content blocks ------------------------------------------------------------


def _words(text: str) -> list[str]:
    pieces: list[str] = []
    for word in text.split(" "):
        pieces.append(word if not pieces else " " + word)
    return [p for p in pieces if p]


def text_block(
    text: str,
    *,
    chunks: Sequence[str] | None = None,
    citations: Sequence[JsonObject] = (),
) -> ContentBlock:
    """A text block streamed as ``text_delta`` pieces (one per word by default).

    Citations are sent as ``citations_delta`` events before the text.
    """
    pieces = list(chunks) if chunks is not None else _words(text)
    deltas = [{"type": "citations_delta", "citation": dict(c)} for c in citations]
    deltas += [{"type": "text_delta", "text": piece} for piece in pieces]
    return ContentBlock({"type": "text", "text": ""}, tuple(deltas))


def thinking_block(
    thinking: str, *, signature: str, chunks: Sequence[str] | None = None
) -> ContentBlock:
    """A thinking block: ``thinking_delta`` pieces then one ``signature_delta``."""
    pieces = list(chunks) if chunks is not None else _words(thinking)
    deltas: list[JsonObject] = [{"type": "thinking_delta", "thinking": p} for p in pieces]
    deltas.append({"type": "signature_delta", "signature": signature})
    return ContentBlock({"type": "thinking", "thinking": "", "signature": ""}, tuple(deltas))


def redacted_thinking_block(data: str) -> ContentBlock:
    """A redacted thinking block (its data arrives whole in ``content_block_start``)."""
    return ContentBlock({"type": "redacted_thinking", "data": data})


def _json_fragments(value: JsonObject, fragments: Sequence[str] | None) -> tuple[JsonObject, ...]:
    if fragments is None:
        # Like the API: an empty first fragment, then the JSON in two pieces.
        text = json.dumps(value)
        fragments = ["", text[: len(text) // 2], text[len(text) // 2 :]]
    return tuple({"type": "input_json_delta", "partial_json": f} for f in fragments)


def tool_use_block(
    tool_use_id: str,
    name: str,
    input: JsonObject | None = None,
    *,
    fragments: Sequence[str] | None = None,
) -> ContentBlock:
    """A client tool call; ``fragments`` gives the exact ``partial_json`` pieces."""
    start = {"type": "tool_use", "id": tool_use_id, "name": name, "input": {}}
    return ContentBlock(start, _json_fragments(input or {}, fragments))


def server_tool_use_block(
    tool_use_id: str,
    name: str,
    input: JsonObject | None = None,
    *,
    fragments: Sequence[str] | None = None,
) -> ContentBlock:
    """A server tool call (e.g. ``web_search``) the API executes itself."""
    start = {"type": "server_tool_use", "id": tool_use_id, "name": name, "input": {}}
    return ContentBlock(start, _json_fragments(input or {}, fragments))


def server_tool_result_block(block_type: str, tool_use_id: str, content: Any) -> ContentBlock:
    """A server tool's result block, e.g. ``code_execution_tool_result``."""
    return ContentBlock({"type": block_type, "tool_use_id": tool_use_id, "content": content})


def web_search_result(
    url: str, title: str, *, encrypted_content: str = "enc", page_age: str | None = None
) -> JsonObject:
    """One result inside a :func:`web_search_result_block`."""
    return {
        "type": "web_search_result",
        "url": url,
        "title": title,
        "encrypted_content": encrypted_content,
        "page_age": page_age,
    }


def web_search_result_block(tool_use_id: str, results: Sequence[JsonObject]) -> ContentBlock:
    """A ``web_search_tool_result`` block holding ``results``."""
    return server_tool_result_block("web_search_tool_result", tool_use_id, list(results))


def url_citation(url: str, title: str | None, cited_text: str = "") -> JsonObject:
    """A citation of a web search result."""
    return {
        "type": "web_search_result_location",
        "url": url,
        "title": title,
        "cited_text": cited_text,
        "encrypted_index": "idx",
    }


def page_citation(
    document_title: str | None,
    *,
    document_index: int = 0,
    start_page: int = 1,
    end_page: int = 2,
    cited_text: str = "",
) -> JsonObject:
    """A citation of pages of a PDF document."""
    return {
        "type": "page_location",
        "cited_text": cited_text,
        "document_index": document_index,
        "document_title": document_title,
        "start_page_number": start_page,
        "end_page_number": end_page,
    }


def char_citation(
    document_title: str | None,
    *,
    document_index: int = 0,
    start: int = 0,
    end: int = 1,
    cited_text: str = "",
) -> JsonObject:
    """A citation of characters of a text document."""
    return {
        "type": "char_location",
        "cited_text": cited_text,
        "document_index": document_index,
        "document_title": document_title,
        "start_char_index": start,
        "end_char_index": end,
    }


# --- turns -------------------------------------------------------------------


def reply(
    *blocks: ContentBlock,
    stop_reason: str | None = "end_turn",
    stop_sequence: str | None = None,
    usage: JsonObject | None = None,
    start_usage: JsonObject | None = None,
    message_id: str = DEFAULT_MESSAGE_ID,
    model: str = DEFAULT_MODEL,
    delay: float = 0.0,
    first_event_delay: float = 0.0,
    headers_delay: float = 0.0,
) -> StreamTurn:
    """A complete streamed message made of ``blocks``.

    Events: ``message_start`` (with ``start_usage``), ``ping``, each block's
    start/deltas/stop, ``message_delta`` (stop reason and the cumulative
    ``usage``), ``message_stop``.
    """
    message: JsonObject = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": dict(DEFAULT_START_USAGE if start_usage is None else start_usage),
    }
    events = [SseEvent("message_start", {"type": "message_start", "message": message})]
    events.append(SseEvent("ping", {"type": "ping"}))
    for index, block in enumerate(blocks):
        events.append(
            SseEvent(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block.start},
            )
        )
        events += [
            SseEvent(
                "content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}
            )
            for d in block.deltas
        ]
        events.append(
            SseEvent("content_block_stop", {"type": "content_block_stop", "index": index})
        )
    delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
    delta_usage = dict(DEFAULT_DELTA_USAGE if usage is None else usage)
    events.append(
        SseEvent("message_delta", {"type": "message_delta", "delta": delta, "usage": delta_usage})
    )
    events.append(SseEvent("message_stop", {"type": "message_stop"}))
    return StreamTurn(
        tuple(events),
        delay=delay,
        first_event_delay=first_event_delay,
        headers_delay=headers_delay,
    )


def events_turn(*events: SseEvent | tuple[str, JsonObject], delay: float = 0.0) -> StreamTurn:
    """A turn of hand-written events, e.g. ``("message_delta", {...})``."""
    return StreamTurn(
        tuple(e if isinstance(e, SseEvent) else SseEvent(e[0], e[1]) for e in events),
        delay=delay,
    )


def error_body(error_type: str, message: str) -> JsonObject:
    """An error body as the API sends it."""
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": "req_fake_error",
    }


def http_error(
    status: int,
    error_type: str,
    message: str,
    *,
    retry_after: float | None = None,
    headers: Sequence[tuple[str, str]] = (),
) -> HttpErrorTurn:
    """An HTTP error answer, e.g. ``http_error(429, "rate_limit_error", "slow down")``.

    ``retry_after`` (seconds) sets both ``retry-after`` and ``retry-after-ms``;
    the SDK prefers the latter, so ``retry_after=0.001`` makes its retry wait
    one millisecond.
    """
    extra = list(headers)
    if retry_after is not None:
        extra += [
            ("retry-after", str(max(1, round(retry_after)))),
            ("retry-after-ms", str(max(1, round(retry_after * 1000)))),
        ]
    return HttpErrorTurn(status, error_body(error_type, message), tuple(extra))


def _base(turn: StreamTurn | None) -> StreamTurn:
    return turn if turn is not None else reply(text_block("Hello from the fake"))


def midstream_error(
    error_type: str = "overloaded_error",
    message: str = "Overloaded",
    *,
    after_events: int = 2,
    turn: StreamTurn | None = None,
) -> StreamTurn:
    """A 200 stream that sends ``after_events`` events of ``turn``, then ``event: error``."""
    return replace(
        _base(turn),
        ending="error",
        after_events=after_events,
        error=error_body(error_type, message),
    )


def truncated(*, after_events: int | None = None, turn: StreamTurn | None = None) -> StreamTurn:
    """A stream whose body ends cleanly before ``message_stop``.

    By default every event but the final ``message_stop`` is sent.
    """
    base = _base(turn)
    count = len(base.events) - 1 if after_events is None else after_events
    return replace(base, ending="truncate", after_events=count)


def disconnect(*, after_events: int = 2, turn: StreamTurn | None = None) -> StreamTurn:
    """A stream whose connection drops after ``after_events`` events."""
    return replace(_base(turn), ending="disconnect", after_events=after_events)
