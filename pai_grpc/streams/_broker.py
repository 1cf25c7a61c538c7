"""In-process fan-out of run events, and wake-ups for log followers.

A run executing in this process has a :class:`RunChannel`: its events reach
subscribers the moment they are emitted, before the chunk log is flushed.
Readers of runs executing elsewhere follow the chunk log and are woken by
:meth:`Broker.notify` (called on local commits and, on PostgreSQL, by
LISTEN/NOTIFY from other processes).

Events travel as :class:`EncodedRunEvent`: encoded once by the execution that
emits them, the same bytes reach every reader and the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, replace

#: Bytes of events kept in memory per executing run (default); older ones are
#: read from the log. Events not yet durable are always kept.
CHANNEL_WINDOW_BYTES = 1 << 20
#: Approximate per-event memory besides its body (the object, its bytes header, deque slot).
EVENT_OVERHEAD_BYTES = 150
#: How long a run that ended here is remembered (seconds), for at most this many runs.
ENDED_SECONDS = 10.0
ENDED_RUNS = 10_000
#: A run that ended here keeps its events in memory for this long (seconds)
#: if they take at most ENDED_EVENTS_RUN_BYTES, within ENDED_EVENTS_TOTAL_BYTES
#: for all such runs together (oldest dropped first): the StreamRun of a short
#: run usually arrives moments after its end, and replays them without a read.
#: So does a long answer's: a model answering at once ends a run of thousands
#: of deltas before its StreamRun arrives (at 64 KiB per run, a stream of 2,000
#: deltas was read back from the log, page by page).
ENDED_EVENTS_SECONDS = 1.0
ENDED_EVENTS_RUN_BYTES = 1 << 20
ENDED_EVENTS_TOTAL_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class EndedRun:
    """What a reader needs to know of a run that ended in this process moments ago."""

    scope: str
    thread_id: str | None
    #: The sequence number of its terminal event (its log ends there, for good).
    last_seq: int
    ended_at: float
    #: Its last execution's events from ``first_seq`` on, as its log holds them
    #: (empty when they were not kept, or no longer are).
    events: tuple[EncodedRunEvent, ...] = ()
    first_seq: int = 0
    #: Approximate memory of ``events``.
    size: int = 0

    def replays(self, cursor: int) -> bool:
        """Whether :attr:`events` hold every event after ``cursor``."""
        return bool(self.events) and cursor + 1 >= self.first_seq

    def since(self, cursor: int) -> Iterator[EncodedRunEvent]:
        """Kept events with a sequence number above ``cursor``."""
        return (event for event in self.events if event.seq > cursor)


@dataclass(slots=True)
class EncodedRunEvent:
    """One run event as readers receive it: a serialized ``pai.v1.RunEvent``.

    The body carries the seq and time too; it is the very bytes the chunk
    log stores, so every reader of the event shares one encoding. Not frozen,
    though nothing changes one (see :class:`storage.NewEvent`: one per delta).
    """

    seq: int
    body: bytes
    #: The run's terminal status event: a stream ends after it.
    terminal: bool = False


def event_size(event: EncodedRunEvent) -> int:
    """Approximate memory of one kept event."""
    return EVENT_OVERHEAD_BYTES + len(event.body)


class _Signal:
    """An edge-triggered wake-up many waiters can share.

    It fires once per published event, so firing with nobody waiting costs
    nothing, and a wait is bounded by ``asyncio.timeout`` (``wait_for`` would
    start a task per wait).
    """

    __slots__ = ("_event", "_waiting", "fired")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._waiting = 0
        #: Times fired: a reader that noted it before reading the log tells a change
        #: announced while it read (when nobody waited) from no change.
        self.fired = 0

    @property
    def waiting(self) -> bool:
        """Whether a reader waits (or was woken and has not run yet)."""
        return self._waiting > 0

    def fire(self) -> None:
        self.fired += 1
        if self._waiting:
            self._event.set()
            self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        event = self._event
        self._waiting += 1
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await event.wait()
        finally:
            self._waiting -= 1


class RunChannel:
    """Live events of one execution of one run."""

    def __init__(
        self,
        run_id: str,
        first_seq: int,
        *,
        window_bytes: int = CHANNEL_WINDOW_BYTES,
        scope: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        self.run_id = run_id
        #: The scope the run belongs to (None: unknown, readers must ask the store).
        self.scope = scope
        #: The run's thread (None: unknown).
        self.thread_id = thread_id
        #: Whether the run's terminal event has been published.
        self.ended = False
        #: Sequence number of the oldest event kept in memory.
        self.first_seq = first_seq
        #: Highest sequence number known to be in the chunk log.
        self.durable_seq = first_seq - 1
        self.closed = False
        self.window_bytes = window_bytes
        #: Approximate bytes of the kept events.
        self.size = 0
        self._events: deque[tuple[EncodedRunEvent, int]] = deque()
        self.signal = _Signal()

    def publish(self, event: EncodedRunEvent) -> None:
        """Deliver an event to every subscriber now."""
        size = event_size(event)
        if event.terminal:
            self.ended = True
        self._events.append((event, size))
        self.size += size
        self._trim()
        self.signal.fire()

    @property
    def readers_waiting(self) -> bool:
        """Whether a reader waits for this channel's next event (or was just woken)."""
        return self.signal.waiting

    def mark_durable(self, seq: int) -> None:
        """Record that events up to ``seq`` are in the chunk log."""
        self.durable_seq = max(self.durable_seq, seq)
        self._trim()

    def _trim(self) -> None:
        # Only durable events leave memory: a reader behind the window always
        # finds what it missed in the log.
        events = self._events
        while self.size > self.window_bytes and events and events[0][0].seq <= self.durable_seq:
            dropped, size = events.popleft()
            self.size -= size
            self.first_seq = dropped.seq + 1

    def since(self, seq: int) -> list[EncodedRunEvent]:
        """Kept events with a sequence number above ``seq``, oldest first.

        Walked from the newest back: a reader that keeps up asks for the last
        few, delta after delta, while the channel keeps thousands (a long
        answer not yet durable). Copying all of them per ask made such a
        reader's work grow with the square of the answer. A list, not a
        view: publishing goes on while the reader sends these.
        """
        newer: list[EncodedRunEvent] = []
        for event, _ in reversed(self._events):
            if event.seq <= seq:
                break
            newer.append(event)
        newer.reverse()
        return newer

    def kept(self) -> tuple[EncodedRunEvent, ...]:
        """Every event kept in memory, oldest first."""
        return tuple(event for event, _ in self._events)

    def covers(self, cursor: int) -> bool:
        """Whether memory holds every event after ``cursor``."""
        return cursor + 1 >= self.first_seq

    @property
    def last_seq(self) -> int:
        """The sequence number of the newest event kept (``first_seq - 1`` when none)."""
        return self._events[-1][0].seq if self._events else self.first_seq - 1


class RunFollower:
    """Wake-ups of one run for a reader that follows its log in the store.

    Such a reader reads the log, asks the run's status, then waits. A change
    announced between its read and its wait found nobody waiting and was lost:
    the reader slept its whole poll interval (0.5 s) with new events in the
    log; on PostgreSQL, with runs executed by another process, one run in 25
    stalled so. The follower counts the announcements from before the first
    read, so a wait after a change returns at once.
    """

    def __init__(self, broker: Broker, run_id: str, signal: _Signal) -> None:
        self._broker = broker
        self._run_id = run_id
        self._signal = signal
        self._seen = signal.fired
        self._closed = False

    async def wait(self, timeout: float) -> bool:
        """Wait until the run changed since the last wait (or the hold), or ``timeout`` passes.

        Returns whether it changed. While the run executes in this process,
        its channel's publications wake the reader instead (and it returns True:
        the caller looks at the channel again either way).
        """
        channel = self._broker.channel(self._run_id)
        if channel is not None:
            await channel.signal.wait(timeout)
            return True
        if self._signal.fired == self._seen:
            await self._signal.wait(timeout)
        changed = self._signal.fired != self._seen
        self._seen = self._signal.fired
        return changed

    def close(self) -> None:
        """Release the hold (idempotent)."""
        if not self._closed:
            self._closed = True
            self._broker._release(self._run_id)

    def __del__(self) -> None:
        # A stream dropped before its first read never runs its own cleanup.
        self.close()


class Broker:
    """Per-process registry of run channels and run wake-ups."""

    def __init__(self, *, window_bytes: int = CHANNEL_WINDOW_BYTES) -> None:
        #: Bytes of events each executing run keeps in memory.
        self.window_bytes = window_bytes
        #: How long a run that ended here keeps its events in memory (seconds; 0:
        #: not at all). Retention must not have compacted its log meanwhile:
        #: the service keeps them for less than ``[retention] events_after_terminal``.
        self.ended_events_seconds = ENDED_EVENTS_SECONDS
        self._channels: dict[str, RunChannel] = {}
        self._signals: dict[str, _Signal] = {}
        self._waiters: dict[str, int] = {}
        #: Runs that ended here, oldest first.
        self._ended: OrderedDict[str, EndedRun] = OrderedDict()
        #: The ended runs that still keep events, oldest first: expiring events
        #: walks only these, not every run remembered (thousands on a busy server).
        self._holding: OrderedDict[str, EndedRun] = OrderedDict()
        #: Bytes of the events the ended runs keep.
        self._ended_bytes = 0

    def open(
        self,
        run_id: str,
        first_seq: int,
        *,
        scope: str | None = None,
        thread_id: str | None = None,
    ) -> RunChannel:
        """Start a channel for an execution beginning at ``first_seq`` of a run in ``scope``."""
        channel = RunChannel(
            run_id, first_seq, window_bytes=self.window_bytes, scope=scope, thread_id=thread_id
        )
        self._channels[run_id] = channel
        self._forget(run_id)
        self.notify(run_id)
        return channel

    def close(self, channel: RunChannel) -> None:
        """End an execution's channel; readers continue from the chunk log.

        Events it published past the log are never rewound to: the next
        execution starts above the run's seq reservation, so any cursor a
        reader holds stays valid.
        """
        channel.closed = True
        if self._channels.get(channel.run_id) is channel:
            del self._channels[channel.run_id]
            if channel.ended and channel.scope is not None:
                # A reader arriving just after the end (a short run often ends
                # before its StreamRun arrives) needs no read of the run, and
                # of its log only what memory no longer holds. Every event is
                # durable by now (the terminal one is published after its commit).
                kept = 0 < channel.size <= ENDED_EVENTS_RUN_BYTES and self.ended_events_seconds > 0
                ended = EndedRun(
                    channel.scope,
                    channel.thread_id,
                    channel.last_seq,
                    time.monotonic(),
                    channel.kept() if kept else (),
                    channel.first_seq,
                    channel.size if kept else 0,
                )
                self._ended[channel.run_id] = ended
                if ended.size:
                    self._holding[channel.run_id] = ended
                    self._ended_bytes += ended.size
                self._expire()
        channel.signal.fire()
        self.notify(channel.run_id)

    def ended(self, run_id: str) -> EndedRun | None:
        """The run, if it ended in this process moments ago (its terminal event is durable)."""
        self._expire()
        return self._ended.get(run_id)

    def drop_ended_events(self) -> None:
        """Let go of every ended run's events (logs were rewritten: memory may differ)."""
        for run_id in list(self._holding):
            self._drop_events(run_id)

    def _drop_events(self, run_id: str) -> None:
        """Keep remembering that ``run_id`` ended, without its events."""
        run = self._holding.pop(run_id, None)
        if run is not None:
            self._ended[run_id] = replace(run, events=(), size=0)
            self._ended_bytes -= run.size

    def forget_thread(self, thread_id: str) -> None:
        """Forget the ended runs of a deleted thread (readers must find them gone)."""
        for run_id in [r for r, e in self._ended.items() if e.thread_id == thread_id]:
            self._forget(run_id)

    def _forget(self, run_id: str) -> None:
        self._ended.pop(run_id, None)
        holding = self._holding.pop(run_id, None)
        if holding is not None:
            self._ended_bytes -= holding.size

    def _expire(self) -> None:
        now = time.monotonic()
        oldest = now - ENDED_SECONDS
        ended = self._ended
        while ended and (len(ended) > ENDED_RUNS or next(iter(ended.values())).ended_at < oldest):
            self._forget(next(iter(ended)))
        # Events go before the rest of what is remembered: oldest first, once
        # their time is up or while all of them take more than their budget.
        stale = now - self.ended_events_seconds
        holding = self._holding
        while holding:
            run_id, run = next(iter(holding.items()))
            if self._ended_bytes <= ENDED_EVENTS_TOTAL_BYTES and run.ended_at >= stale:
                break
            self._drop_events(run_id)

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
        signal = self._hold(run_id)
        try:
            await signal.wait(timeout)
        finally:
            self._release(run_id)

    def follow(self, run_id: str) -> RunFollower:
        """A reader's hold on the wake-ups of ``run_id`` while it follows the run's log.

        Taken before the reader's first read of the log, so a change announced
        while it reads is not lost (see :class:`RunFollower`). Close it when done.
        """
        return RunFollower(self, run_id, self._hold(run_id))

    def holds(self, run_id: str) -> int:
        """How many readers hold the wake-ups of ``run_id`` (waiting or following)."""
        return self._waiters.get(run_id, 0)

    def _hold(self, run_id: str) -> _Signal:
        signal = self._signals.setdefault(run_id, _Signal())
        self._waiters[run_id] = self._waiters.get(run_id, 0) + 1
        return signal

    def _release(self, run_id: str) -> None:
        # Drop the signal with its last holder so finished runs leave nothing behind.
        left = self._waiters[run_id] - 1
        if left:
            self._waiters[run_id] = left
        else:
            del self._waiters[run_id]
            del self._signals[run_id]
