"""The event sink of one execution: sequence numbers, live fan-out, batched chunk log."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pai_grpc.domain import RunEvent, RunEventPayload
from pai_grpc.runtime._records import payload_to_json
from pai_grpc.streams import RunChannel
from storage import Lease, NewEvent, RunPatch, WriteSet

if TYPE_CHECKING:
    from pai_grpc.runtime._services import Services

#: Flush the chunk log when this many events are buffered ...
FLUSH_EVENTS = 64
#: ... or when the oldest buffered event is this old (seconds).
FLUSH_INTERVAL = 0.05


class EventSink:
    """Assigns dense sequence numbers, publishes live, and batches the chunk log.

    Only the lease holder writes a run's events, so sequence numbers are
    allocated here without coordination. Every commit that carries events
    holds :attr:`lock`, so the log is written in sequence order.
    """

    def __init__(
        self,
        *,
        services: Services,
        scope: str,
        thread_id: str,
        run_id: str,
        lease: Lease,
        last_seq: int,
    ) -> None:
        self._services = services
        self._store = services.store
        self._broker = services.broker
        self._scope = scope
        self._thread_id = thread_id
        self._run_id = run_id
        self._lease = lease
        self._next_seq = last_seq + 1
        self._pending: list[NewEvent] = []
        self._flusher: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()
        #: An error from a background flush (e.g. LeaseLost); the execution re-raises it.
        self.failure: Exception | None = None
        self.channel: RunChannel = self._broker.open(run_id, first_seq=last_seq + 1)

    @property
    def last_seq(self) -> int:
        """The highest sequence number allocated so far."""
        return self._next_seq - 1

    def emit(self, payload: RunEventPayload) -> RunEvent:
        """Publish an event live now; it reaches the log with the next flush or commit."""
        event = RunEvent(seq=self._next_seq, time=datetime.now(UTC), payload=payload)
        self._next_seq += 1
        self.channel.publish(event)
        self._pending.append(
            NewEvent(self._run_id, event.seq, payload_to_json(payload), event.time)
        )
        if len(self._pending) >= FLUSH_EVENTS:
            self._schedule_flush(0.0)
        else:
            self._schedule_flush(FLUSH_INTERVAL)
        return event

    def take_pending(self) -> list[NewEvent]:
        """Hand the buffered events to a commit (call with :attr:`lock` held)."""
        pending, self._pending = self._pending, []
        return pending

    def allocate(self, count: int) -> list[int]:
        """Allocate ``count`` sequence numbers for events built inside a commit."""
        seqs = list(range(self._next_seq, self._next_seq + count))
        self._next_seq += count
        return seqs

    def restore(self, pending: list[NewEvent], seqs: list[int]) -> None:
        """Undo a failed commit: keep its buffered events and return unused numbers."""
        self._pending = pending + self._pending
        if seqs and seqs[-1] == self._next_seq - 1:
            self._next_seq = seqs[0]

    def published(self, events: list[RunEvent]) -> None:
        """Publish events that a commit just made durable."""
        for event in events:
            self.channel.publish(event)
        self._broker.notify(self._run_id)

    def mark_durable(self, seq: int) -> None:
        """Record that the log holds every event up to ``seq``."""
        self.channel.mark_durable(seq)

    def _schedule_flush(self, delay: float) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_later(delay))

    async def _flush_later(self, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        try:
            await self.flush()
        except Exception as e:  # surfaced to the execution through `failure`
            self.failure = e

    async def flush(self) -> None:
        """Write buffered events to the chunk log (fenced by the lease)."""
        async with self.lock:
            if not self._pending:
                return
            events = self.take_pending()
            try:
                await self._store.commit(
                    WriteSet(
                        scope=self._scope,
                        thread_id=self._thread_id,
                        update_runs=[
                            RunPatch(id=self._run_id, lease=self._lease, last_seq=events[-1].seq)
                        ],
                        events=events,
                        notify=[self._services.signals.note_run(self._run_id)],
                    )
                )
            except BaseException:
                # Put them back so a later commit (or the failure path) still carries them.
                self._pending = events + self._pending
                raise
            self.channel.mark_durable(events[-1].seq)

    async def close(self, *, aborted: bool = False) -> None:
        """Stop the background flusher and end the live channel."""
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
            with contextlib.suppress(BaseException):
                await self._flusher
        self._broker.close(self.channel, aborted=aborted)
