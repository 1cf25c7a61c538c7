"""A blocking face of :class:`PaiClient` for scripts and notebooks.

The asynchronous client runs on a private event loop in a daemon thread;
each blocking method submits one coroutine to it and waits for the result,
and each iterator pulls one item at a time. So the retries, deadlines and
stream resumption are exactly the asynchronous client's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from types import TracebackType
from typing import Any, TypeVar

from pai_grpc.client._client import PaiClient
from pai_grpc.client._handles import Content, RunHandle, ThreadHandle
from pai_grpc.client._stream import RunStream, ThreadUpdate
from pai_grpc.domain import (
    JsonObject,
    JsonValue,
    Message,
    PendingAction,
    Run,
    RunEvent,
    SortOrder,
    Thread,
)

T = TypeVar("T")


class _Loop:
    """An event loop running in its own thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="pai-client", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self.run(_next(items))
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None and not self.loop.is_closed():
                self.run(aclose())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


async def _next(items: AsyncIterator[T]) -> T:
    return await items.__anext__()


class SyncRun:
    """The blocking :class:`~pai_grpc.client.RunHandle` (same verbs, same semantics)."""

    def __init__(self, loop: _Loop, handle: RunHandle) -> None:
        self._loop = loop
        self.handle = handle

    @property
    def id(self) -> str:
        """The run id."""
        return self.handle.id

    @property
    def thread_id(self) -> str:
        """The run's thread."""
        return self.handle.thread_id

    def get(self) -> Run:
        """The run as stored now."""
        return self._loop.run(self.handle.get())

    def pending_actions(self) -> list[PendingAction]:
        """The run's open pending actions."""
        return self._loop.run(self.handle.pending_actions())

    def stream(self, after_seq: int = 0) -> Iterator[RunEvent]:
        """The run's events until it ends, resuming across reconnects."""
        return self._loop.iterate(self.handle.stream(after_seq))

    def wait(self) -> Run:
        """Block until the run is terminal and return it."""
        return self._loop.run(self.handle.wait())

    def text(self) -> str:
        """The assistant's reply, once the run has ended."""
        return self._loop.run(self.handle.text())

    def cancel(self, reason: str | None = None) -> Run:
        """Cancel the run."""
        return self._loop.run(self.handle.cancel(reason))

    def approve(self, action: PendingAction | str, reason: str | None = None) -> Run:
        """Approve a tool that asked for approval."""
        return self._loop.run(self.handle.approve(action, reason))

    def deny(self, action: PendingAction | str, reason: str | None = None) -> Run:
        """Deny a tool that asked for approval."""
        return self._loop.run(self.handle.deny(action, reason))

    def submit_tool_result(
        self,
        action: PendingAction | str,
        output: JsonValue = None,
        *,
        error_text: str | None = None,
    ) -> Run:
        """Give a client tool's output (or its error)."""
        return self._loop.run(self.handle.submit_tool_result(action, output, error_text=error_text))

    def submit_data(self, action: PendingAction | str, data: JsonValue) -> Run:
        """Give the data a suspended tool asked for."""
        return self._loop.run(self.handle.submit_data(action, data))


class SyncRunStream:
    """The blocking :class:`~pai_grpc.client.RunStream`: ``run``, then iterate its events."""

    def __init__(self, loop: _Loop, stream: RunStream) -> None:
        self._loop = loop
        self._stream = stream
        #: The run that answers the message.
        self.run = SyncRun(loop, stream.run)

    def __iter__(self) -> Iterator[RunEvent]:
        return self._loop.iterate(aiter(self._stream))

    def close(self) -> None:
        """Stop streaming (the run goes on)."""
        self._loop.run(self._stream.aclose())


class SyncThread:
    """The blocking :class:`~pai_grpc.client.ThreadHandle`."""

    def __init__(self, loop: _Loop, handle: ThreadHandle) -> None:
        self._loop = loop
        self.handle = handle

    @property
    def id(self) -> str:
        """The thread id."""
        return self.handle.id

    def get(self) -> Thread:
        """The thread head as stored now."""
        return self._loop.run(self.handle.get())

    def send(self, content: Content, **kwargs: Any) -> SyncRun:
        """Send a user message (keyword arguments as :meth:`ThreadHandle.send`)."""
        return SyncRun(self._loop, self._loop.run(self.handle.send(content, **kwargs)))

    def send_and_stream(self, content: Content, **kwargs: Any) -> SyncRunStream:
        """Send a user message and stream its run on one call (see ThreadHandle.send_and_stream)."""
        return SyncRunStream(
            self._loop, self._loop.run(self.handle.send_and_stream(content, **kwargs))
        )

    def trigger(self, input: JsonValue = None, **kwargs: Any) -> SyncRun:
        """Start a run with an operation input."""
        return SyncRun(self._loop, self._loop.run(self.handle.trigger(input, **kwargs)))

    def regenerate(self, message_id: str, **kwargs: Any) -> SyncRun:
        """Answer again from an assistant message."""
        return SyncRun(self._loop, self._loop.run(self.handle.regenerate(message_id, **kwargs)))

    def update_metadata(self, metadata: JsonObject, **kwargs: Any) -> Thread:
        """Merge (or replace) the thread's public metadata."""
        return self._loop.run(self.handle.update_metadata(metadata, **kwargs))

    def messages(self, *, order: SortOrder = "asc", page_size: int = 0) -> Iterator[Message]:
        """The transcript, page by page."""
        return self._loop.iterate(self.handle.messages(order=order, page_size=page_size))

    def runs(self, *, page_size: int = 0) -> Iterator[Run]:
        """The thread's runs, newest first."""
        return self._loop.iterate(self.handle.runs(page_size=page_size))

    def run(self, run_id: str) -> SyncRun:
        """A handle on one of the thread's runs."""
        return SyncRun(self._loop, self.handle.run(run_id))

    def watch(self, after_version: int = 0) -> Iterator[ThreadUpdate]:
        """Head changes, resuming across reconnects."""
        return self._loop.iterate(self.handle.watch(after_version))

    def delete(self, etag: str | None = None) -> None:
        """Delete the idle thread."""
        self._loop.run(self.handle.delete(etag))


class SyncPaiClient:
    """A blocking client for scripts: the same calls as :class:`PaiClient`, without ``await``.

    ::

        with PaiClient.sync("127.0.0.1:50051") as client:
            run = client.create_thread().send("Hello")
            print(run.text())
    """

    def __init__(self, address: str, **kwargs: Any) -> None:
        self._loop = _Loop()

        async def make() -> PaiClient:
            # The channel belongs to the loop that creates it.
            return PaiClient(address, **kwargs)

        self.client = self._loop.run(make())

    def close(self) -> None:
        """Close the channel and stop the private loop."""
        if self._loop.loop.is_closed():
            return
        self._loop.run(self.client.close())
        self._loop.stop()

    def __enter__(self) -> SyncPaiClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def create_thread(self, **kwargs: Any) -> SyncThread:
        """Create a thread (keyword arguments as :meth:`PaiClient.create_thread`)."""
        return SyncThread(self._loop, self._loop.run(self.client.create_thread(**kwargs)))

    def thread(self, thread_id: str) -> SyncThread:
        """A handle on an existing thread."""
        return SyncThread(self._loop, self.client.thread(thread_id))

    def get_thread(self, thread_id: str) -> Thread:
        """Read a thread head."""
        return self._loop.run(self.client.get_thread(thread_id))

    def threads(self, *, page_size: int = 0) -> Iterator[Thread]:
        """The caller's threads, newest first."""
        return self._loop.iterate(self.client.threads(page_size=page_size))

    def run(self, run_id: str) -> SyncRun:
        """A handle on an existing run."""
        return SyncRun(self._loop, self.client.run(run_id))

    def get_run(self, run_id: str) -> Run:
        """Read a run."""
        return self._loop.run(self.client.get_run(run_id))
