"""Transitions of an execution: every write a run makes, with its events, atomically.

Each completed assistant step commits its own message atomically with the
run transition (RT-05); the events describing a commit (the message with its
position, the final status) are built inside the same transaction and
published live only once durable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pai_grpc.domain import (
    ChunkEvent,
    FinishChunk,
    LifecycleMessage,
    Message,
    MessageEvent,
    MessagePart,
    PendingAction,
    PendingActionEvent,
    RunError,
    RunEvent,
    RunEventPayload,
    StatusEvent,
    ToolPart,
    Usage,
)
from pai_grpc.lifecycle._report import HookReport
from pai_grpc.runtime._agents import Agent
from pai_grpc.runtime._records import message_from_record, parts_to_json, payload_to_json
from pai_grpc.runtime._services import Services
from pai_grpc.runtime._sink import EventSink
from pai_grpc.runtime._tool_phase import ToolOutcome
from pai_grpc.streams import ThreadHint
from storage import (
    NOW,
    PROMOTE_NEXT,
    CommitResult,
    Lease,
    MessagePatch,
    NewEvent,
    NewMessage,
    NewPendingAction,
    PendingActionPatch,
    RunPatch,
    RunRecord,
    ThreadPatch,
    WriteSet,
)


class Stop(Exception):
    """Internal: the episode ended (its terminal or waiting transition is committed)."""


class RunFailure(Exception):
    """Internal: fail the run with a specific reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Transitions:
    """The commits of one execution (state is set up by :class:`Execution`)."""

    _services: Services
    _agent: Agent
    _run: RunRecord
    _lease: Lease
    _scope: str
    _thread_id: str
    _usage: Usage
    _step_count: int
    _input: dict[str, Any]
    _report: HookReport
    sink: EventSink

    @property
    def run_id(self) -> str:
        """The run being executed."""
        return self._run.id

    def emit(self, payload: RunEventPayload) -> RunEvent:
        """Emit one live event of this run."""
        return self.sink.emit(payload)

    def _check_sink(self) -> None:
        if self.sink.failure is not None:
            raise self.sink.failure

    def _run_patch(self, **changes: Any) -> RunPatch:
        """A fenced run update carrying the usage and step count so far.

        Hooks that failed open since the last transition are recorded too.
        """
        if self._report.dirty:
            changes.setdefault("hook_failures", self._report.to_json())
            self._report.dirty = False
        return RunPatch(
            id=self.run_id,
            lease=self._lease,
            usage=self._usage.model_dump(mode="json", exclude_none=True),
            step_count=self._step_count,
            **changes,
        )

    async def _commit_step(self, message: NewMessage) -> None:
        """Commit a non-terminal step: its message plus usage and step count."""
        await self._commit(
            WriteSet(
                scope=self._scope,
                thread_id=self._thread_id,
                append_messages=[message],
                update_runs=[self._run_patch()],
            ),
            after=lambda result: [MessageEvent(message=message_from_record(result.messages[0]))],
            count=1,
            kinds=("messages_committed",),
        )

    async def _finish(
        self,
        *,
        status: str,
        outcome: str,
        reason: str | None,
        message: NewMessage | None,
        error: RunError | None = None,
        before: list[RunEventPayload] | None = None,
        expected_message_count: int | None = None,
        update_messages: Sequence[MessagePatch] = (),
        cancel_pending: Sequence[str] = (),
    ) -> None:
        """Commit the terminal transition (with the last step's message, if any); raise Stop.

        The thread's next queued run becomes runnable in the same write.
        """
        final: list[RunEventPayload] = list(before or [])
        if status == "completed":
            final.append(ChunkEvent(chunk=FinishChunk(total_usage=self._usage)))
        final.append(
            StatusEvent.model_validate(
                {"status": status, "outcome": outcome, "reason": reason, "error": error}
            )
        )

        def after(result: CommitResult) -> list[RunEventPayload]:
            payloads: list[RunEventPayload] = [
                MessageEvent(message=message_from_record(m)) for m in result.messages
            ]
            return payloads + final

        await self._commit(
            WriteSet(
                scope=self._scope,
                thread_id=self._thread_id,
                expected_message_count=expected_message_count,
                thread=ThreadPatch(active_run_id=PROMOTE_NEXT),
                append_messages=[message] if message else [],
                update_messages=list(update_messages),
                update_pending=[
                    PendingActionPatch(id=a, status="cancelled") for a in cancel_pending
                ],
                update_runs=[
                    self._run_patch(
                        status=status,
                        outcome=outcome,
                        reason=reason,
                        error=error.model_dump(mode="json") if error else None,
                        ended_at=NOW,
                        release_lease=True,
                    )
                ],
            ),
            after=after,
            count=(1 if message else 0) + len(final),
            kinds=("status", "messages_committed") if message else ("status",),
            runnable=True,
        )
        raise Stop

    async def _commit_outcomes(
        self, message_id: str, parts: list[MessagePart], outcomes: Sequence[ToolOutcome]
    ) -> list[MessagePart]:
        """Publish tool results and commit them into the step's message.

        With pending actions (client tools, suspends) the run waits, in the
        same write (then Stop is raised); otherwise the loop goes on.
        """
        final = self._merge(parts, outcomes)
        for outcome in outcomes:
            for chunk in outcome.chunks:
                self.emit(ChunkEvent(chunk=chunk))
        pending = [o.pending for o in outcomes if o.pending is not None]
        suspends = dict(self._input.get("suspends") or {})
        for o in outcomes:
            if o.pending is not None and o.suspend is not None:
                suspends[o.pending.tool_call_id] = o.suspend
        self._input = {**self._input, "suspends": suspends}
        patch = MessagePatch(id=message_id, parts=parts_to_json(final))
        if not pending:
            await self._commit(
                WriteSet(
                    scope=self._scope,
                    thread_id=self._thread_id,
                    update_messages=[patch],
                    update_runs=[self._run_patch(input=self._input)],
                )
            )
            return final
        await self._wait(patch, pending)
        return final

    @staticmethod
    def _merge(parts: list[MessagePart], outcomes: Sequence[ToolOutcome]) -> list[MessagePart]:
        replaced = {o.part.tool_call_id: o.part for o in outcomes}
        return [replaced.get(p.tool_call_id, p) if isinstance(p, ToolPart) else p for p in parts]

    async def _wait(self, patch: MessagePatch, pending: list[NewPendingAction]) -> None:
        """The waiting transition: pending actions open, the lease is released; Stop."""
        now = datetime.now(UTC)
        await self._commit(
            WriteSet(
                scope=self._scope,
                thread_id=self._thread_id,
                thread=ThreadPatch(status="waiting"),
                update_messages=[patch],
                insert_pending=pending,
                update_runs=[
                    self._run_patch(status="waiting", input=self._input, release_lease=True)
                ],
            ),
            after=lambda _result: [
                *(
                    PendingActionEvent(action=_pending_domain(p, self._thread_id, now))
                    for p in pending
                ),
                StatusEvent(status="waiting"),
            ],
            count=len(pending) + 1,
            kinds=("status",),
        )
        raise Stop

    async def _steered_since(self, anchor: int) -> tuple[bool, int]:
        """Whether a user message was committed at or after ``anchor``; and the count now."""
        thread = await self._services.store.get_thread(self._scope, self._thread_id)
        if thread is None:
            raise RunFailure("THREAD_GONE", "the thread was deleted")
        if thread.message_count <= anchor:
            return False, thread.message_count
        newer = await self._services.store.list_messages(
            self._scope,
            self._thread_id,
            view="all",
            order="desc",
            limit=max(1, thread.message_count - anchor),
        )
        steered = any(m.role == "user" and m.position >= anchor for m in newer.items)
        return steered, thread.message_count

    async def _last_step_message(self) -> Message | None:
        page = await self._services.store.list_messages(
            self._scope, self._thread_id, view="all", order="desc", limit=50
        )
        for record in page.items:
            if record.run_id == self.run_id and record.role == "assistant":
                return message_from_record(record)
        return None

    async def _commit(
        self,
        ws: WriteSet,
        *,
        after: Callable[[CommitResult], list[RunEventPayload]] | None = None,
        count: int = 0,
        kinds: tuple[str, ...] = (),
        runnable: bool = False,
    ) -> CommitResult:
        """Commit ``ws`` with every buffered event, plus ``count`` events built from its result.

        ``after(result)`` returns the payloads describing what was committed
        (messages with their assigned positions, the final status). They get
        their sequence numbers now, land in the same transaction, and are
        published live only once durable.
        """
        services = self._services
        built: list[RunEvent] = []
        async with self.sink.lock:
            pending = self.sink.take_pending()
            ws.events = pending + ws.events
            seqs = self.sink.allocate(count)
            last = seqs[-1] if seqs else (ws.events[-1].seq if ws.events else None)
            reserved: int | None = None
            release = False
            if last is not None:
                # The write raises the durable sequence reservation with the log.
                own = [p for p in ws.update_runs if p.id == self.run_id and p.lease]
                release = any(p.release_lease for p in own)
                reservation = self.sink.reservation(last, release=release)
                reserved = reservation if own else None
                ws.update_runs = [
                    replace(p, last_seq=last, reserved_seq=reservation)
                    if p.id == self.run_id and p.lease
                    else p
                    for p in ws.update_runs
                ]
            ws.notify.append(services.signals.note_run(self.run_id))
            if runnable:
                ws.notify.append(services.signals.note_runnable())
            # Named before the commit so the same hint reaches watchers in other
            # processes (NOTIFY on commit) as the ones in this one.
            hint = None
            if kinds:
                visible = tuple(m.id for m in ws.append_messages if m.visible_transcript)
                hint = ThreadHint(self._thread_id, kinds, visible)
                ws.notify.append(services.signals.note_thread(hint))

            def events_after(result: CommitResult) -> list[NewEvent]:
                payloads = after(result) if after is not None else []
                if len(payloads) != len(seqs):
                    raise RuntimeError(f"expected {len(seqs)} events, built {len(payloads)}")
                now = datetime.now(UTC)
                built[:] = [
                    RunEvent(seq=q, time=now, payload=p)
                    for q, p in zip(seqs, payloads, strict=True)
                ]
                return [
                    NewEvent(self.run_id, e.seq, payload_to_json(e.payload), e.time) for e in built
                ]

            try:
                result = await services.store.commit(ws, events_after=events_after)
            except BaseException:
                self.sink.restore(pending, seqs)
                raise
        if last is not None:
            self.sink.mark_durable(last, reserved=reserved, release=release)
        self.sink.published(built)
        # Wake local runners only when the transition made a queued run active.
        promoted = runnable and result.thread is not None and bool(result.thread.active_run_id)
        services.after_commit(hint=hint, runnable=promoted)
        return result


def _pending_domain(p: NewPendingAction, thread_id: str, now: datetime) -> PendingAction:
    return PendingAction.model_validate(
        {
            "id": p.id,
            "run_id": p.run_id,
            "thread_id": thread_id,
            "kind": p.kind,
            "status": "open",
            "tool_call_id": p.tool_call_id,
            "tool_name": p.tool_name,
            "input": p.input,
            "request": p.request,
            "created_at": now,
        }
    )


def lifecycle_draft(
    message: NewMessage, thread_id: str, position: int, parts: list[MessagePart]
) -> LifecycleMessage:
    """The assembled step message as hooks see it (before or after its commit)."""
    return LifecycleMessage.model_validate(
        {
            "message": {
                "id": message.id,
                "thread_id": thread_id,
                "role": message.role,
                "parts": parts,
                "metadata": message.metadata,
                "position": position,
                "run_id": message.run_id,
                "step_index": message.step_index,
                "created_at": datetime.now(UTC),
            },
            "private_metadata": message.private_metadata,
        }
    )


__all__ = ["RunFailure", "Stop", "Transitions", "lifecycle_draft"]
