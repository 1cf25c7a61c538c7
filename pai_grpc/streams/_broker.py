"""In-process fan-out of run events, and wake-ups for log followers.

A run executing in this process has a :class:`RunChannel`: its events reach
subscribers the moment they are emitted, before the chunk log is flushed.
Readers of runs executing elsewhere follow the chunk log and are woken by
:meth:`Broker.notify` (called on local commits and, on PostgreSQL, by
LISTEN/NOTIFY from other processes).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterator

from pai_grpc.domain import RunEvent

#: Events kept in memory per executing run; older ones are read from the log.
CHANNEL_WINDOW = 20_000


class _Signal:
    """An edge-triggered wake-up many waiters can share."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        event = self._event
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)


class RunChannel:
    """Live events of one execution of one run."""

    def __init__(self, run_id: str, first_seq: int) -> None:
        self.run_id = run_id
        #: Sequence number of the oldest event kept in memory.
        self.first_seq = first_seq
        #: Highest sequence number known to be in the chunk log.
        self.durable_seq = first_seq - 1
        self.closed = False
        #: The execution lost its lease: unflushed events will never be durable.
        self.aborted = False
        self._events: deque[RunEvent] = deque()
        self.signal = _Signal()

    def publish(self, event: RunEvent) -> None:
        """Deliver an event to every subscriber now."""
        self._events.append(event)
        if len(self._events) > CHANNEL_WINDOW:
            dropped = self._events.popleft()
            self.first_seq = dropped.seq + 1
        self.signal.fire()

    def mark_durable(self, seq: int) -> None:
        """Record that events up to ``seq`` are in the chunk log."""
        self.durable_seq = max(self.durable_seq, seq)

    def since(self, seq: int) -> Iterator[RunEvent]:
        """Kept events with a sequence number above ``seq``."""
        for event in list(self._events):
            if event.seq > seq:
                yield event

    def covers(self, cursor: int) -> bool:
        """Whether memory holds every event after ``cursor``."""
        return cursor + 1 >= self.first_seq


class Broker:
    """Per-process registry of run channels and run wake-ups."""

    def __init__(self) -> None:
        self._channels: dict[str, RunChannel] = {}
        self._signals: dict[str, _Signal] = {}
        self._waiters: dict[str, int] = {}

    def open(self, run_id: str, first_seq: int) -> RunChannel:
        """Start a channel for an execution beginning at ``first_seq``."""
        channel = RunChannel(run_id, first_seq)
        self._channels[run_id] = channel
        self.notify(run_id)
        return channel

    def close(self, channel: RunChannel, *, aborted: bool = False) -> None:
        """End an execution's channel; readers continue from the chunk log."""
        channel.closed = True
        channel.aborted = aborted
        if self._channels.get(channel.run_id) is channel:
            del self._channels[channel.run_id]
        channel.signal.fire()
        self.notify(channel.run_id)

    def channel(self, run_id: str) -> RunChannel | None:
        """The live channel of a run executing in this process."""
        return self._channels.get(run_id)

    def notify(self, run_id: str) -> None:
        """Wake readers of ``run_id`` (its log or status changed)."""
        signal = self._signals.get(run_id)
        if signal is not None:
            signal.fire()

    async def wait(self, run_id: str, timeout: float) -> None:
        """Wait until ``run_id`` changes or ``timeout`` passes."""
        channel = self._channels.get(run_id)
        if channel is not None:
            await channel.signal.wait(timeout)
            return
        signal = self._signals.setdefault(run_id, _Signal())
        self._waiters[run_id] = self._waiters.get(run_id, 0) + 1
        try:
            await signal.wait(timeout)
        finally:
            # Drop the signal with its last waiter so finished runs leave nothing behind.
            left = self._waiters[run_id] - 1
            if left:
                self._waiters[run_id] = left
            else:
                del self._waiters[run_id]
                del self._signals[run_id]
