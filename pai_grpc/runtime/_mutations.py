"""The mutation path (RT-01): validate -> (scope) -> load by scope -> commit or queue.

Every operation writes one atomic write set or nothing. On an idle thread
the operation's input is committed with a new active run; on a busy thread a
durable queued run carries the input, applied when the run starts. A
``request_id`` makes each operation idempotent (AIP-155): the original
result is stored in the same transaction and replayed on retry.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pai_grpc.domain import (
    TERMINAL_RUN_STATUSES,
    AbortChunk,
    ChunkEvent,
    JsonObject,
    JsonValue,
    MessagePart,
    Resolution,
    Run,
    RunHandle,
    StatusEvent,
    Thread,
    new_id,
)
from pai_grpc.errors import Conflict, FailedPrecondition, InvalidArgument, NotFoundError
from pai_grpc.runtime._history import merge_thread_patch
from pai_grpc.runtime._records import (
    parts_to_json,
    payload_to_json,
    run_from_record,
    thread_from_record,
)
from pai_grpc.runtime._services import Services
from pai_grpc.runtime._validate import (
    Violations,
    check_id,
    check_json_object,
    check_reason,
    check_request_id,
    check_user_parts,
    parse_etag,
)
from pai_grpc.streams import ThreadHint
from storage import (
    NOW,
    PROMOTE_NEXT,
    ClaimedRun,
    CommitResult,
    DuplicateRequest,
    IdempotencyRecord,
    InvalidJson,
    Lease,
    MessagePatch,
    NewEvent,
    NewMessage,
    NewRun,
    NewThread,
    PendingActionPatch,
    RunPatch,
    RunRecord,
    StateConflict,
    ThreadPatch,
    ThreadRecord,
    VersionConflict,
    WriteSet,
    check_strict_json,
)

#: How often a contended thread's CAS is retried before the caller sees ABORTED.
MUTATION_ATTEMPTS = 100
_WAITING_TOOL_STATES = ("input-available", "approval-requested", "approval-responded")
#: How long CancelRun waits for a remote lease holder to write the cancellation.
CANCEL_WAIT_SECONDS = 10.0


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


@dataclass(frozen=True)
class RegenerateInput:
    """A Regenerate operation: re-answer from a target assistant message."""

    thread_id: str
    message_id: str
    request_id: str = ""
    etag: str = ""
    run_metadata: JsonObject | None = None


#: Which resolution answers which pending action kind.
_ANSWERS = {"client_tool": "tool_result", "approval": "approval", "data": "data"}


@dataclass(frozen=True)
class RegenerateResult:
    """The run handle plus the physical ids the rewrite removed and retained."""

    run: RunHandle
    removed_message_ids: list[str]
    retained_message_ids: list[str]


def fingerprint(payload: object) -> str:
    """A stable hash of a request body, bound to its idempotency key."""
    return hashlib.sha256(
        json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


@dataclass
class _Attempt:
    """One attempt's write set, its result (stored for idempotent replay) and wake-ups.

    ``runnable`` marks a write set that makes a new run active; it may be
    handed straight to the embedded runner (leased in the same write).
    """

    ws: WriteSet
    result: dict[str, Any]
    hint: ThreadHint | None = None
    runnable: bool = False
    #: Called once the write set committed (e.g. history_rewritten announcements).
    committed: Callable[[CommitResult], None] | None = None


class Mutations:
    """Operations that change threads and start, queue or cancel runs."""

    services: Services

    # ---- helpers -----------------------------------------------------------

    async def _load(self, scope: str, thread_id: str) -> ThreadRecord:
        record = await self.services.store.get_thread(scope, thread_id)
        if record is None:
            raise NotFoundError("thread", thread_id)
        return record

    async def _replay(self, scope: str, key: str, digest: str) -> dict[str, Any] | None:
        prior = await self.services.store.get_idempotency(scope, key)
        if prior is None:
            return None
        if prior.fingerprint != digest:
            raise InvalidArgument.field(
                "request_id", "was already used for a different request", reason="REQUEST_ID_REUSED"
            )
        return prior.result

    async def _mutate(
        self,
        scope: str,
        key: str,
        digest: str,
        attempt: Callable[[], Awaitable[_Attempt]],
    ) -> dict[str, Any]:
        """Run ``attempt`` until its write set commits (CAS retry), idempotently."""
        if key:
            prior = await self._replay(scope, key, digest)
            if prior is not None:
                return prior
        for _ in range(MUTATION_ATTEMPTS):
            a = await attempt()
            if key:
                a.ws.idempotency = IdempotencyRecord(key, digest, a.result)
            handoff = self.services.handoff
            owner = handoff.reserve() if (handoff and a.runnable and a.ws.insert_runs) else None
            if owner is not None:
                a.ws.insert_runs = [
                    replace(r, lease_owner=owner, lease_seconds=self.services.lease_seconds)
                    for r in a.ws.insert_runs
                ]
            try:
                result = await self.services.commit(
                    a.ws, hint=a.hint, runnable=a.runnable and owner is None
                )
            except VersionConflict:
                if handoff and owner:
                    handoff.unreserve()
                # The thread changed under us: decide again on fresh state.
                await asyncio.sleep(0)
                continue
            except DuplicateRequest:
                if handoff and owner:
                    handoff.unreserve()
                prior = await self._replay(scope, key, digest)
                assert prior is not None
                return prior
            except BaseException:
                if handoff and owner:
                    handoff.unreserve()
                raise
            if a.committed is not None:
                a.committed(result)
            if handoff and owner:
                run = result.runs[0]
                assert run.lease_expires_at is not None
                await handoff.adopt(
                    ClaimedRun(run, Lease(run.id, owner, run.lease_epoch, run.lease_expires_at))
                )
            return a.result
        raise Conflict("the thread kept changing; retry the request", reason="THREAD_CONTENDED")

    @staticmethod
    def _start_run(
        scope: str,
        thread: ThreadRecord,
        run: NewRun,
        *,
        messages: Sequence[NewMessage] = (),
    ) -> WriteSet:
        """Idle thread: commit the input with a new active run."""
        return WriteSet(
            scope=scope,
            thread_id=thread.id,
            expected_status=("idle",),
            thread=ThreadPatch(status="running", active_run_id=run.id),
            append_messages=list(messages),
            insert_runs=[run],
        )

    @staticmethod
    def _queue_run(scope: str, thread: ThreadRecord, run: NewRun) -> WriteSet:
        """Busy thread: a durable queued run whose input is applied when it starts."""
        return WriteSet(
            scope=scope,
            thread_id=thread.id,
            expected_status=("running", "waiting"),
            insert_runs=[run],
        )

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

        async def attempt() -> _Attempt:
            return _Attempt(
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

        async def attempt() -> _Attempt:
            thread = await self._load(scope, thread_id)
            if expected is not None and thread.version != expected:
                raise Conflict(
                    f"etag {etag} does not match the thread's current etag", reason="ETAG_MISMATCH"
                )
            merged = dict(metadata) if replace else {**thread.metadata, **metadata}
            check_json_object(v, "metadata", merged, self.services.limits)
            v.raise_if_any()
            return _Attempt(
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

        async def attempt() -> _Attempt:
            thread = await self._load(scope, op.thread_id)
            run_id, message_id = new_id("run"), new_id("msg")
            if thread.status == "idle":
                handle = RunHandle(
                    run_id=run_id, thread_id=thread.id, status="queued", message_id=message_id
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
                return _Attempt(
                    self._start_run(scope, thread, run, messages=[message]),
                    _handle_json(handle),
                    hint=ThreadHint(thread.id, ("status", "messages_committed"), (message_id,)),
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
                return _Attempt(
                    WriteSet(
                        scope=scope,
                        thread_id=thread.id,
                        expected_status=("running",),
                        append_messages=[message],
                    ),
                    _handle_json(handle),
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
            return _Attempt(self._queue_run(scope, thread, run), _handle_json(handle))

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

        async def attempt() -> _Attempt:
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
                return _Attempt(
                    self._start_run(scope, thread, run),
                    _handle_json(handle),
                    hint=ThreadHint(thread.id, ("status",)),
                    runnable=True,
                )
            return _Attempt(self._queue_run(scope, thread, run), _handle_json(handle))

        return RunHandle.model_validate(await self._mutate(scope, key, digest, attempt))

    async def regenerate(self, scope: str, op: RegenerateInput) -> RegenerateResult:
        """Remove the target assistant message and everything after it; answer again.

        On a busy thread the rewrite is queued and applied when its run starts
        (the removed/retained ids are then empty in the response).
        """
        limits = self.services.limits
        v = Violations()
        check_id(v, "thread_id", "thr", op.thread_id)
        check_id(v, "message_id", "msg", op.message_id)
        if op.run_metadata is not None:
            check_json_object(v, "run_metadata", op.run_metadata, limits)
        check_request_id(v, op.request_id, limits)
        expected = parse_etag(v, op.etag)
        v.raise_if_any()
        key = f"regenerate:{op.request_id}" if op.request_id else ""
        digest = fingerprint({"thread": op.thread_id, "target": op.message_id, "etag": op.etag})

        async def attempt() -> _Attempt:
            thread = await self._load(scope, op.thread_id)
            if expected is not None and thread.version != expected:
                raise Conflict("the etag does not match", reason="ETAG_MISMATCH")
            found = await self.services.store.get_messages(scope, thread.id, [op.message_id])
            if not found:
                raise NotFoundError("message", op.message_id)
            target = found[0]
            if target.role != "assistant":
                raise FailedPrecondition(
                    f"message {op.message_id!r} is a {target.role} message; "
                    "regenerate needs an assistant message",
                    reason="NOT_AN_ASSISTANT_MESSAGE",
                )
            run_id = new_id("run")
            handle = RunHandle(run_id=run_id, thread_id=thread.id, status="queued")
            if thread.status != "idle":
                run = NewRun(
                    id=run_id,
                    status="queued",
                    initiator="regenerate",
                    operation="regenerate",
                    input={"regenerate": {"target_message_id": target.id}},
                    metadata=op.run_metadata or {},
                )
                result = {"run": _handle_json(handle), "removed": [], "retained": []}
                return _Attempt(self._queue_run(scope, thread, run), result)
            # Prepared on every attempt; its patches share the write (HR-02, HR-03).
            agent = self.services.agents.get(thread.agent)
            runtime_context = await agent.build_runtime_context()
            history = self.services.history
            rewrite, patch = await history.regeneration(
                self.services.store, agent, thread, target, runtime_context
            )
            retained = list(rewrite.retained_message_ids)
            removed = list(rewrite.removed_message_ids)
            run = NewRun(
                id=run_id,
                status="queued",
                initiator="regenerate",
                operation="regenerate",
                input={
                    "regenerate": {
                        "target_message_id": target.id,
                        "applied": True,
                        "removed": [*removed],
                        "retained": [*retained],
                    }
                },
                metadata=op.run_metadata or {},
            )
            ws = self._start_run(scope, thread, run)
            ws.expected_version = thread.version  # the split was computed from this version
            ws.truncate_from_message_id = target.id
            ws.thread = merge_thread_patch(ws.thread, patch)

            def committed(result: CommitResult) -> None:
                after = result.thread.version if result.thread else thread.version + 1
                history.announce(
                    agent.lifecycle,
                    thread_id=thread.id,
                    rewrite=replace(rewrite, after_version=after),
                    runtime_context=runtime_context,
                )

            return _Attempt(
                ws,
                {"run": _handle_json(handle), "removed": removed, "retained": retained},
                hint=ThreadHint(thread.id, ("status", "messages_removed"), tuple(removed)),
                runnable=True,
                committed=committed,
            )

        result = await self._mutate(scope, key, digest, attempt)
        return RegenerateResult(
            run=RunHandle.model_validate(result["run"]),
            removed_message_ids=list(result["removed"]),
            retained_message_ids=list(result["retained"]),
        )

    # ---- pending actions ---------------------------------------------------

    async def resolve_pending_action(
        self,
        scope: str,
        run_id: str,
        action_id: str,
        resolution: Resolution,
        *,
        request_id: str = "",
    ) -> Run:
        """Answer a pending action of a waiting run; resume it once nothing is open.

        Resolving an action that is no longer open is FAILED_PRECONDITION and
        changes nothing.
        """
        v = Violations()
        check_id(v, "run_id", "run", run_id)
        check_id(v, "action_id", "act", action_id)
        check_request_id(v, request_id, self.services.limits)
        try:
            resolved_json = resolution.to_json()
            check_strict_json(resolved_json, path="resolution")
        except InvalidJson as e:
            v.add(e.path, e.detail)
            resolved_json = {}
        v.raise_if_any()
        key = f"resolve:{request_id}" if request_id else ""
        digest = fingerprint({"run": run_id, "action": action_id, "resolution": resolved_json})
        store = self.services.store

        async def attempt() -> _Attempt:
            run = await store.get_run(scope, run_id)
            if run is None:
                raise NotFoundError("run", run_id)
            actions = await store.list_pending_actions(scope, run_id)
            action = next((a for a in actions if a.id == action_id), None)
            if action is None:
                raise NotFoundError("pending action", action_id)
            if action.status != "open":
                raise FailedPrecondition(
                    f"pending action {action_id!r} is already {action.status}",
                    reason="PENDING_ACTION_NOT_OPEN",
                )
            if run.status != "waiting":
                raise FailedPrecondition(
                    f"run {run_id!r} is {run.status}, not waiting", reason="RUN_NOT_WAITING"
                )
            expected = _ANSWERS.get(action.kind)
            # Any suspended call may also be fulfilled by hand with a tool result.
            manual = resolution.kind == "tool_result"
            if resolution.kind != expected and not manual:
                raise InvalidArgument.field(
                    "resolution",
                    f"a {action.kind} pending action is answered with {expected}, "
                    f"not {resolution.kind}",
                    reason="WRONG_RESOLUTION",
                )
            still_open = [a for a in actions if a.status == "open" and a.id != action_id]
            ws = WriteSet(
                scope=scope,
                thread_id=run.thread_id,
                update_pending=[
                    PendingActionPatch(id=action_id, status="resolved", resolution=resolved_json)
                ],
                update_runs=[RunPatch(id=run_id, expect_status=("waiting",))],
            )
            if still_open:
                return _Attempt(ws, {"run_id": run_id})
            # Every answer is in: the run becomes runnable again (operation resume).
            ws.update_runs = [
                RunPatch(
                    id=run_id,
                    expect_status=("waiting",),
                    expect_unleased=True,
                    status="running",
                    operation="resume",
                )
            ]
            ws.expected_status = ("waiting",)
            ws.thread = ThreadPatch(status="running")
            return _Attempt(
                ws,
                {"run_id": run_id},
                hint=ThreadHint(run.thread_id, ("status",)),
                runnable=True,
            )

        try:
            await self._mutate(scope, key, digest, attempt)
        except StateConflict as e:
            raise FailedPrecondition(
                f"pending action {action_id!r} was resolved concurrently",
                reason="PENDING_ACTION_NOT_OPEN",
            ) from e
        record = await store.get_run(scope, run_id)
        assert record is not None
        return run_from_record(record)

    # ---- cancellation ------------------------------------------------------

    async def cancel_run(self, scope: str, run_id: str, *, reason: str | None = None) -> Run:
        """Cancel a queued, running or waiting run.

        A running run is cancelled by its lease holder (here at once, in
        another process through a notification or its next heartbeat), which
        aborts the provider stream and commits the cancellation; the partial
        step is never committed. Queued and waiting runs hold no lease and are
        cancelled directly. Either way the thread's next queued run becomes
        runnable in the same write.
        """
        v = Violations()
        check_id(v, "run_id", "run", run_id)
        check_reason(v, reason, self.services.limits)
        v.raise_if_any()
        why = reason or "cancelled"
        store = self.services.store
        for _ in range(MUTATION_ATTEMPTS):
            run = await store.get_run(scope, run_id)
            if run is None:
                raise NotFoundError("run", run_id)
            if run.status in TERMINAL_RUN_STATUSES:
                raise FailedPrecondition(
                    f"run {run_id!r} already ended ({run.status})", reason="RUN_ALREADY_ENDED"
                )
            leased = (
                run.lease_owner is not None
                and run.lease_expires_at is not None
                and (run.lease_expires_at > await store.now())
            )
            if run.status == "running" and leased:
                return await self._cancel_leased(scope, run, why)
            try:
                await self._cancel_unleased(scope, run, why)
            except (VersionConflict, StateConflict):
                continue  # it moved (claimed, resolved, logged): look again
            record = await store.get_run(scope, run_id)
            assert record is not None
            return run_from_record(record)
        raise Conflict("the run kept changing; retry", reason="RUN_CONTENDED")

    async def _cancel_leased(self, scope: str, run: RunRecord, reason: str) -> Run:
        services = self.services
        await services.commit(
            WriteSet(
                scope=scope,
                thread_id=run.thread_id,
                update_runs=[
                    # The reason travels with the request; the lease holder reads it back.
                    RunPatch(
                        id=run.id,
                        expect_status=("running",),
                        cancel_requested_at=NOW,
                        reason=reason,
                    )
                ],
                notify=[services.signals.note_cancel(run.id)],
            )
        )
        services.signals.fire_cancel(run.id)
        deadline = asyncio.get_running_loop().time() + CANCEL_WAIT_SECONDS
        while asyncio.get_running_loop().time() < deadline:
            record = await services.store.get_run(scope, run.id)
            if record is None or record.status in TERMINAL_RUN_STATUSES:
                break
            await services.broker.wait(run.id, 0.2)
        record = await services.store.get_run(scope, run.id)
        if record is None:
            raise NotFoundError("run", run.id)
        return run_from_record(record)

    async def _cancel_unleased(self, scope: str, run: RunRecord, reason: str) -> None:
        """Cancel a run nobody executes: queued, waiting, or with an expired lease."""
        store = self.services.store
        thread = await self._load(scope, run.thread_id)
        active = thread.active_run_id == run.id
        pending = await store.list_pending_actions(scope, run.id, status="open")
        message_patches = await self._cancel_waiting_tool_parts(scope, run, pending)
        # Above every number a lost execution may have published live; readers
        # that saw its unflushed events are told to drop them first.
        seq = max(run.last_seq, run.reserved_seq) + 1
        events: list[NewEvent] = []
        if run.reserved_seq > run.last_seq:
            abort = ChunkEvent(chunk=AbortChunk(reason="recovery"))
            events.append(NewEvent(run.id, seq, payload_to_json(abort)))
            seq += 1
        status = StatusEvent(status="cancelled", outcome="cancelled", reason=reason)
        events.append(NewEvent(run.id, seq, payload_to_json(status)))
        ws = WriteSet(
            scope=scope,
            thread_id=run.thread_id,
            update_runs=[
                RunPatch(
                    id=run.id,
                    expect_status=(run.status,),
                    expect_last_seq=run.last_seq,
                    expect_unleased=True,
                    status="cancelled",
                    outcome="cancelled",
                    reason=reason,
                    ended_at=NOW,
                    last_seq=seq,
                    reserved_seq=seq,
                    release_lease=True,
                )
            ],
            update_pending=[PendingActionPatch(id=p.id, status="cancelled") for p in pending],
            update_messages=message_patches,
            events=events,
        )
        if active:
            ws.thread = ThreadPatch(active_run_id=PROMOTE_NEXT)
            ws.expected_status = (thread.status,)
        await self.services.commit(
            ws,
            hint=ThreadHint(run.thread_id, ("status",)) if active else None,
            runnable=active,
            runs=(run.id,),
        )

    async def _cancel_waiting_tool_parts(
        self, scope: str, run: RunRecord, pending: Sequence[Any]
    ) -> list[MessagePatch]:
        """Waiting tool parts of the run's messages become cancelled tool errors."""
        waiting = {p.tool_call_id for p in pending}
        if not waiting:
            return []
        message_ids = sorted({p.message_id for p in pending if p.message_id})
        patches: list[MessagePatch] = []
        for record in await self.services.store.get_messages(scope, run.thread_id, message_ids):
            parts: list[Any] = []
            changed = False
            for part in record.parts:
                if (
                    isinstance(part, dict)
                    and part.get("type") == "tool"
                    and part.get("tool_call_id") in waiting
                    and part.get("state")
                    in ("input-available", "approval-requested", "approval-responded")
                ):
                    part = {**part, "state": "output-error", "error_text": "cancelled"}
                    changed = True
                parts.append(part)
            if changed:
                patches.append(MessagePatch(id=record.id, parts=parts))
        return patches


def _handle_json(handle: RunHandle) -> dict[str, Any]:
    out: dict[str, Any] = handle.model_dump(mode="json", exclude_none=True)
    return out
