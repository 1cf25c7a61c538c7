"""One bidirectional hook call on the plugin side: a reader and a queue of replies."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai_grpc.convert import chunk_from_proto
from pai_grpc.domain import StepStreamChunk
from pai_grpc.errors import InvalidArgument, PaiError
from pai_grpc.lifecycle import FacadeClosed

log = logging.getLogger("pai_grpc.plugin_sdk")

#: How long a finished streaming hook waits for the runtime to half-close.
DRAIN_SECONDS = 5.0


class _Session:
    """One bidirectional hook call: a reader of runtime messages and a queue of replies."""

    def _failed(self, error: BaseException) -> Any:
        if isinstance(error, PaiError):
            reason, message = error.reason, error.message
        else:
            log.error("plugin hook failed", exc_info=error)
            reason, message = "HOOK_FAILED", f"{type(error).__name__}: {error}"
        return self._reply(failed=pb.HookFailed(reason=reason, message=message))

    def __init__(
        self,
        requests: AsyncIterator[Any],
        reply: Any,
        *,
        combine: Callable[[list[Any]], list[Any]] | None = None,
    ) -> None:
        self._requests = requests
        self._reply = reply
        #: Merges replies that are ready together (e.g. chunks into one batch).
        self._combine = combine
        self._outbox: collections.deque[Any] = collections.deque()
        #: Woken when a reply is queued or the hook finishes.
        self._waiter: asyncio.Future[None] | None = None
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._done = object()

    async def first(self, kind: str) -> Any:
        """The opening message (it must be ``kind``)."""
        try:
            message = await anext(self._requests)
        except StopAsyncIteration:
            raise InvalidArgument.field("message", f"the stream must open with {kind}") from None
        if message.WhichOneof("message") != kind:
            raise InvalidArgument.field("message", f"the stream must open with {kind}")
        self._reader = asyncio.create_task(self._read())
        return getattr(message, kind)

    async def _read(self) -> None:
        try:
            async for message in self._requests:
                await self._inbox.put(message)
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass  # the runtime cancelled the call: it has what it needs
        finally:
            self._inbox.put_nowait(None)

    async def expect_any(self, *kinds: str) -> tuple[str, Any]:
        """The runtime's next message, which must be one of ``kinds``."""
        message = await self._inbox.get()
        if message is None:
            raise FacadeClosed("the runtime closed the hook call", reason="HOOK_CALL_CLOSED")
        kind = message.WhichOneof("message")
        if kind not in kinds:
            raise InvalidArgument.field("message", f"expected {' or '.join(kinds)}, got {kind}")
        return kind, getattr(message, kind)

    async def expect(self, kind: str) -> Any:
        """The runtime's next message, which must be ``kind``."""
        return (await self.expect_any(kind))[1]

    def send(self, message: Any) -> None:
        """Queue a reply."""
        self._outbox.append(message)
        self._wake()

    def finish(self) -> None:
        """No more replies."""
        self._outbox.append(self._done)
        self._wake()

    def _wake(self, _: Any = None) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def run(self, work: Awaitable[None]) -> AsyncIterator[Any]:
        """Run the hook while yielding its replies; its errors end the call.

        After the last reply the call stays open until the runtime half-closes
        or cancels it (the contract's rule: ending a stream the peer still
        writes to races in gRPC stacks, grpc/grpc#36066).
        """
        async for item in self._replies(work):
            yield item
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), DRAIN_SECONDS)

    async def _replies(self, work: Awaitable[None]) -> AsyncIterator[Any]:
        # One future to wait on, woken by a reply or by the hook finishing: a
        # getter task and asyncio.wait per reply cost more than the reply.
        task = asyncio.ensure_future(work)
        task.add_done_callback(self._wake)
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not self._outbox:
                    if task.done():
                        break
                    self._waiter = loop.create_future()
                    await self._waiter
                    continue
                ready = list(self._outbox)
                self._outbox.clear()
                finished = self._done in ready
                ready = [r for r in ready if r is not self._done]
                for item in self._combine(ready) if self._combine else ready:
                    yield item
                if finished:
                    await task
                    return
            # The hook finished without finish(): it failed, or ended early.
            failure = task.exception()
            if failure is not None:
                yield self._failed(failure)
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def _batch_chunks(replies: list[Any]) -> list[Any]:
    """Consecutive chunk replies as one ChunkBatch (the runtime accepts batches)."""
    out: list[Any] = []
    run: list[Any] = []
    for reply in [*replies, None]:
        if reply is not None and reply.WhichOneof("message") == "chunk":
            run.append(reply.chunk)
            continue
        if len(run) == 1:
            out.append(pb.TransformStepStreamResponse(chunk=run[0]))
        elif run:
            out.append(pb.TransformStepStreamResponse(batch=pb.ChunkBatch(chunks=run)))
        run = []
        if reply is not None:
            out.append(reply)
    return out


class _AttemptStream:
    """The downstream stream of one next() inside a remote around_model_call.

    Returned untouched it is passed through (its chunks never cross the wire);
    iterated, it subscribes and the runtime forwards the chunks.
    """

    def __init__(self, session: _Session, index: int) -> None:
        self._session = session
        #: The attempt's index among the next() calls that started.
        self.index = index
        self.started = False

    def __aiter__(self) -> _AttemptStream:
        return self

    async def __anext__(self) -> StepStreamChunk:
        if not self.started:
            self.started = True
            subscribe = pb.StreamSubscribe(attempt=self.index)
            self._session.send(pb.AroundModelCallResponse(subscribe=subscribe))
        kind, reply = await self._session.expect_any("chunk", "end")
        if kind == "end":
            raise StopAsyncIteration
        return chunk_from_proto(reply)
