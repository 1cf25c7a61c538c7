"""A per-process cache of thread contexts, extended incrementally between steps.

Long threads would otherwise re-read and re-convert their whole history on
every model step. An entry holds the durable messages below a message count
together with their model messages, valid for one ``history_epoch`` of the
thread: appends extend it, any rewrite of existing messages (regenerate,
visibility, tool-part updates) bumps the epoch and forces a full reload.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field

from pai_grpc.domain import Message, ModelMessage
from pai_grpc.models import to_model_messages
from pai_grpc.runtime._records import message_from_record
from storage import MessageRecord, Store, ThreadRecord

#: Total bytes of cached contexts (default); the least recently used thread goes first.
CACHE_BYTES = 64 << 20
#: Per-message memory besides its content: the domain message, its model
#: messages, their parts, ids, timestamps and dicts (measured, see below).
MESSAGE_OVERHEAD_BYTES = 4_500


def message_size(record: MessageRecord) -> int:
    """Approximate memory of one cached message: a fixed part plus its content once.

    Measured with tracemalloc on cached threads of 120 messages: ≈4.5 KB per
    message whatever its size (0.1, 1 and 5 KB of text), plus about its JSON
    size once, since the domain message and its model messages share the
    text strings. The earlier estimate (1 KB + twice the JSON) undercounted
    short messages almost fourfold, so the cache's byte budget was exceeded.
    """
    body = json.dumps(record.parts, ensure_ascii=False, separators=(",", ":"))
    meta = json.dumps(record.metadata, ensure_ascii=False, separators=(",", ":"))
    return MESSAGE_OVERHEAD_BYTES + len(body) + len(meta)


@dataclass
class _Entry:
    epoch: int
    count: int
    messages: list[Message] = field(default_factory=list)
    model_messages: list[list[ModelMessage]] = field(default_factory=list)
    #: Approximate bytes held by this entry.
    size: int = 0


@dataclass(frozen=True)
class ContextSnapshot:
    """A thread's context-visible messages below ``count`` and their model messages."""

    head: ThreadRecord
    messages: list[Message]
    model_messages: list[ModelMessage]

    @property
    def count(self) -> int:
        """The number of messages in the thread when the context was read (the anchor)."""
        return self.head.message_count


class ContextCache:
    """Context-view reads with incremental refresh, bounded by total bytes."""

    def __init__(self, store: Store, *, max_bytes: int = CACHE_BYTES) -> None:
        self._store = store
        #: The byte budget; least recently used threads are evicted beyond it.
        self.max_bytes = max_bytes
        #: Approximate bytes of every cached entry.
        self.size = 0
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    async def read(self, scope: str, thread_id: str) -> ContextSnapshot:
        """The thread's context now (raises storage NotFound when the thread is gone)."""
        key = (scope, thread_id)
        entry = self._entries.get(key)
        head, records = await self._store.context(
            scope, thread_id, from_position=entry.count if entry else 0
        )
        if entry is None or head.history_epoch != entry.epoch or head.message_count < entry.count:
            if entry is not None:
                head, records = await self._store.context(scope, thread_id)
            entry = _Entry(epoch=head.history_epoch, count=0)
        # Re-account the entry (a concurrent read may have evicted or grown it).
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= old.size
        self._extend(entry, head, records)
        flat = [m for group in entry.model_messages for m in group]
        context = ContextSnapshot(head=head, messages=list(entry.messages), model_messages=flat)
        self._entries[key] = entry
        self.size += entry.size
        while self.size > self.max_bytes and self._entries:
            _, dropped = self._entries.popitem(last=False)
            self.size -= dropped.size
        return context

    @staticmethod
    def _extend(entry: _Entry, head: ThreadRecord, records: list[MessageRecord]) -> None:
        for record in records:
            message = message_from_record(record)
            entry.messages.append(message)
            entry.model_messages.append(to_model_messages([message]))
            entry.size += message_size(record)
        entry.count = head.message_count
