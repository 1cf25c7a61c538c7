"""Pending-action resolution and cancellation: the operations that end a wait or a run."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pai_grpc.domain import (
    TERMINAL_RUN_STATUSES,
    AbortChunk,
    ChunkEvent,
    Resolution,
    Run,
    RunEvent,
    RunEventPayload,
    StatusEvent,
    ToolPart,
)
from pai_grpc.errors import Conflict, FailedPrecondition, InvalidArgument, NotFoundError
from pai_grpc.runtime._mutation_path import MUTATION_ATTEMPTS, Attempt, MutationPath, fingerprint
from pai_grpc.runtime._records import (
    encode_event,
    parts_from_json,
    parts_to_json,
    run_from_record,
)
from pai_grpc.runtime._tool_phase import WAITING_STATES
from pai_grpc.runtime._validate import Violations, check_id, check_reason, check_request_id
from pai_grpc.streams import ThreadHint
from storage import (
    NOW,
    PROMOTE_NEXT,
    InvalidJson,
    MessagePatch,
    PendingActionPatch,
    RunRecord,
    RunUpdate,
    StateConflict,
    ThreadPatch,
    VersionConflict,
    WriteSet,
    check_strict_json,
)

#: How long CancelRun waits for a remote lease holder to write the cancellation.
CANCEL_WAIT_SECONDS = 10.0


#: Which resolution answers which pending action kind.
_ANSWERS = {"client_tool": "tool_result", "approval": "approval", "data": "data"}


class Resolutions(MutationPath):
    """Operations that resolve pending actions and cancel runs."""

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

        async def attempt() -> Attempt:
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
                update_runs=[RunUpdate(id=run_id, expect_status=("waiting",))],
            )
            if still_open:
                return Attempt(ws, {"run_id": run_id})
            # Every answer is in: the run becomes runnable again (operation resume).
            ws.update_runs = [
                RunUpdate(
                    id=run_id,
                    expect_status=("waiting",),
                    expect_unleased=True,
                    status="running",
                    operation="resume",
                )
            ]
            ws.expected_status = ("waiting",)
            ws.thread = ThreadPatch(status="running")
            return Attempt(
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
                    RunUpdate(
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
        payloads: list[RunEventPayload] = []
        if run.reserved_seq > run.last_seq:
            payloads.append(ChunkEvent(chunk=AbortChunk(reason="recovery")))
        payloads.append(StatusEvent(status="cancelled", outcome="cancelled", reason=reason))
        now = datetime.now(UTC)
        events = [
            encode_event(run.id, RunEvent(seq=seq + i, time=now, payload=p))[0]
            for i, p in enumerate(payloads)
        ]
        seq = events[-1].seq
        ws = WriteSet(
            scope=scope,
            thread_id=run.thread_id,
            update_runs=[
                RunUpdate(
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
            # Refused if the run became (or stopped being) the active one meanwhile:
            # a queued run a finishing run promoted must be cancelled as active.
            expected_active_run=thread.active_run_id,
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
            parts = parts_from_json(list(record.parts))
            cancelled = [
                p.model_copy(update={"state": "output-error", "error_text": "cancelled"})
                if isinstance(p, ToolPart)
                and p.tool_call_id in waiting
                and p.state in WAITING_STATES
                else p
                for p in parts
            ]
            if cancelled != parts:
                patches.append(MessagePatch(id=record.id, parts=parts_to_json(cancelled)))
        return patches


__all__ = ["CANCEL_WAIT_SECONDS", "Resolutions"]
