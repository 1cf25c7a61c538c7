"""Wake-ups between writers and waiters, inside one process and across processes.

Writers attach notifications to their write sets (delivered by PostgreSQL
on commit) and fire the same signals locally right after committing.
Listeners in every process turn notifications back into local signals:

* ``runnable``  - runners should claim now;
* ``run``       - a run's log or status changed (stream readers wake up);
* ``thread``    - a thread head changed (WatchThread re-reads the head);
* ``cancel``    - a run's lease holder should cancel it.

On SQLite nothing crosses processes; runners and readers poll as a fallback.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable

from pai_grpc.streams import Broker, ThreadHint, ThreadHub
from storage import Listener, Store

log = logging.getLogger("pai_grpc.signals")

RUNNABLE = "runnable"
RUN = "run"
THREAD = "thread"
CANCEL = "cancel"


class Signals:
    """The signal hub of one process."""

    def __init__(self, store: Store, broker: Broker, threads: ThreadHub) -> None:
        self._store = store
        self._broker = broker
        self._threads = threads
        self._runnable: list[Callable[[], None]] = []
        self._cancel: list[Callable[[str], None]] = []
        self._remote_thread: list[Callable[[str], None]] = []
        self._listener: Listener | None = None
        #: Marks this hub's own thread notifications: PostgreSQL echoes them back to
        #: the sender, whose watchers were already told locally on commit.
        self._origin = secrets.token_hex(8)

    # ---- subscriptions ------------------------------------------------------

    def on_runnable(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever work may have become runnable."""
        self._runnable.append(callback)

    def on_cancel(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(run_id)`` when a cancellation is requested."""
        self._cancel.append(callback)

    def on_remote_thread(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(thread_id)`` when another process changed a thread."""
        self._remote_thread.append(callback)

    async def start(self) -> None:
        """Listen for other processes' notifications (PostgreSQL only)."""
        self._listener = self._store.listener(
            {
                RUNNABLE: lambda _p: self.fire_runnable(),
                RUN: self._broker.notify,
                THREAD: self._thread_note,
                CANCEL: self.fire_cancel,
            }
        )
        if self._listener is not None:
            await self._listener.start()

    async def close(self) -> None:
        """Stop listening."""
        if self._listener is not None:
            await self._listener.close()

    # ---- local delivery -----------------------------------------------------

    def fire_runnable(self) -> None:
        """Wake local runners."""
        for callback in self._runnable:
            callback()

    def fire_cancel(self, run_id: str) -> None:
        """Ask local runners to cancel ``run_id`` if they hold it."""
        for callback in self._cancel:
            callback(run_id)

    def fire_thread(self, hint: ThreadHint) -> None:
        """Wake local watchers of a thread."""
        if "deleted" in hint.kinds:
            # Its runs are gone: readers must not be answered from memory any more.
            self._broker.forget_thread(hint.thread_id)
        self._threads.publish(hint)

    def _thread_note(self, payload: str) -> None:
        try:
            data = json.loads(payload)
            if data.get("o") == self._origin:
                return  # our own commit: delivered locally already (a second copy would
                # repeat its message ids, or replay a removal or visibility change)
            hint = ThreadHint(
                thread_id=str(data["t"]),
                kinds=tuple(data.get("k", ())),
                message_ids=tuple(data.get("m", ())),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("ignoring malformed thread notification %r", payload)
            return
        for callback in self._remote_thread:
            callback(hint.thread_id)
        self.fire_thread(hint)

    # ---- notifications for write sets --------------------------------------

    def note_runnable(self) -> tuple[str, str]:
        """A notification that wakes runners everywhere."""
        return (self._store.channel(RUNNABLE), "")

    def note_run(self, run_id: str) -> tuple[str, str]:
        """A notification that wakes readers of ``run_id`` everywhere."""
        return (self._store.channel(RUN), run_id)

    def note_cancel(self, run_id: str) -> tuple[str, str]:
        """A notification asking the lease holder of ``run_id`` to cancel it."""
        return (self._store.channel(CANCEL), run_id)

    def note_thread(self, hint: ThreadHint) -> tuple[str, str]:
        """A notification that wakes watchers of a thread everywhere."""
        payload = {
            "t": hint.thread_id,
            "k": list(hint.kinds),
            "m": list(hint.message_ids[:50]),
            "o": self._origin,
        }
        return (self._store.channel(THREAD), json.dumps(payload, separators=(",", ":")))
