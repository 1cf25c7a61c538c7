"""Reasoning pruning before each provider attempt (RSN-01..04).

Assistant reasoning and reasoning files before the latest user message are
removed and messages left empty are dropped; the whole current user turn
keeps its reasoning across tool steps, suspension and resumption. With no
user message the request is left alone, since no completed turn can be
identified safely. Only the attempt's request changes: stored messages,
history queries and hooks keep the unpruned context.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
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


def strip_reasoning(message: ModelMessage) -> ModelMessage | None:
    """``message`` without reasoning parts; None when nothing else is left."""
    if not isinstance(message, AssistantModelMessage) or not any(
        map(_is_reasoning, message.content)
    ):
        return message
    kept = [p for p in message.content if not _is_reasoning(p)]
    return message.model_copy(update={"content": kept}) if kept else None


class StrippedPrefix:
    """A list of model messages that only grows, with its reasoning stripped as it grows.

    The context cache keeps one per thread: each message is looked at once,
    when it is added, so pruning a step's request does not scan the thread's
    whole history again (that scan grew with every message of a long thread).
    """

    __slots__ = ("messages", "stripped", "upto")

    def __init__(self) -> None:
        #: Every message added, in order (never changed in place: only appended to).
        self.messages: list[ModelMessage] = []
        #: The messages without their reasoning, emptied ones dropped.
        self.stripped: list[ModelMessage] = []
        #: ``upto[i]``: how many of ``stripped`` come from the first ``i`` messages
        #: (machine integers: a long thread's counts are not each an object).
        self.upto = array("q", [0])

    def extend(self, messages: Iterable[ModelMessage]) -> None:
        """Add messages at the end."""
        for message in messages:
            self.messages.append(message)
            kept = strip_reasoning(message)
            if kept is not None:
                self.stripped.append(kept)
            self.upto.append(len(self.stripped))

    def listed(self) -> ContextMessages:
        """Its messages now, as a list that remembers where they came from."""
        return ContextMessages(self.messages, self, len(self.messages))


class ContextMessages(list[ModelMessage]):
    """A step's model messages whose first ``cached`` were ``prefix.messages[:cached]``.

    A plain list to everyone else (hooks may change it); :func:`prune_reasoning`
    uses the prefix's stripped messages once it has checked the first
    ``cached`` are still the same.
    """

    __slots__ = ("cached", "prefix")

    def __init__(
        self, messages: Iterable[ModelMessage], prefix: StrippedPrefix, cached: int
    ) -> None:
        super().__init__(messages)
        self.prefix = prefix
        self.cached = cached

    def plus(self, extra: Sequence[ModelMessage]) -> ContextMessages:
        """These messages, then ``extra`` (remembering the same prefix)."""
        return ContextMessages([*self, *extra], self.prefix, self.cached)

    def known(self) -> int:
        """How many leading messages are still the prefix's (0 when they changed)."""
        cached = self.cached
        # Identical messages compare at C speed; an equal replacement is as good.
        if cached and len(self) >= cached and self[:cached] == self.prefix.messages[:cached]:
            return cached
        return 0


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
    if isinstance(messages, ContextMessages) and (known := messages.known()):
        # The cached history was stripped as it was cached: only what follows it
        # (this run's messages not committed yet, a hook's overlay) is looked at.
        stripped = messages.prefix.stripped
        upto = messages.prefix.upto
        if latest_user <= known:
            return [*stripped[: upto[latest_user]], *messages[latest_user:]]
        return [
            *stripped[: upto[known]],
            *_pruned(messages[known:latest_user]),
            *messages[latest_user:],
        ]
    return [*_pruned(messages[:latest_user]), *messages[latest_user:]]


def _pruned(head: Sequence[ModelMessage]) -> list[ModelMessage]:
    """``head`` (messages before the latest user message) without reasoning."""
    # Most contexts hold no reasoning before the latest user message, and every
    # step asks: the scan runs in C iterators over the messages' and parts' types
    # (isinstance on a pydantic model costs ~100 ns a call; each distinct type is
    # asked once).
    types = list(map(type, head))
    assistant = {t: issubclass(t, AssistantModelMessage) for t in set(types)}
    assistants = compress(head, map(assistant.__getitem__, types))
    kinds = set(map(type, chain.from_iterable(map(attrgetter("content"), assistants))))
    if not any(issubclass(kind, _MAYBE_REASONING) for kind in kinds):
        return list(head)
    return [kept for kept in map(strip_reasoning, head) if kept is not None]
