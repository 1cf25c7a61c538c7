"""Thin handles on a thread and a run: the verbs of the API, typed with the domain."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from pai_grpc.client._stream import RunStream, ThreadUpdate
from pai_grpc.domain import (
    Delivery,
    JsonObject,
    JsonValue,
    Message,
    MessageEvent,
    MessagePart,
    PendingAction,
    Run,
    RunEvent,
    RunStatus,
    SortOrder,
    TextPart,
    Thread,
)

if TYPE_CHECKING:
    from pai_grpc.client._client import PaiClient

#: What :meth:`ThreadHandle.send` accepts: plain text, or parts (strings become text parts).
Content = str | Sequence[MessagePart | str]


def action_id(action: PendingAction | str) -> str:
    """The id of a pending action given as the action or its id."""
    return action if isinstance(action, str) else action.id


def message_text(message: Message) -> str:
    """The text parts of ``message``, joined."""
    return "".join(part.text for part in message.parts if isinstance(part, TextPart))


class RunHandle:
    """A run: stream its events, wait for it, cancel it, answer its pending actions.

    Attributes:
        id: The run id (``run_...``).
        thread_id: Its thread.
        status: The status when the handle was made (``get()`` reads the current one).
        message_id: The user message committed with the run, when there was one.
    """

    def __init__(
        self,
        client: PaiClient,
        run_id: str,
        thread_id: str = "",
        *,
        status: RunStatus | None = None,
        message_id: str | None = None,
    ) -> None:
        self.client = client
        self.id = run_id
        self.thread_id = thread_id
        self.status = status
        self.message_id = message_id

    def __repr__(self) -> str:
        return f"RunHandle({self.id!r}, thread_id={self.thread_id!r}, status={self.status!r})"

    async def get(self) -> Run:
        """The run as stored now."""
        run = await self.client.get_run(self.id)
        self.thread_id, self.status = run.thread_id, run.status
        return run

    async def pending_actions(self) -> list[PendingAction]:
        """The run's open pending actions (what a waiting run waits for)."""
        return await self.client.pending_actions(self.id)

    def stream(self, after_seq: int = 0) -> AsyncIterator[RunEvent]:
        """The run's events after ``after_seq`` until it ends, resuming across reconnects.

        Never yields a seq twice nor skips a durable event; seqs jump only
        before a ``chunk.abort{reason: "recovery"}`` (a lost execution's
        partial step is void). A run waiting for an action keeps the stream open.
        """
        return self.client.stream_run(self.id, after_seq=after_seq)

    async def wait(self) -> Run:
        """Wait until the run is terminal (completed, failed or cancelled) and return it.

        A waiting run is not terminal: resolve its pending actions meanwhile.
        """
        run = await self.get()
        if not run.is_terminal:
            async for _ in self.client.stream_run(self.id, after_seq=run.last_seq):
                pass
            run = await self.get()
        return run

    async def messages(self) -> list[Message]:
        """The messages the run committed (its assistant steps), once it has ended."""
        return [
            event.payload.message
            async for event in self.stream()
            if isinstance(event.payload, MessageEvent)
        ]

    async def text(self) -> str:
        """The assistant's reply: the text of every assistant message the run committed.

        Read from committed messages, so a step voided by a recovery never shows.
        """
        committed = await self.messages()
        return "".join(message_text(m) for m in committed if m.role == "assistant")

    async def cancel(self, reason: str | None = None) -> Run:
        """Cancel the run (queued, running or waiting)."""
        return await self.client.cancel_run(self.id, reason)

    async def approve(self, action: PendingAction | str, reason: str | None = None) -> Run:
        """Approve a tool that asked for approval."""
        return await self.client.resolve_action(
            self.id, action_id(action), approved=True, reason=reason
        )

    async def deny(self, action: PendingAction | str, reason: str | None = None) -> Run:
        """Deny a tool that asked for approval (it never runs)."""
        return await self.client.resolve_action(
            self.id, action_id(action), approved=False, reason=reason
        )

    async def submit_tool_result(
        self,
        action: PendingAction | str,
        output: JsonValue = None,
        *,
        error_text: str | None = None,
    ) -> Run:
        """Give a client tool's output (or ``error_text`` when it failed)."""
        return await self.client.resolve_action(
            self.id, action_id(action), output=output, error_text=error_text, tool_result=True
        )

    async def submit_data(self, action: PendingAction | str, data: JsonValue) -> Run:
        """Give the data a suspended tool asked for."""
        return await self.client.resolve_action(self.id, action_id(action), data=data)


class ThreadHandle:
    """A thread: send to it, read its transcript and runs, watch its head.

    Attributes:
        id: The thread id (``thr_...``).
        info: The head as last read (``None`` until read; ``get()`` refreshes it).
    """

    def __init__(self, client: PaiClient, thread_id: str, info: Thread | None = None) -> None:
        self.client = client
        self.id = thread_id
        self.info = info

    def __repr__(self) -> str:
        return f"ThreadHandle({self.id!r})"

    async def get(self) -> Thread:
        """The thread head as stored now."""
        self.info = await self.client.get_thread(self.id)
        return self.info

    async def send(
        self,
        content: Content,
        *,
        request_id: str | None = None,
        delivery: Delivery | None = None,
        metadata: JsonObject | None = None,
        run_metadata: JsonObject | None = None,
    ) -> RunHandle:
        """Send a user message; return the run that answers it.

        ``request_id`` (generated when omitted) makes retries safe: a retry
        after a lost reply returns the same run instead of starting another.
        ``delivery`` decides what happens on a busy thread (``queue`` by
        default, or ``steer`` into the active run).
        """
        return await self.client.send(
            self.id,
            content,
            request_id=request_id,
            delivery=delivery,
            metadata=metadata,
            run_metadata=run_metadata,
        )

    async def send_and_stream(
        self,
        content: Content,
        *,
        request_id: str | None = None,
        delivery: Delivery | None = None,
        metadata: JsonObject | None = None,
        run_metadata: JsonObject | None = None,
    ) -> RunStream:
        """Send a user message and stream the run that answers it, on one call.

        :meth:`send` and then :meth:`RunHandle.stream` without the round trip
        between them (the first event comes sooner). Returns once the run is
        known (``.run``); iterate the result for its events::

            stream = await thread.send_and_stream("Hello")
            async for event in stream:
                ...

        The same guarantees as the two calls: ``request_id`` makes a retry
        safe (a retry before the handle arrived streams the same run), and a
        call that breaks afterwards resumes with StreamRun after the last seq
        received. A message steered into an active run streams that run from
        its first event.
        """
        return await self.client.send_and_stream(
            self.id,
            content,
            request_id=request_id,
            delivery=delivery,
            metadata=metadata,
            run_metadata=run_metadata,
        )

    async def trigger(
        self,
        input: JsonValue = None,
        *,
        request_id: str | None = None,
        run_metadata: JsonObject | None = None,
    ) -> RunHandle:
        """Start a run with an operation input and no user message."""
        return await self.client.trigger(
            self.id, input, request_id=request_id, run_metadata=run_metadata
        )

    async def regenerate(
        self,
        message_id: str,
        *,
        etag: str | None = None,
        request_id: str | None = None,
        run_metadata: JsonObject | None = None,
    ) -> RunHandle:
        """Answer again from an assistant message; it and every later message are removed."""
        return await self.client.regenerate(
            self.id, message_id, etag=etag, request_id=request_id, run_metadata=run_metadata
        )

    async def update_metadata(
        self, metadata: JsonObject, *, replace: bool = False, etag: str | None = None
    ) -> Thread:
        """Merge ``metadata`` into the thread's public metadata (or ``replace`` it)."""
        self.info = await self.client.update_thread_metadata(
            self.id, metadata, replace=replace, etag=etag
        )
        return self.info

    def messages(self, *, order: SortOrder = "asc", page_size: int = 0) -> AsyncIterator[Message]:
        """The transcript, page by page (``order`` by position)."""
        return self.client.messages(self.id, order=order, page_size=page_size)

    def runs(self, *, page_size: int = 0) -> AsyncIterator[Run]:
        """The thread's runs, newest first, page by page."""
        return self.client.runs(self.id, page_size=page_size)

    def run(self, run_id: str) -> RunHandle:
        """A handle on one of the thread's runs (no call is made)."""
        return RunHandle(self.client, run_id, self.id)

    def watch(self, after_version: int = 0) -> AsyncIterator[ThreadUpdate]:
        """Head changes (status, messages, metadata), resuming across reconnects.

        With ``after_version=0`` the current head comes first (``snapshot``);
        the iteration ends when the thread is deleted.
        """
        return self.client.watch_thread(self.id, after_version=after_version)

    async def delete(self, etag: str | None = None) -> None:
        """Delete the (idle) thread and everything in it; ``etag`` guards a concurrent change."""
        await self.client.delete_thread(self.id, etag=etag)
