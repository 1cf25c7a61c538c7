"""A per-process cache of thread contexts, extended incrementally between steps.

Long threads would otherwise re-read and re-convert their whole history on
every model step. An entry holds the durable messages below a message count
together with their model messages, valid for one ``history_epoch`` of the
thread: appends extend it, any rewrite of existing messages (regenerate,
visibility, tool-part updates) bumps the epoch and forces a full reload.

The process's own commits extend entries as they commit (no read needed for
what this process wrote), and a run handed straight from its Send to this
process's runner starts from the head that Send committed, without a read.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field

from pai_grpc.domain import Message, ModelMessage
from pai_grpc.models import StrippedPrefix, to_model_messages
from pai_grpc.runtime._records import message_from_record
from storage import CommitResult, MessageRecord, Store, ThreadRecord, WriteSet

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
    #: The messages' model messages, flat, with their reasoning stripped as they
    #: were added (a snapshot copies the list, no flattening; pruning a step's
    #: request does not scan them again).
    model_messages: StrippedPrefix = field(default_factory=StrippedPrefix)
    #: Approximate bytes held by this entry.
    size: int = 0
    #: The thread head as this process just committed it, for the next read
    #: only (set by :meth:`ContextCache.prime`, cleared by any later change).
    fresh: ThreadRecord | None = None


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
        #: thread id -> the scopes it is cached under, so a change another process
        #: announces (every process hears every change) finds its entry directly.
        self._scopes: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    async def read(self, scope: str, thread_id: str) -> ContextSnapshot:
        """The thread's context now (raises storage NotFound when the thread is gone)."""
        key = (scope, thread_id)
        entry = self._entries.get(key)
        if entry is not None and entry.fresh is not None:
            head, entry.fresh = entry.fresh, None
            self._entries.move_to_end(key)
            return self._snapshot(entry, head)
        start = entry.count if entry is not None else 0
        head, records = await self._store.context(scope, thread_id, from_position=start)
        if entry is not None and (
            entry.count != start
            or head.history_epoch != entry.epoch
            or head.message_count < entry.count
        ):
            # Rewritten history, or this process's own commit extended the entry
            # while the read was in flight: the records no longer fit it.
            head, records = await self._store.context(scope, thread_id)
            entry = None
        if entry is None:
            entry = _Entry(epoch=head.history_epoch, count=0)
        # Re-account the entry (a concurrent read may have evicted or grown it).
        self._drop(key)
        self._extend(entry, head, records)
        self._keep(key, entry)
        return self._snapshot(entry, head)

    def committed(self, ws: WriteSet, result: CommitResult) -> None:
        """Extend a cached entry with the messages this process just committed.

        Only a contiguous append in the same history epoch extends an entry;
        a rewrite drops it, anything else leaves it for the next read to refresh.
        Any change ends a primed head's freshness.
        """
        head = result.thread
        if head is None:
            return
        key = (ws.scope, ws.thread_id)
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.fresh = None
        if head.history_epoch != entry.epoch:
            self._drop(key)
            return
        appended = result.messages
        if (
            not appended
            or appended[0].position != entry.count
            or appended[-1].position + 1 != head.message_count
            or len(appended) != head.message_count - entry.count
        ):
            return
        self._drop(key)
        self._extend(entry, head, appended)
        self._keep(key, entry)

    def prime(self, scope: str, result: CommitResult) -> None:
        """Let the next read of this thread use the head ``result`` just committed.

        Used when a Send hands its run to this process's runner: when the
        entry holds every message below the head (or the commit wrote the
        thread's first messages) the run's first step needs no read.
        """
        head = result.thread
        if head is None:
            return
        key = (scope, head.id)
        entry = self._entries.get(key)
        appended = result.messages
        if entry is None and appended and len(appended) == head.message_count:
            entry = _Entry(epoch=head.history_epoch, count=0)
            self._extend(entry, head, appended)
            self._keep(key, entry)
        if (
            entry is not None
            and entry.epoch == head.history_epoch
            and entry.count == head.message_count
        ):
            entry.fresh = head

    def changed(self, thread_id: str) -> None:
        """Another writer changed the thread: a primed head is no longer the latest."""
        for scope in self._scopes.get(thread_id, ()):
            self._entries[(scope, thread_id)].fresh = None

    def _drop(self, key: tuple[str, str]) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= old.size
            self._unindex(key)

    def _keep(self, key: tuple[str, str], entry: _Entry) -> None:
        self._entries[key] = entry
        self._scopes.setdefault(key[1], set()).add(key[0])
        self.size += entry.size
        while self.size > self.max_bytes and self._entries:
            dropped_key, dropped = self._entries.popitem(last=False)
            self.size -= dropped.size
            self._unindex(dropped_key)

    def _unindex(self, key: tuple[str, str]) -> None:
        scope, thread_id = key
        scopes = self._scopes.get(thread_id)
        if scopes is not None:
            scopes.discard(scope)
            if not scopes:
                del self._scopes[thread_id]

    @staticmethod
    def _snapshot(entry: _Entry, head: ThreadRecord) -> ContextSnapshot:
        return ContextSnapshot(
            head=head, messages=list(entry.messages), model_messages=entry.model_messages.listed()
        )

    @staticmethod
    def _extend(entry: _Entry, head: ThreadRecord, records: list[MessageRecord]) -> None:
        for record in records:
            if not record.visible_context:
                continue  # a commit's appends include messages outside the context view
            message = message_from_record(record)
            entry.messages.append(message)
            entry.model_messages.extend(to_model_messages([message]))
            entry.size += message_size(record)
        entry.count = head.message_count
