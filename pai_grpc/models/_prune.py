"""Reasoning pruning before each provider attempt (RSN-01..04).

Assistant reasoning and reasoning files before the latest user message are
removed and messages left empty are dropped; the whole current user turn
keeps its reasoning across tool steps, suspension and resumption. With no
user message the request is left alone, since no completed turn can be
identified safely. Only the attempt's request changes: stored messages,
history queries and hooks keep the unpruned context.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, compress
from operator import attrgetter

from pai_grpc.domain import (
    AssistantModelMessage,
    ModelFilePart,
    ModelMessage,
    ModelReasoningPart,
    UserModelMessage,
)
from pai_grpc.models._messages import REASONING_FILE_KEY

#: Part types that can hold reasoning (a file only with the reasoning-file option).
_MAYBE_REASONING = (ModelReasoningPart, ModelFilePart)


def _is_reasoning(part: object) -> bool:
    if isinstance(part, ModelReasoningPart):
        return True
    return isinstance(part, ModelFilePart) and bool(
        (part.provider_options or {}).get(REASONING_FILE_KEY)
    )


def prune_reasoning(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The messages with reasoning before the latest user message removed."""
    # Every provider attempt prunes the whole context: the latest user message is
    # found from the end, and a message is rebuilt only when it holds reasoning.
    latest_user = next(
        (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], UserModelMessage)),
        None,
    )
    if latest_user is None:
        return list(messages)
    head = messages[:latest_user]
    # Most contexts hold no reasoning before the latest user message, and every
    # step asks: the scan runs in C iterators over the messages' and parts' types
    # (isinstance on a pydantic model costs ~100 ns a call; each distinct type is
    # asked once).
    types = list(map(type, head))
    assistant = {t: issubclass(t, AssistantModelMessage) for t in set(types)}
    assistants = compress(head, map(assistant.__getitem__, types))
    kinds = set(map(type, chain.from_iterable(map(attrgetter("content"), assistants))))
    if not any(issubclass(kind, _MAYBE_REASONING) for kind in kinds):
        return list(messages)
    out: list[ModelMessage] = []
    for message in head:
        if isinstance(message, AssistantModelMessage) and any(map(_is_reasoning, message.content)):
            kept = [p for p in message.content if not _is_reasoning(p)]
            if not kept:
                continue
            message = message.model_copy(update={"content": kept})
        out.append(message)
    out.extend(messages[latest_user:])
    return out
