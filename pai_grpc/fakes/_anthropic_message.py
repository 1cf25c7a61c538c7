"""The complete ``Message`` a scripted stream amounts to (the non-streaming answer)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable

from pai_grpc.fakes._anthropic_turns import JsonObject, SseEvent


def message_from_events(events: Iterable[SseEvent]) -> JsonObject:
    """Accumulate stream events into the ``Message`` JSON the API returns unstreamed."""
    message: JsonObject = {}
    blocks: dict[int, JsonObject] = {}
    json_parts: dict[int, list[str]] = {}
    for event in events:
        data = event.data
        kind = data.get("type")
        if kind == "message_start":
            message = copy.deepcopy(data["message"])
        elif kind == "content_block_start":
            blocks[data["index"]] = copy.deepcopy(data["content_block"])
        elif kind == "content_block_delta":
            _apply_delta(
                blocks[data["index"]], data["delta"], json_parts.setdefault(data["index"], [])
            )
        elif kind == "message_delta":
            message.update({k: v for k, v in data["delta"].items()})
            message.setdefault("usage", {}).update(data.get("usage", {}))
    for index, parts in json_parts.items():
        if parts and "".join(parts):
            blocks[index]["input"] = json.loads("".join(parts))
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def _apply_delta(block: JsonObject, delta: JsonObject, json_parts: list[str]) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + delta["text"]
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta["thinking"]
    elif kind == "signature_delta":
        block["signature"] = delta["signature"]
    elif kind == "citations_delta":
        block.setdefault("citations", []).append(delta["citation"])
    elif kind == "input_json_delta":
        json_parts.append(delta["partial_json"])
