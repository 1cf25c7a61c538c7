"""A :class:`ModelCall` -> the parameters of one Messages API request.

Portable settings come only from ``call.settings`` and provider options only
from ``call.provider_options["anthropic"]``; neither can overwrite the other
(RT-06).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import unquote_to_bytes

from pai_grpc.domain import (
    AssistantModelMessage,
    JsonObject,
    ModelFilePart,
    ModelReasoningPart,
    ModelSettings,
    ModelTextPart,
    ModelToolCallPart,
    ModelToolResultPart,
    SystemModelMessage,
    ToolChoice,
    ToolModelMessage,
    UserModelMessage,
)
from pai_grpc.errors import ModelError
from pai_grpc.models._protocol import ModelCall
from pai_grpc.models.anthropic._errors import PROVIDER_BAD_REQUEST

#: ``max_tokens`` is required by the API; used when the settings leave it unset.
DEFAULT_MAX_TOKENS = 4096

# Body fields the request builder owns: a provider option of the same name is
# not sent, so provider options can never override portable settings (RT-06).
_OWNED_FIELDS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "stream",
        "max_tokens",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
    }
)
# Provider options that are mapped, not passed through in ``extra_body``.
_MAPPED_OPTIONS = frozenset({"thinking", "cache_control", "metadata", "disable_parallel_tool_use"})
# Anthropic keys a document block accepts from a file part's provider options.
_DOCUMENT_OPTIONS = ("citations", "context", "title")

Role = Literal["user", "assistant"]


class _HasProviderOptions(Protocol):
    @property
    def provider_options(self) -> JsonObject | None: ...


@dataclass(frozen=True)
class MessagesRequest:
    """The keyword arguments of one ``messages.create`` call (JSON values).

    Empty lists and ``None`` mean "omit the field".
    """

    model: str
    max_tokens: int
    messages: list[JsonObject]
    system: list[JsonObject] = field(default_factory=list)
    tools: list[JsonObject] = field(default_factory=list)
    tool_choice: JsonObject | None = None
    thinking: JsonObject | None = None
    metadata: JsonObject | None = None
    stop_sequences: list[str] | None = None
    extra_body: JsonObject = field(default_factory=dict)
    max_retries: int | None = None


def build_request(model_id: str, call: ModelCall) -> MessagesRequest:
    """Map ``call`` to Messages API parameters.

    Raises:
        ModelError: ``PROVIDER_BAD_REQUEST`` when the call holds content the
            Messages API cannot take (e.g. an unsupported file type).
    """
    options = _anthropic_options(call.provider_options)
    cache_control = _object_or_none(options.get("cache_control"))
    system = _system_blocks([*call.instructions, *_system_messages(call)])
    messages = _messages(call)
    if cache_control is not None:
        # Prompt caching: everything up to the marked block is cached, so the
        # last system block and the last message block cover the whole prompt.
        _mark_last(system, cache_control)
        if messages:
            _mark_last(messages[-1]["content"], cache_control)
    tools = _tools(call)
    settings = call.settings
    return MessagesRequest(
        model=model_id,
        max_tokens=settings.max_output_tokens or DEFAULT_MAX_TOKENS,
        messages=messages,
        system=system,
        tools=tools,
        tool_choice=_tool_choice(call.tool_choice, options) if tools else None,
        thinking=_object_or_none(options.get("thinking")),
        metadata=_object_or_none(options.get("metadata")),
        stop_sequences=list(settings.stop_sequences) if settings.stop_sequences else None,
        extra_body=_extra_body(settings, options),
        max_retries=settings.max_retries,
    )


def _anthropic_options(provider_options: JsonObject | None) -> JsonObject:
    options = (provider_options or {}).get("anthropic")
    return dict(options) if isinstance(options, dict) else {}


def _object_or_none(value: Any) -> JsonObject | None:
    return dict(value) if isinstance(value, dict) else None


def _extra_body(settings: ModelSettings, options: JsonObject) -> JsonObject:
    # The SDK (1.x and later) has no keyword arguments for the sampling
    # settings, so they travel in the request body via ``extra_body``. Seed,
    # presence and frequency penalties have no Anthropic equivalent.
    extra: JsonObject = {
        key: value
        for key, value in options.items()
        if key not in _OWNED_FIELDS and key not in _MAPPED_OPTIONS
    }
    sampling: dict[str, float | None] = {
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "top_k": settings.top_k,
    }
    extra.update({key: value for key, value in sampling.items() if value is not None})
    return extra


# --- system ------------------------------------------------------------------


def _system_messages(call: ModelCall) -> list[SystemModelMessage]:
    return [m for m in call.messages if isinstance(m, SystemModelMessage)]


def _system_blocks(messages: list[SystemModelMessage]) -> list[JsonObject]:
    blocks: list[JsonObject] = []
    for message in messages:
        if message.content:
            blocks.append(_with_cache_control({"type": "text", "text": message.content}, message))
    return blocks


# --- messages ----------------------------------------------------------------


def _messages(call: ModelCall) -> list[JsonObject]:
    turns: list[tuple[Role, list[JsonObject]]] = []
    for message in call.messages:
        if isinstance(message, UserModelMessage):
            turns.append(("user", _user_blocks(message)))
        elif isinstance(message, AssistantModelMessage):
            turns.append(("assistant", _assistant_blocks(message)))
        elif isinstance(message, ToolModelMessage):
            turns.append(("user", [_tool_result_block(part) for part in message.content]))
    merged = _merge_roles([(role, blocks) for role, blocks in turns if blocks])
    if merged and merged[-1][0] == "assistant":
        _trim_trailing_whitespace(merged[-1][1])
    return [{"role": role, "content": blocks} for role, blocks in merged if blocks]


def _merge_roles(
    turns: list[tuple[Role, list[JsonObject]]],
) -> list[tuple[Role, list[JsonObject]]]:
    # The API wants alternating roles; tool results and user input both travel
    # as "user", so consecutive messages of one role become one message.
    merged: list[tuple[Role, list[JsonObject]]] = []
    for role, blocks in turns:
        if merged and merged[-1][0] == role:
            merged[-1][1].extend(blocks)
        else:
            merged.append((role, list(blocks)))
    # tool_result blocks must come first in a user message.
    return [
        (role, _tool_results_first(blocks) if role == "user" else blocks) for role, blocks in merged
    ]


def _tool_results_first(blocks: list[JsonObject]) -> list[JsonObject]:
    results = [b for b in blocks if b.get("type") == "tool_result"]
    return results + [b for b in blocks if b.get("type") != "tool_result"]


def _trim_trailing_whitespace(blocks: list[JsonObject]) -> None:
    # The API rejects a final assistant message that ends with whitespace
    # (it would be a prefill the model continues from).
    if blocks and blocks[-1].get("type") == "text":
        text = str(blocks[-1]["text"]).rstrip()
        if text:
            blocks[-1] = {**blocks[-1], "text": text}
        else:
            blocks.pop()


def _user_blocks(message: UserModelMessage) -> list[JsonObject]:
    blocks: list[JsonObject] = []
    for part in message.content:
        if isinstance(part, ModelTextPart):
            if part.text:
                blocks.append(_with_cache_control({"type": "text", "text": part.text}, part))
        else:
            blocks.append(_file_block(part))
    if blocks:
        blocks[-1] = _with_cache_control(blocks[-1], message)
    return blocks


def _assistant_blocks(message: AssistantModelMessage) -> list[JsonObject]:
    blocks: list[JsonObject] = []
    for part in message.content:
        block: JsonObject | None
        if isinstance(part, ModelTextPart):
            block = {"type": "text", "text": part.text} if part.text else None
        elif isinstance(part, ModelReasoningPart):
            block = _reasoning_block(part)
        elif isinstance(part, ModelToolCallPart):
            block = {
                "type": "server_tool_use" if part.provider_executed else "tool_use",
                "id": part.tool_call_id,
                "name": part.tool_name,
                # The API needs an object; an invalid call's input is not one.
                "input": part.input if isinstance(part.input, dict) else {},
            }
        elif isinstance(part, ModelToolResultPart):
            block = _provider_tool_result_block(part)
        else:
            raise ModelError(
                f"Anthropic does not accept {part.media_type} files in assistant messages",
                reason=PROVIDER_BAD_REQUEST,
            )
        if block is not None:
            blocks.append(_with_cache_control(block, part))
    if blocks:
        blocks[-1] = _with_cache_control(blocks[-1], message)
    return blocks


def _reasoning_block(part: ModelReasoningPart) -> JsonObject | None:
    options = _anthropic_options(part.provider_options)
    if isinstance(options.get("redactedData"), str):
        return {"type": "redacted_thinking", "data": options["redactedData"]}
    if isinstance(options.get("signature"), str):
        # Replayed exactly as received: the signature covers the thinking text.
        return {"type": "thinking", "thinking": part.text, "signature": options["signature"]}
    # The API rejects thinking without a signature (e.g. another provider's
    # reasoning), so such reasoning is not sent.
    return None


def _provider_tool_result_block(part: ModelToolResultPart) -> JsonObject:
    # Results of server tools stay inline in the assistant message, in the
    # block type the server produced them with.
    options = _anthropic_options(part.provider_options)
    block_type = options.get("type")
    if not isinstance(block_type, str):
        block_type = _server_result_type(part.tool_name)
    output = part.output
    content = output.reason if output.type == "execution-denied" else output.value
    return {"type": block_type, "tool_use_id": part.tool_call_id, "content": content}


def _server_result_type(tool_name: str) -> str:
    if tool_name.startswith("tool_search_tool_"):
        return "tool_search_tool_result"
    return f"{tool_name}_tool_result"


def _tool_result_block(part: ModelToolResultPart) -> JsonObject:
    output = part.output
    block: JsonObject = {"type": "tool_result", "tool_use_id": part.tool_call_id}
    if output.type == "text":
        block["content"] = output.value
    elif output.type == "json":
        block["content"] = json.dumps(output.value)
    elif output.type == "error-text":
        block.update(content=output.value, is_error=True)
    elif output.type == "error-json":
        block.update(content=json.dumps(output.value), is_error=True)
    else:
        block.update(content=output.reason or "Tool execution denied.", is_error=True)
    return _with_cache_control(block, part)


def _file_block(part: ModelFilePart) -> JsonObject:
    media_type = part.media_type
    options = _anthropic_options(part.provider_options)
    if media_type.startswith("image/"):
        block: JsonObject = {"type": "image", "source": _binary_source(part)}
    elif media_type in ("application/pdf", "text/plain"):
        source = _binary_source(part) if media_type == "application/pdf" else _text_source(part)
        block = {"type": "document", "source": source}
        if part.filename:
            block["title"] = part.filename
        block.update({k: options[k] for k in _DOCUMENT_OPTIONS if k in options})
    else:
        raise ModelError(
            f"Anthropic does not accept {media_type} files", reason=PROVIDER_BAD_REQUEST
        )
    return _with_cache_control(block, part)


def _binary_source(part: ModelFilePart) -> JsonObject:
    if part.data.startswith(("http://", "https://")):
        return {"type": "url", "url": part.data}
    return {"type": "base64", "media_type": part.media_type, "data": _data_url_base64(part)}


def _text_source(part: ModelFilePart) -> JsonObject:
    text = base64.b64decode(_data_url_base64(part)).decode("utf-8")
    return {"type": "text", "media_type": "text/plain", "data": text}


def _data_url_base64(part: ModelFilePart) -> str:
    if not part.data.startswith("data:"):
        raise ModelError(
            f"file data must be a data: or http(s) URL, got {part.data[:20]!r}",
            reason=PROVIDER_BAD_REQUEST,
        )
    header, _, payload = part.data[5:].partition(",")
    if header.endswith(";base64"):
        return payload
    return base64.b64encode(unquote_to_bytes(payload)).decode("ascii")


def _with_cache_control(block: JsonObject, owner: _HasProviderOptions) -> JsonObject:
    options = _anthropic_options(owner.provider_options)
    cache_control = options.get("cache_control")
    if isinstance(cache_control, dict) and "cache_control" not in block:
        return {**block, "cache_control": dict(cache_control)}
    return block


def _mark_last(blocks: list[JsonObject], cache_control: JsonObject) -> None:
    if blocks and "cache_control" not in blocks[-1]:
        blocks[-1] = {**blocks[-1], "cache_control": dict(cache_control)}


# --- tools -------------------------------------------------------------------


def _tools(call: ModelCall) -> list[JsonObject]:
    tools: list[JsonObject] = []
    for tool in call.tools:
        entry: JsonObject = {"name": tool.name, "input_schema": dict(tool.input_schema)}
        if tool.description:
            entry["description"] = tool.description
        tools.append(entry)
    # Provider tools (web search, code execution, ...) are already in the
    # API's own shape.
    tools.extend(dict(d) for d in (call.provider_tools or {}).values() if isinstance(d, dict))
    return tools


def _tool_choice(choice: ToolChoice | None, options: JsonObject) -> JsonObject | None:
    disable_parallel = options.get("disable_parallel_tool_use")
    if choice is None:
        # The API default is "auto"; only spell it out to carry the flag.
        return {"type": "auto", "disable_parallel_tool_use": True} if disable_parallel else None
    if choice.mode == "none":
        return {"type": "none"}
    if choice.mode == "tool":
        if not choice.tool_name:
            raise ModelError("tool choice 'tool' needs a tool name", reason=PROVIDER_BAD_REQUEST)
        result: JsonObject = {"type": "tool", "name": choice.tool_name}
    else:
        result = {"type": "any" if choice.mode == "required" else "auto"}
    if isinstance(disable_parallel, bool):
        result["disable_parallel_tool_use"] = disable_parallel
    return result
