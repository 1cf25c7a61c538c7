"""PaiClient: the asynchronous Python client of the ThreadService and RunService."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from pai.v1 import run_service_pb2, run_service_pb2_grpc, thread_service_pb2
from pai.v1 import thread_service_pb2_grpc as thread_grpc
from pai_grpc._wire import ClientTls, channel
from pai_grpc.client._errors import DeadlineExceededError, FailedPreconditionError, ProtocolError
from pai_grpc.client._handles import Content, RunHandle, ThreadHandle
from pai_grpc.client._retry import DEFAULT_RETRY, RetryPolicy, with_retry
from pai_grpc.client._stream import (
    RunStream,
    ThreadUpdate,
    resuming_run_events,
    resuming_thread_updates,
)
from pai_grpc.convert import (
    delivery_to_proto,
    message_from_proto,
    part_to_proto,
    pending_action_from_proto,
    run_from_proto,
    run_status_from_proto,
    sort_order_to_proto,
    struct_to_proto,
    thread_from_proto,
    value_to_proto,
)
from pai_grpc.domain import (
    Delivery,
    JsonObject,
    JsonValue,
    Message,
    MessagePart,
    PendingAction,
    Run,
    RunEvent,
    SortOrder,
    TextPart,
    Thread,
)

if TYPE_CHECKING:
    from pai_grpc.client._sync import SyncPaiClient

T = TypeVar("T")
Item = TypeVar("Item")

#: Seconds each unary call may take (per attempt) unless the call says otherwise.
DEFAULT_TIMEOUT = 30.0

# Reconnect promptly after a server restart: gRPC's default backoff grows to
# two minutes, far longer than a restart, and calls fail fast meanwhile.
_RECONNECT_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]


def new_request_id() -> str:
    """A fresh idempotency key for one logical mutating call."""
    return uuid.uuid4().hex


def _parts(content: Content) -> list[MessagePart]:
    if isinstance(content, str):
        return [TextPart(text=content)]
    return [TextPart(text=p) if isinstance(p, str) else p for p in content]


class PaiClient:
    """An asynchronous client of one pai-grpc server.

    ::

        async with PaiClient("127.0.0.1:50051", token=token) as client:
            thread = await client.create_thread()
            run = await thread.send("Hello")
            print(await run.text())

    Every unary call has a deadline (``timeout`` seconds per attempt) and is
    retried with backoff on UNAVAILABLE: reads because they are safe, and
    mutating calls because they carry a ``request_id`` (generated unless
    given) that the server uses to return the first outcome on a repeat.
    Event streams resume from the last sequence number on their own.
    Failures raise :class:`~pai_grpc.client.PaiClientError` subclasses with
    the server's reason, field violations and retry delay.

    Args:
        address: ``HOST:PORT`` of the server.
        token: Bearer token sent with every call (when the server requires one).
        tls: TLS (mutual with a client certificate); plaintext without.
        timeout: Default deadline of unary calls, per attempt, in seconds.
        retry: Retry and reconnect policy.
        interceptors: grpc.aio client interceptors for the channel.
    """

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        tls: ClientTls | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy = DEFAULT_RETRY,
        interceptors: Sequence[Any] | None = None,
    ) -> None:
        self.address = address
        self.timeout = timeout
        self.retry = retry
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._channel = channel(address, tls, options=_RECONNECT_OPTIONS, interceptors=interceptors)
        self._threads = thread_grpc.ThreadServiceStub(self._channel)
        self._runs = run_service_pb2_grpc.RunServiceStub(self._channel)

    @classmethod
    def from_env(cls, address: str | None = None, **kwargs: Any) -> PaiClient:
        """A client of ``PAI_ADDRESS`` (default ``127.0.0.1:50051``) with ``PAI_TOKEN``."""
        kwargs.setdefault("token", os.environ.get("PAI_TOKEN") or None)
        return cls(address or os.environ.get("PAI_ADDRESS") or "127.0.0.1:50051", **kwargs)

    @staticmethod
    def sync(address: str, **kwargs: Any) -> SyncPaiClient:
        """A blocking client for scripts (same arguments; see :class:`SyncPaiClient`)."""
        from pai_grpc.client._sync import SyncPaiClient

        return SyncPaiClient(address, **kwargs)

    async def close(self) -> None:
        """Close the channel (open streams end)."""
        await self._channel.close()

    async def __aenter__(self) -> PaiClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ plumbing

    async def _call(
        self, method: Any, request: Any, *, timeout: float | None = None, retry: bool = True
    ) -> Any:
        deadline = timeout if timeout is not None else self.timeout

        def attempt() -> Awaitable[Any]:
            return method(request, metadata=self._metadata, timeout=deadline)  # type: ignore[no-any-return]

        return await with_retry(attempt, self.retry, retry=retry)

    @staticmethod
    def _read(convert: Callable[[Any], T], pb: Any) -> T:
        try:
            return convert(pb)
        except ValueError as e:
            raise ProtocolError(grpc.StatusCode.INTERNAL, str(e)) from e

    async def _pages(
        self, fetch: Callable[[str], Awaitable[tuple[list[Item], str]]]
    ) -> AsyncIterator[Item]:
        token = ""
        while True:
            items, token = await fetch(token)
            for item in items:
                yield item
            if not token:
                return

    def _run_handle(self, pb: Any) -> RunHandle:
        return RunHandle(
            self,
            pb.run_id,
            pb.thread_id,
            status=self._read(run_status_from_proto, pb.status),
            message_id=pb.message_id if pb.HasField("message_id") else None,
        )

    # ------------------------------------------------------------------- threads

    async def create_thread(
        self,
        *,
        agent: str = "",
        metadata: JsonObject | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> ThreadHandle:
        """Create a thread answered by ``agent`` (empty: the default agent)."""
        request = thread_service_pb2.CreateThreadRequest(
            agent=agent,
            metadata=struct_to_proto(metadata or {}, path="metadata"),
            request_id=request_id or new_request_id(),
        )
        response = await self._call(self._threads.CreateThread, request, timeout=timeout)
        info = self._read(thread_from_proto, response.thread)
        return ThreadHandle(self, info.id, info)

    def thread(self, thread_id: str) -> ThreadHandle:
        """A handle on an existing thread (no call is made)."""
        return ThreadHandle(self, thread_id)

    async def get_thread(self, thread_id: str, *, timeout: float | None = None) -> Thread:
        """Read a thread head."""
        request = thread_service_pb2.GetThreadRequest(thread_id=thread_id)
        response = await self._call(self._threads.GetThread, request, timeout=timeout)
        return self._read(thread_from_proto, response.thread)

    def threads(self, *, page_size: int = 0) -> AsyncIterator[Thread]:
        """The caller's threads, newest first, fetched page by page as iterated."""

        async def fetch(token: str) -> tuple[list[Thread], str]:
            request = thread_service_pb2.ListThreadsRequest(page_size=page_size, page_token=token)
            response = await self._call(self._threads.ListThreads, request)
            threads = [self._read(thread_from_proto, t) for t in response.threads]
            return threads, response.next_page_token

        return self._pages(fetch)

    async def delete_thread(
        self, thread_id: str, *, etag: str | None = None, timeout: float | None = None
    ) -> None:
        """Delete an idle thread (not retried: a repeat would report NOT_FOUND)."""
        request = thread_service_pb2.DeleteThreadRequest(thread_id=thread_id, etag=etag or "")
        await self._call(self._threads.DeleteThread, request, timeout=timeout, retry=False)

    def messages(
        self, thread_id: str, *, order: SortOrder = "asc", page_size: int = 0
    ) -> AsyncIterator[Message]:
        """The thread's transcript messages, page by page."""

        async def fetch(token: str) -> tuple[list[Message], str]:
            request = thread_service_pb2.ListMessagesRequest(
                thread_id=thread_id,
                page_size=page_size,
                page_token=token,
                order=sort_order_to_proto(order),
            )
            response = await self._call(self._threads.ListMessages, request)
            messages = [self._read(message_from_proto, m) for m in response.messages]
            return messages, response.next_page_token

        return self._pages(fetch)

    def _send_request(
        self,
        thread_id: str,
        content: Content,
        request_id: str | None,
        delivery: Delivery | None,
        metadata: JsonObject | None,
        run_metadata: JsonObject | None,
    ) -> thread_service_pb2.SendRequest:
        return thread_service_pb2.SendRequest(
            thread_id=thread_id,
            parts=[part_to_proto(p) for p in _parts(content)],
            metadata=struct_to_proto(metadata or {}, path="metadata"),
            request_id=request_id or new_request_id(),
            delivery=delivery_to_proto(delivery) if delivery else None,
            run_metadata=struct_to_proto(run_metadata or {}, path="run_metadata"),
        )

    async def send(
        self,
        thread_id: str,
        content: Content,
        *,
        request_id: str | None = None,
        delivery: Delivery | None = None,
        metadata: JsonObject | None = None,
        run_metadata: JsonObject | None = None,
        timeout: float | None = None,
    ) -> RunHandle:
        """Send a user message to ``thread_id`` (see :meth:`ThreadHandle.send`)."""
        request = self._send_request(
            thread_id, content, request_id, delivery, metadata, run_metadata
        )
        response = await self._call(self._threads.Send, request, timeout=timeout)
        return self._run_handle(response.run)

    async def send_and_stream(
        self,
        thread_id: str,
        content: Content,
        *,
        request_id: str | None = None,
        delivery: Delivery | None = None,
        metadata: JsonObject | None = None,
        run_metadata: JsonObject | None = None,
        timeout: float | None = None,
    ) -> RunStream:
        """Send a message and stream its run on one call (:meth:`ThreadHandle.send_and_stream`).

        Returns once the run's handle has arrived; ``timeout`` bounds that wait
        (per attempt), not the stream.
        """
        request = thread_service_pb2.SendAndStreamRequest(
            send=self._send_request(
                thread_id, content, request_id, delivery, metadata, run_metadata
            )
        )
        deadline = timeout if timeout is not None else self.timeout
        calls: list[Any] = []

        async def attempt() -> Any:
            # No deadline on the call: it streams for as long as the run lasts.
            call = self._threads.SendAndStream(request, metadata=self._metadata)
            calls.append(call)
            try:
                async with asyncio.timeout(deadline):
                    return await call.read()
            except TimeoutError:
                call.cancel()
                raise DeadlineExceededError(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"no run handle within {deadline} s"
                ) from None
            except BaseException:
                call.cancel()  # failed, or the caller gave up: nothing keeps the call open
                raise

        first = await with_retry(attempt, self.retry)  # a retry repeats request_id: same run
        call = calls[-1]
        if first is grpc.aio.EOF or first.WhichOneof("response") != "run":
            call.cancel()
            raise ProtocolError(
                grpc.StatusCode.INTERNAL, "SendAndStream did not answer the run handle first"
            )
        run = self._run_handle(first.run)
        return RunStream(run, self._run_events(run.id, 0, opened=call), call)

    async def trigger(
        self,
        thread_id: str,
        input: JsonValue = None,
        *,
        request_id: str | None = None,
        run_metadata: JsonObject | None = None,
        timeout: float | None = None,
    ) -> RunHandle:
        """Start a run on ``thread_id`` with an operation input and no user message."""
        request = thread_service_pb2.TriggerRequest(
            thread_id=thread_id,
            input=value_to_proto(input, path="input"),
            request_id=request_id or new_request_id(),
            run_metadata=struct_to_proto(run_metadata or {}, path="run_metadata"),
        )
        response = await self._call(self._threads.Trigger, request, timeout=timeout)
        return self._run_handle(response.run)

    async def regenerate(
        self,
        thread_id: str,
        message_id: str,
        *,
        etag: str | None = None,
        request_id: str | None = None,
        run_metadata: JsonObject | None = None,
        timeout: float | None = None,
    ) -> RunHandle:
        """Answer again from assistant message ``message_id`` (it and every later message go)."""
        request = thread_service_pb2.RegenerateRequest(
            thread_id=thread_id,
            message_id=message_id,
            etag=etag or "",
            request_id=request_id or new_request_id(),
            run_metadata=struct_to_proto(run_metadata or {}, path="run_metadata"),
        )
        response = await self._call(self._threads.Regenerate, request, timeout=timeout)
        return self._run_handle(response.run)

    async def update_thread_metadata(
        self,
        thread_id: str,
        metadata: JsonObject,
        *,
        replace: bool = False,
        etag: str | None = None,
        timeout: float | None = None,
    ) -> Thread:
        """Merge ``metadata`` into the thread's (top level), or ``replace`` it.

        Retried without ``etag`` (applying the same change twice gives the same
        head); with an ``etag`` a repeat would be refused, so it is not.
        """
        request = thread_service_pb2.UpdateThreadMetadataRequest(
            thread_id=thread_id,
            metadata=struct_to_proto(metadata, path="metadata"),
            replace=replace,
            etag=etag or "",
        )
        response = await self._call(
            self._threads.UpdateThreadMetadata, request, timeout=timeout, retry=etag is None
        )
        return self._read(thread_from_proto, response.thread)

    def watch_thread(
        self, thread_id: str, *, after_version: int = 0
    ) -> AsyncIterator[ThreadUpdate]:
        """Head changes of a thread, resuming across reconnects (see :meth:`ThreadHandle.watch`)."""
        return resuming_thread_updates(
            self._threads,
            thread_id,
            after_version=after_version,
            metadata=self._metadata,
            policy=self.retry,
        )

    # ---------------------------------------------------------------------- runs

    def run(self, run_id: str) -> RunHandle:
        """A handle on an existing run (no call is made)."""
        return RunHandle(self, run_id)

    async def get_run(self, run_id: str, *, timeout: float | None = None) -> Run:
        """Read a run."""
        request = run_service_pb2.GetRunRequest(run_id=run_id)
        response = await self._call(self._runs.GetRun, request, timeout=timeout)
        return self._read(run_from_proto, response.run)

    async def pending_actions(
        self, run_id: str, *, timeout: float | None = None
    ) -> list[PendingAction]:
        """The open pending actions of a run."""
        request = run_service_pb2.GetRunRequest(run_id=run_id)
        response = await self._call(self._runs.GetRun, request, timeout=timeout)
        return [self._read(pending_action_from_proto, a) for a in response.pending_actions]

    def runs(self, thread_id: str, *, page_size: int = 0) -> AsyncIterator[Run]:
        """A thread's runs, newest first, page by page."""

        async def fetch(token: str) -> tuple[list[Run], str]:
            request = run_service_pb2.ListRunsRequest(
                thread_id=thread_id, page_size=page_size, page_token=token
            )
            response = await self._call(self._runs.ListRuns, request)
            return [self._read(run_from_proto, r) for r in response.runs], response.next_page_token

        return self._pages(fetch)

    def stream_run(self, run_id: str, *, after_seq: int = 0) -> AsyncIterator[RunEvent]:
        """A run's events after ``after_seq`` until it ends (see :meth:`RunHandle.stream`)."""
        return self._run_events(run_id, after_seq)

    def _run_events(
        self, run_id: str, after_seq: int, *, opened: Any = None
    ) -> AsyncIterator[RunEvent]:
        async def ended() -> bool:
            return (await self.get_run(run_id)).is_terminal

        return resuming_run_events(
            self._runs,
            run_id,
            after_seq=after_seq,
            metadata=self._metadata,
            policy=self.retry,
            is_terminal_run=ended,
            opened=opened,
        )

    async def cancel_run(
        self, run_id: str, reason: str | None = None, *, timeout: float | None = None
    ) -> Run:
        """Cancel a queued, running or waiting run.

        Retried on UNAVAILABLE like the rest: when a lost reply hid a
        cancellation that took effect, the repeat finds the run cancelled and
        returns it instead of reporting FAILED_PRECONDITION.
        """
        request = run_service_pb2.CancelRunRequest(run_id=run_id, reason=reason)
        try:
            response = await self._call(self._runs.CancelRun, request, timeout=timeout)
        except FailedPreconditionError:
            run = await self.get_run(run_id)
            if run.status == "cancelled":
                return run
            raise
        return self._read(run_from_proto, response.run)

    async def resolve_action(
        self,
        run_id: str,
        action_id: str,
        *,
        approved: bool | None = None,
        reason: str | None = None,
        tool_result: bool = False,
        output: JsonValue = None,
        error_text: str | None = None,
        data: JsonValue = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> Run:
        """Resolve a pending action of a waiting run.

        One of: an approval (``approved``), a client tool's result
        (``tool_result=True`` with ``output`` or ``error_text``), or ``data``.

        Prefer the verbs of :class:`RunHandle` (``approve``, ``deny``,
        ``submit_tool_result``, ``submit_data``).
        """
        request = run_service_pb2.ResolvePendingActionRequest(
            run_id=run_id, action_id=action_id, request_id=request_id or new_request_id()
        )
        if approved is not None:
            request.approval.CopyFrom(run_service_pb2.ApprovalDecision(approved=approved))
            if reason is not None:
                request.approval.reason = reason
        elif tool_result or error_text is not None:
            if error_text is not None:
                request.tool_result.error_text = error_text
            else:
                request.tool_result.output.CopyFrom(value_to_proto(output, path="output"))
        else:
            request.data.CopyFrom(value_to_proto(data, path="data"))
        response = await self._call(self._runs.ResolvePendingAction, request, timeout=timeout)
        return self._read(run_from_proto, response.run)
