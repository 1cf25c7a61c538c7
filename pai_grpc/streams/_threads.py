"""Thread head change hints for WatchThread subscribers in this process."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ThreadHint:
    """What a committed write changed (a hint: watchers re-read the public head)."""

    thread_id: str
    kinds: tuple[str, ...] = ()
    message_ids: tuple[str, ...] = ()


@dataclass(eq=False)
class ThreadSubscription:
    """One WatchThread stream's inbox."""

    thread_id: str
    queue: asyncio.Queue[ThreadHint] = field(default_factory=asyncio.Queue)


class ThreadHub:
    """Fans thread hints out to the watchers of each thread."""

    def __init__(self) -> None:
        self._subs: dict[str, set[ThreadSubscription]] = {}

    def subscribe(self, thread_id: str) -> ThreadSubscription:
        """Start receiving hints for ``thread_id``."""
        sub = ThreadSubscription(thread_id)
        self._subs.setdefault(thread_id, set()).add(sub)
        return sub

    def unsubscribe(self, sub: ThreadSubscription) -> None:
        """Stop receiving hints."""
        subs = self._subs.get(sub.thread_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.thread_id]

    def publish(self, hint: ThreadHint) -> None:
        """Deliver a hint to every watcher of its thread."""
        for sub in self._subs.get(hint.thread_id, ()):
            sub.queue.put_nowait(hint)
