"""The mutation path (RT-01): validate -> (scope) -> load by scope -> commit or queue.

Every operation writes one atomic write set or nothing. On an idle thread
the operation's input is committed with a new active run; on a busy thread a
durable queued run carries the input, applied when the run starts. A
``request_id`` makes each operation idempotent (AIP-155): the original
result is stored in the same transaction and replayed on retry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pai_grpc.domain import JsonObject, JsonValue, MessagePart, RunHandle, Thread, new_id
from pai_grpc.errors import Conflict, FailedPrecondition
from pai_grpc.runtime._mutation_path import Attempt, fingerprint, handle_json
from pai_grpc.runtime._records import parts_to_json, thread_from_record
from pai_grpc.runtime._resolutions import Resolutions
from pai_grpc.runtime._rewrites import Rewrites
from pai_grpc.runtime._validate import (
    Violations,
    check_id,
    check_json_object,
    check_request_id,
    check_user_parts,
    parse_etag,
)
from pai_grpc.streams import ThreadHint
from storage import (
    NewMessage,
    NewRun,
    NewThread,
    StateConflict,
    ThreadPatch,
    VersionConflict,
    WriteSet,
)


@dataclass(frozen=True)
class SendInput:
    """A Send operation, in domain terms."""

    thread_id: str
    parts: Sequence[MessagePart]
    metadata: JsonObject
    request_id: str = ""
    delivery: str = "queue"
    run_metadata: JsonObject | None = None


@dataclass(frozen=True)
class TriggerInput:
    """A Trigger operation: a run with an operation input and no user message."""

    thread_id: str
    input: JsonValue = None
    request_id: str = ""
    run_metadata: JsonObject | None = None


class Mutations(Rewrites, Resolutions):
    """Operations that change threads and start, queue or cancel runs.

    Sends, triggers and thread changes live here; history rewrites in
    :mod:`._rewrites`, resolutions and cancellation in :mod:`._resolutions`;
    all share the mutation path of :mod:`._mutation_path`.
    """

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
        check_json_object(v, "metadata", meta, self.services.limits)
        check_request_id(v, request_id, self.services.limits)
        v.raise_if_any()
        resolved = self.services.agents.resolve(agent)
        key = f"create_thread:{request_id}" if request_id else ""
        digest = fingerprint({"agent": resolved.name, "metadata": meta})
        thread_id = new_id("thr")

        async def attempt() -> Attempt:
            return Attempt(
                WriteSet(
                    scope=scope,
                    thread_id=thread_id,
                    new_thread=NewThread(id=thread_id, agent=resolved.name, metadata=meta),
                ),
                {"thread_id": thread_id},
            )

        result = await self._mutate(scope, key, digest, attempt)
        return thread_from_record(await self._load(scope, str(result["thread_id"])))

    async def update_thread_metadata(
        self, scope: str, thread_id: str, metadata: JsonObject, *, replace: bool, etag: str = ""
    ) -> Thread:
        """Shallow-merge (or replace) public metadata; with an etag, only at that version."""
        v = Violations()
        check_id(v, "thread_id", "thr", thread_id)
        check_json_object(v, "metadata", metadata, self.services.limits)
        expected = parse_etag(v, etag)
        v.raise_if_any()

        async def attempt() -> Attempt:
            thread = await self._load(scope, thread_id)
            if expected is not None and thread.version != expected:
                raise Conflict(
                    f"etag {etag} does not match the thread's current etag", reason="ETAG_MISMATCH"
                )
            merged = dict(metadata) if replace else {**thread.metadata, **metadata}
            check_json_object(v, "metadata", merged, self.services.limits)
            v.raise_if_any()
            return Attempt(
                WriteSet(
                    scope=scope,
                    thread_id=thread_id,
                    expected_version=thread.version,
                    thread=ThreadPatch(metadata=merged),
                ),
                {},
                hint=ThreadHint(thread_id, ("metadata",)),
            )

        await self._mutate(scope, "", "", attempt)
        return thread_from_record(await self._load(scope, thread_id))

    async def delete_thread(self, scope: str, thread_id: str, *, etag: str = "") -> None:
        """Delete an idle thread with its messages, runs and events."""
        v = Violations()
        check_id(v, "thread_id", "thr", thread_id)
        expected = parse_etag(v, etag)
        v.raise_if_any()
        try:
            await self.services.store.delete_thread(scope, thread_id, expected_version=expected)
        except StateConflict as e:
            raise FailedPrecondition(
                f"thread {thread_id!r} has an active run; cancel it first", reason="THREAD_BUSY"
            ) from e
        except VersionConflict as e:
            raise Conflict("the etag does not match", reason="ETAG_MISMATCH") from e
        hint = ThreadHint(thread_id, ("deleted",))
        await self.services.store.notify([self.services.signals.note_thread(hint)])
        self.services.after_commit(hint=hint)

    # ---- operations that start runs ---------------------------------------

    async def send(self, scope: str, op: SendInput) -> RunHandle:
        """Commit (idle thread) or queue (busy thread) a user message; return the run handle.

        Returns once the commit or queueing is durable, never after the model
        finishes (RT-02). With delivery ``steer`` on a running thread the
        message is committed now and the active run takes it in at its next
        step boundary.
        """
        limits = self.services.limits
        v = Violations()
        check_id(v, "thread_id", "thr", op.thread_id)
        check_user_parts(v, op.parts, limits)
        check_json_object(v, "metadata", op.metadata, limits)
        if op.run_metadata is not None:
            check_json_object(v, "run_metadata", op.run_metadata, limits)
        check_request_id(v, op.request_id, limits)
        if op.delivery not in ("queue", "steer"):
            v.add("delivery", f"unknown delivery {op.delivery!r}")
        v.raise_if_any()
        # Before any database work: a scope over its rate costs this process nothing more.
        self.services.quotas.take_send(scope)
        parts = parts_to_json(op.parts)
        key = f"send:{op.request_id}" if op.request_id else ""
        digest = fingerprint(
            {
                "thread": op.thread_id,
                "parts": parts,
                "metadata": op.metadata,
                "delivery": op.delivery,
                "run_metadata": op.run_metadata,
            }
        )

        # Most Sends find the thread idle: the first attempt commits as if it were,
        # and the write's status guard decides (no read first). A refusal means the
        # thread is busy (or changed): every later attempt reads it and decides.
        assume_idle = True

        async def attempt() -> Attempt:
            nonlocal assume_idle
            run_id, message_id = new_id("run"), new_id("msg")
            thread = None if assume_idle else await self._load(scope, op.thread_id)
            if thread is None or thread.status == "idle":
                handle = RunHandle(
                    run_id=run_id, thread_id=op.thread_id, status="queued", message_id=message_id
                )
                message = NewMessage(
                    id=message_id, role="user", parts=parts, metadata=op.metadata, run_id=run_id
                )
                run = NewRun(
                    id=run_id,
                    status="queued",
                    initiator="send",
                    operation="send",
                    input={"message_id": message_id},
                    metadata=op.run_metadata or {},
                )
                ws = self._start_run(scope, op.thread_id, run, messages=[message])
                ws.speculative, assume_idle = assume_idle, False
                return Attempt(
                    ws,
                    handle_json(handle),
                    hint=ThreadHint(op.thread_id, ("status", "messages_committed"), (message_id,)),
                    runnable=True,
                )
            if op.delivery == "steer" and thread.status == "running" and thread.active_run_id:
                handle = RunHandle(
                    run_id=thread.active_run_id,
                    thread_id=thread.id,
                    status="running",
                    message_id=message_id,
                )
                message = NewMessage(
                    id=message_id,
                    role="user",
                    parts=parts,
                    metadata=op.metadata,
                    run_id=thread.active_run_id,
                )
                return Attempt(
                    WriteSet(
                        scope=scope,
                        thread_id=thread.id,
                        expected_status=("running",),
                        append_messages=[message],
                    ),
                    handle_json(handle),
                    hint=ThreadHint(thread.id, ("messages_committed",), (message_id,)),
                )
            handle = RunHandle(run_id=run_id, thread_id=thread.id, status="queued")
            run = NewRun(
                id=run_id,
                status="queued",
                initiator="send",
                operation="send",
                input={"message": {"id": message_id, "parts": parts, "metadata": op.metadata}},
                metadata=op.run_metadata or {},
            )
            return Attempt(self._queue_run(scope, thread, run), handle_json(handle))

        return RunHandle.model_validate(await self._mutate(scope, key, digest, attempt))

    async def trigger(self, scope: str, op: TriggerInput) -> RunHandle:
        """Start (or queue) a run with an operation input and no user message."""
        limits = self.services.limits
        v = Violations()
        check_id(v, "thread_id", "thr", op.thread_id)
        check_json_object(v, "input", {"input": op.input}, limits)
        if op.run_metadata is not None:
            check_json_object(v, "run_metadata", op.run_metadata, limits)
        check_request_id(v, op.request_id, limits)
        v.raise_if_any()
        key = f"trigger:{op.request_id}" if op.request_id else ""
        digest = fingerprint({"thread": op.thread_id, "input": op.input, "meta": op.run_metadata})

        async def attempt() -> Attempt:
            thread = await self._load(scope, op.thread_id)
            run_id = new_id("run")
            run = NewRun(
                id=run_id,
                status="queued",
                initiator="trigger",
                operation="trigger",
                input={"trigger": op.input},
                metadata=op.run_metadata or {},
            )
            handle = RunHandle(run_id=run_id, thread_id=thread.id, status="queued")
            if thread.status == "idle":
                return Attempt(
                    self._start_run(scope, thread.id, run),
                    handle_json(handle),
                    hint=ThreadHint(thread.id, ("status",)),
                    runnable=True,
                )
            return Attempt(self._queue_run(scope, thread, run), handle_json(handle))

        return RunHandle.model_validate(await self._mutate(scope, key, digest, attempt))


__all__ = ["Mutations", "SendInput", "TriggerInput"]
