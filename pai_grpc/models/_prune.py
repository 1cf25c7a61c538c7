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

from pai_grpc.domain import (
    AssistantModelMessage,
    ModelFilePart,
    ModelMessage,
    ModelReasoningPart,
    UserModelMessage,
)
from pai_grpc.models._messages import REASONING_FILE_KEY


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
    out: list[ModelMessage] = []
    for message in messages[:latest_user]:
        if isinstance(message, AssistantModelMessage) and any(map(_is_reasoning, message.content)):
            kept = [p for p in message.content if not _is_reasoning(p)]
            if not kept:
                continue
            message = message.model_copy(update={"content": kept})
        out.append(message)
    out.extend(messages[latest_user:])
    return out
