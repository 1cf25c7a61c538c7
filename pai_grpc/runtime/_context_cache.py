"""A per-process cache of thread contexts, extended incrementally between steps.

Long threads would otherwise re-read and re-convert their whole history on
every model step. An entry holds the durable messages below a message count
together with their model messages, valid for one ``history_epoch`` of the
thread: appends extend it, any rewrite of existing messages (regenerate,
visibility, tool-part updates) bumps the epoch and forces a full reload.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from pai_grpc.domain import Message, ModelMessage
from pai_grpc.models import to_model_messages
from pai_grpc.runtime._records import message_from_record
from storage import MessageRecord, Store, ThreadRecord

#: Threads kept; the least recently used entry goes first.
CACHE_THREADS = 2_000


@dataclass
class _Entry:
    epoch: int
    count: int
    messages: list[Message] = field(default_factory=list)
    model_messages: list[list[ModelMessage]] = field(default_factory=list)


@dataclass(frozen=True)
class Context:
    """A thread's context-visible messages below ``count`` and their model messages."""

    head: ThreadRecord
    messages: list[Message]
    model_messages: list[ModelMessage]

    @property
    def count(self) -> int:
        """The number of messages in the thread when the context was read (the anchor)."""
        return self.head.message_count


class ContextCache:
    """Context-view reads with incremental refresh."""

    def __init__(self, store: Store, *, size: int = CACHE_THREADS) -> None:
        self._store = store
        self._size = size
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    async def read(self, scope: str, thread_id: str) -> Context:
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
        self._extend(entry, head, records)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)
        flat = [m for group in entry.model_messages for m in group]
        return Context(head=head, messages=list(entry.messages), model_messages=flat)

    @staticmethod
    def _extend(entry: _Entry, head: ThreadRecord, records: list[MessageRecord]) -> None:
        for record in records:
            message = message_from_record(record)
            entry.messages.append(message)
            entry.model_messages.append(to_model_messages([message]))
        entry.count = head.message_count

    def forget(self, thread_id: str) -> None:
        """Drop a thread's entries (e.g. when it is deleted)."""
        for key in [k for k in self._entries if k[1] == thread_id]:
            del self._entries[key]
