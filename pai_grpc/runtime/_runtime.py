"""The runtime facade the server talks to: mutations, reads and run streams.

Every operation takes the caller's resolved scope; everything outside it is
indistinguishable from absent. Mutations follow RT-01: validate body and
contract -> (scope was resolved by the caller) -> load the thread by scope ->
commit or queue atomically -> wake runners -> return the handle.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pai_grpc.domain import (
    TERMINAL_RUN_STATUSES,
    JsonObject,
    Message,
    MessagePart,
    PendingAction,
    Run,
    RunEvent,
    RunHandle,
    StatusEvent,
    Thread,
    new_id,
)
from pai_grpc.errors import Conflict, FailedPrecondition, InvalidArgument, NotFoundError
from pai_grpc.runtime._agents import AgentRegistry
from pai_grpc.runtime._records import (
    event_from_record,
    message_from_record,
    parts_to_json,
    pending_action_from_record,
    run_from_record,
    thread_from_record,
)
from pai_grpc.runtime._validate import (
    Limits,
    Violations,
    check_id,
    check_json_object,
    check_request_id,
    check_user_parts,
    page_size,
)
from pai_grpc.streams import Broker
from storage import (
    DuplicateRequest,
    IdempotencyRecord,
    InvalidPageToken,
    NewMessage,
    NewRun,
    NewThread,
    Store,
    ThreadPatch,
    VersionConflict,
    WriteSet,
)
from storage import NotFound as StorageNotFound

log = logging.getLogger("pai_grpc.runtime")

#: How often a busy thread's CAS is retried before the caller sees ABORTED.
MUTATION_ATTEMPTS = 64
#: Log-follow poll interval when no wake-up arrives (cross-process fallback).
FOLLOW_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class SendInput:
    """A Send operation, in domain terms."""

    thread_id: str
    parts: Sequence[MessagePart]
    metadata: JsonObject
    request_id: str = ""
    delivery: str = "queue"
    run_metadata: JsonObject | None = None


def _fingerprint(payload: object) -> str:
    return hashlib.sha256(
        json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


class Runtime:
    """Mutations, reads and run streams over one store."""

    def __init__(
        self,
        store: Store,
        agents: AgentRegistry,
        *,
        broker: Broker | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.store = store
        self.agents = agents
        self.broker = broker or Broker()
        self.limits = limits or Limits()
        self._wakers: list[Callable[[], None]] = []

    def on_runnable(self, waker: Callable[[], None]) -> None:
        """Register a callback fired when new work becomes runnable (runners wake up)."""
        self._wakers.append(waker)

    def _wake(self) -> None:
        for waker in self._wakers:
            waker()

    # ---- threads -----------------------------------------------------------

    async def create_thread(
        self,
        scope: str,
        *,
        agent: str = "",
        metadata: JsonObject | None = None,
        request_id: str = "",
    ) -> Thread:
        """Create a thread for ``agent`` (the default agent when empty)."""
        v = Violations()
        meta = metadata or {}
        check_json_object(v, "metadata", meta, self.limits)
        check_request_id(v, request_id, self.limits)
        v.raise_if_any()
        resolved = self.agents.resolve(agent)
        key = f"create_thread:{request_id}" if request_id else ""
        fingerprint = _fingerprint({"agent": resolved.name, "metadata": meta})
        if key:
            prior = await self._replay(scope, key, fingerprint)
            if prior is not None:
                return await self.get_thread(scope, str(prior["thread_id"]))
        thread_id = new_id("thr")
        try:
            result = await self.store.commit(
                WriteSet(
                    scope=scope,
                    thread_id=thread_id,
                    new_thread=NewThread(id=thread_id, agent=resolved.name, metadata=meta),
                    idempotency=IdempotencyRecord(key, fingerprint, {"thread_id": thread_id})
                    if key
                    else None,
                )
            )
        except DuplicateRequest:
            prior = await self._replay(scope, key, fingerprint)
            assert prior is not None
            return await self.get_thread(scope, str(prior["thread_id"]))
        assert result.thread is not None
        return thread_from_record(result.thread)

    async def get_thread(self, scope: str, thread_id: str) -> Thread:
        """A thread head of the scope."""
        v = Violations()
        check_id(v, "thread_id", "thr", thread_id)
        v.raise_if_any()
        record = await self.store.get_thread(scope, thread_id)
        if record is None:
            raise NotFoundError("thread", thread_id)
        return thread_from_record(record)

    async def list_messages(
        self,
        scope: str,
        thread_id: str,
        *,
        page_size_: int = 0,
        page_token: str = "",
        order: str = "asc",
        after_message_id: str = "",
        before_message_id: str = "",
    ) -> tuple[list[Message], str]:
        """A page of the thread's transcript."""
        v = Violations()
        check_id(v, "thread_id", "thr", thread_id)
        check_id(v, "after_message_id", "msg", after_message_id, required=False)
        check_id(v, "before_message_id", "msg", before_message_id, required=False)
        size = page_size(v, page_size_, self.limits)
        v.raise_if_any()
        try:
            page = await self.store.list_messages(
                scope,
                thread_id,
                view="transcript",
                order=order,
                after_message_id=after_message_id or None,
                before_message_id=before_message_id or None,
                limit=size,
                page_token=page_token,
            )
        except InvalidPageToken as e:
            raise InvalidArgument.field("page_token", str(e), reason="INVALID_PAGE_TOKEN") from e
        except StorageNotFound as e:
            if e.kind == "message":
                field = "after_message_id" if e.key == after_message_id else "before_message_id"
                raise InvalidArgument.field(
                    field, "is not a message of this thread", reason="UNKNOWN_MESSAGE"
                ) from e
            raise NotFoundError(e.kind, e.key) from e
        return [message_from_record(r) for r in page.items], page.next_page_token

    # ---- operations --------------------------------------------------------

    async def send(self, scope: str, op: SendInput) -> RunHandle:
        """Commit (idle thread) or queue (busy thread) a user message; return the run handle.

        Returns as soon as the commit or queueing is durable, never after the
        model finishes (RT-02).
        """
        v = Violations()
        check_id(v, "thread_id", "thr", op.thread_id)
        check_user_parts(v, op.parts, self.limits)
        check_json_object(v, "metadata", op.metadata, self.limits)
        if op.run_metadata is not None:
            check_json_object(v, "run_metadata", op.run_metadata, self.limits)
        check_request_id(v, op.request_id, self.limits)
        if op.delivery not in ("queue", "steer"):
            v.add("delivery", f"unknown delivery {op.delivery!r}")
        v.raise_if_any()
        parts = parts_to_json(op.parts)
        key = f"send:{op.request_id}" if op.request_id else ""
        fingerprint = _fingerprint(
            {
                "thread": op.thread_id,
                "parts": parts,
                "metadata": op.metadata,
                "delivery": op.delivery,
                "run_metadata": op.run_metadata,
            }
        )
        if key:
            prior = await self._replay(scope, key, fingerprint)
            if prior is not None:
                return RunHandle.model_validate(prior)

        for _attempt in range(MUTATION_ATTEMPTS):
            thread = await self.store.get_thread(scope, op.thread_id)
            if thread is None:
                raise NotFoundError("thread", op.thread_id)
            run_id, message_id = new_id("run"), new_id("msg")
            if thread.status == "idle":
                handle = RunHandle(
                    run_id=run_id, thread_id=thread.id, status="queued", message_id=message_id
                )
                ws = WriteSet(
                    scope=scope,
                    thread_id=thread.id,
                    expected_status=("idle",),
                    thread=ThreadPatch(status="running", active_run_id=run_id),
                    append_messages=[
                        NewMessage(
                            id=message_id,
                            role="user",
                            parts=parts,
                            metadata=op.metadata,
                            run_id=run_id,
                        )
                    ],
                    insert_runs=[
                        NewRun(
                            id=run_id,
                            status="queued",
                            initiator="send",
                            operation="send",
                            input={"message_id": message_id},
                            metadata=op.run_metadata or {},
                        )
                    ],
                )
            else:
                # Busy: a durable queued run; its message is committed when it starts.
                handle = RunHandle(run_id=run_id, thread_id=thread.id, status="queued")
                ws = WriteSet(
                    scope=scope,
                    thread_id=thread.id,
                    expected_status=("running", "waiting"),
                    insert_runs=[
                        NewRun(
                            id=run_id,
                            status="queued",
                            initiator="send",
                            operation="send",
                            input={
                                "message": {
                                    "id": message_id,
                                    "parts": parts,
                                    "metadata": op.metadata,
                                }
                            },
                            metadata=op.run_metadata or {},
                        )
                    ],
                )
            if key:
                ws.idempotency = IdempotencyRecord(
                    key, fingerprint, handle.model_dump(mode="json", exclude_none=True)
                )
            try:
                await self.store.commit(ws)
            except VersionConflict:
                # The thread changed status under us: decide again on fresh state.
                await asyncio.sleep(0)
                continue
            except DuplicateRequest:
                prior = await self._replay(scope, key, fingerprint)
                assert prior is not None
                return RunHandle.model_validate(prior)
            self._wake()
            return handle
        raise Conflict(
            f"thread {op.thread_id!r} kept changing; retry the request", reason="THREAD_CONTENDED"
        )

    async def _replay(self, scope: str, key: str, fingerprint: str) -> dict[str, Any] | None:
        """The stored result of an idempotent request, or ``None`` if it is new."""
        prior = await self.store.get_idempotency(scope, key)
        if prior is None:
            return None
        if prior.fingerprint != fingerprint:
            raise InvalidArgument.field(
                "request_id",
                "was already used for a different request",
                reason="REQUEST_ID_REUSED",
            )
        return prior.result

    # ---- runs --------------------------------------------------------------

    async def get_run(self, scope: str, run_id: str) -> tuple[Run, list[PendingAction]]:
        """A run of the scope with its open pending actions."""
        v = Violations()
        check_id(v, "run_id", "run", run_id)
        v.raise_if_any()
        record = await self.store.get_run(scope, run_id)
        if record is None:
            raise NotFoundError("run", run_id)
        pending = await self.store.list_pending_actions(scope, run_id, status="open")
        return run_from_record(record), [pending_action_from_record(p) for p in pending]

    async def stream_run(
        self, scope: str, run_id: str, *, after_seq: int = 0
    ) -> AsyncIterator[RunEvent]:
        """Events of a run after ``after_seq``: the log first, then live, until terminal.

        Events of a run executing in this process come from its live channel
        the moment they are emitted; otherwise the chunk log is followed and
        readers are woken by commits (and, across processes, notifications).
        """
        v = Violations()
        check_id(v, "run_id", "run", run_id)
        if after_seq < 0:
            v.add("after_seq", "must not be negative")
        v.raise_if_any()
        record = await self.store.get_run(scope, run_id)
        if record is None:
            raise NotFoundError("run", run_id)
        if after_seq > record.last_seq and record.status in TERMINAL_RUN_STATUSES:
            raise FailedPrecondition(
                f"run {run_id!r} ended at seq {record.last_seq}; "
                f"after_seq {after_seq} is beyond it",
                reason="SEQ_OUT_OF_RANGE",
            )
        return self._follow(scope, run_id, after_seq)

    async def _follow(self, scope: str, run_id: str, cursor: int) -> AsyncIterator[RunEvent]:
        while True:
            channel = self.broker.channel(run_id)
            delivered = False
            if channel is not None and channel.covers(cursor):
                for event in channel.since(cursor):
                    yield event
                    cursor = event.seq
                    delivered = True
                    if _is_terminal(event):
                        return
            else:
                for rec in await self.store.read_events(scope, run_id, after_seq=cursor):
                    event = event_from_record(rec)
                    yield event
                    cursor = event.seq
                    delivered = True
                    if _is_terminal(event):
                        return
            if delivered:
                continue
            if channel is None:
                record = await self.store.get_run(scope, run_id)
                if record is None:
                    return
                if record.status in TERMINAL_RUN_STATUSES and record.last_seq <= cursor:
                    return
            elif channel.closed and channel.aborted:
                # The execution lost its lease: what it streamed past the log is void.
                cursor = min(cursor, channel.durable_seq)
            await self.broker.wait(run_id, FOLLOW_POLL_SECONDS)


def _is_terminal(event: RunEvent) -> bool:
    payload = event.payload
    return isinstance(payload, StatusEvent) and payload.status in TERMINAL_RUN_STATUSES


__all__ = ["Runtime", "SendInput"]
