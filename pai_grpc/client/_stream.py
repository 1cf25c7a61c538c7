"""Event streams that survive the connection: a run's events and a thread's head changes.

``StreamRun`` is resumable by sequence number (see its proto comments): any
seq a client received is a valid cursor, the server never sends an event
twice after it and never skips a durable one. So on UNAVAILABLE, a reset
stream, or a server restart the stream is simply opened again after the last
seq received. Numbers may skip only after a lost execution, and then the
next event is ``chunk.abort{reason: "recovery"}``: whatever was streamed since
the last committed message is void.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from pai.v1 import run_service_pb2, thread_service_pb2
from pai_grpc.client._errors import ProtocolError, UnavailableError, error_from_rpc
from pai_grpc.client._retry import RetryPolicy, is_transient
from pai_grpc.convert import run_event_from_proto, thread_change_from_proto, thread_from_proto
from pai_grpc.domain import (
    TERMINAL_RUN_STATUSES,
    AbortChunk,
    ChunkEvent,
    RunEvent,
    StatusEvent,
    Thread,
    ThreadChangeKind,
)

if TYPE_CHECKING:
    from pai_grpc.client._handles import RunHandle


@dataclass(frozen=True)
class ThreadUpdate:
    """One change of a thread head, as :meth:`ThreadHandle.watch` yields it.

    Attributes:
        thread: The head after the change.
        change: What changed (``snapshot`` first, ``deleted`` last).
        message_ids: The messages the change is about (committed or removed).
    """

    thread: Thread
    change: ThreadChangeKind
    message_ids: list[str] = field(default_factory=list)


def is_terminal_event(event: RunEvent) -> bool:
    """Whether ``event`` is the run's final status transition."""
    payload = event.payload
    return isinstance(payload, StatusEvent) and payload.status in TERMINAL_RUN_STATUSES


def is_recovery_abort(event: RunEvent) -> bool:
    """Whether ``event`` voids the partial step streamed since the last committed message."""
    payload = event.payload
    return (
        isinstance(payload, ChunkEvent)
        and isinstance(payload.chunk, AbortChunk)
        and payload.chunk.reason == "recovery"
    )


class _Reconnect:
    """Counts consecutive failures without progress and sleeps between tries."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.failures = 0

    def progress(self) -> None:
        self.failures = 0

    async def after(self, err: grpc.aio.AioRpcError | None) -> None:
        """Wait before reopening, or raise when the error is final or retries are spent."""
        if err is not None and not is_transient(err):
            raise error_from_rpc(err) from None
        self.failures += 1
        if self.failures >= self.policy.max_attempts:
            if err is not None:
                raise error_from_rpc(err) from None
            raise UnavailableError(grpc.StatusCode.UNAVAILABLE, "the stream kept ending early")
        hint = error_from_rpc(err).retry_after if err is not None else None
        await asyncio.sleep(self.policy.delay(self.failures - 1, hint))


async def resuming_run_events(
    stub: Any,
    run_id: str,
    *,
    after_seq: int,
    metadata: Any,
    policy: RetryPolicy,
    is_terminal_run: Callable[[], Awaitable[bool]],
    opened: Any = None,
) -> AsyncIterator[RunEvent]:
    """The events of ``run_id`` after ``after_seq`` until its terminal status, reconnecting.

    ``is_terminal_run`` is asked when a stream ends cleanly without a terminal
    status (a cursor already at the end of a finished run, or a server that
    went away between messages): then the stream is done, or it is reopened.
    ``opened``: a call already streaming the run's events from ``after_seq``
    (a SendAndStream whose handle was read), read before any StreamRun.
    """
    cursor = after_seq
    retry = _Reconnect(policy)
    while True:
        if opened is not None:
            call, opened = opened, None
        else:
            call = stub.StreamRun(
                run_service_pb2.StreamRunRequest(run_id=run_id, after_seq=cursor),
                metadata=metadata,
            )
        failure: grpc.aio.AioRpcError | None = None
        try:
            # read(), not iteration: a SendAndStream call was read so for its handle.
            while (response := await call.read()) is not grpc.aio.EOF:
                try:
                    event = run_event_from_proto(response.event)
                except ValueError as e:
                    raise ProtocolError(grpc.StatusCode.INTERNAL, str(e)) from e
                if event.seq <= cursor:
                    continue  # never hand out an event twice, whatever the server does
                cursor = event.seq
                retry.progress()
                yield event
                if is_terminal_event(event):
                    return
        except grpc.aio.AioRpcError as e:
            failure = e
        finally:
            call.cancel()
        if failure is None and await is_terminal_run():
            return
        await retry.after(failure)


class RunStream:
    """A run's events as the call that sent its message streams them (SendAndStream).

    ``run`` is the run that answers the message, known before any event.
    Iterating yields its events until it ends, resuming with StreamRun
    after the last seq received when the call breaks, with the guarantees of
    :meth:`RunHandle.stream`. Iterate it once; close it (or leave the
    ``async with`` block) to stop early.
    """

    def __init__(self, run: RunHandle, events: AsyncIterator[RunEvent], call: Any) -> None:
        self.run = run
        self._events = events
        self._call = call

    def __repr__(self) -> str:
        return f"RunStream({self.run!r})"

    def __aiter__(self) -> AsyncIterator[RunEvent]:
        return self._events

    async def aclose(self) -> None:
        """Stop streaming (the run goes on)."""
        self._call.cancel()
        aclose = getattr(self._events, "aclose", None)
        if aclose is not None:
            await aclose()

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def resuming_thread_updates(
    stub: Any,
    thread_id: str,
    *,
    after_version: int,
    metadata: Any,
    policy: RetryPolicy,
) -> AsyncIterator[ThreadUpdate]:
    """Head changes of ``thread_id`` after ``after_version``, reconnecting, until it is deleted."""
    version = after_version
    retry = _Reconnect(policy)
    while True:
        call = stub.WatchThread(
            thread_service_pb2.WatchThreadRequest(thread_id=thread_id, after_version=version),
            metadata=metadata,
        )
        failure: grpc.aio.AioRpcError | None = None
        try:
            async for response in call:
                try:
                    update = ThreadUpdate(
                        thread=thread_from_proto(response.thread),
                        change=thread_change_from_proto(response.change),
                        message_ids=list(response.message_ids),
                    )
                except ValueError as e:
                    raise ProtocolError(grpc.StatusCode.INTERNAL, str(e)) from e
                version = max(version, update.thread.version)
                retry.progress()
                yield update
                if update.change == "deleted":
                    return
        except grpc.aio.AioRpcError as e:
            failure = e
        finally:
            call.cancel()
        await retry.after(failure)
