"""The run committer: every write an execution makes, with its events, atomically.

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
    StepStreamChunk,
    Usage,
)
from pai_grpc.lifecycle.internal import HookReport
from pai_grpc.runtime._records import encode_event, message_from_record, parts_to_json
from pai_grpc.runtime._services import Services
from pai_grpc.runtime._sink import EventSink
from pai_grpc.runtime._tool_phase import ToolOutcome, merge_outcomes
from pai_grpc.streams import EncodedRunEvent, RunChannel, ThreadHint
from pai_grpc.telemetry import bounded_reason
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
    RunRecord,
    RunUpdate,
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


class RunCommitter:
    """Every write one execution makes for its run, with the events describing it.

    It owns the run's progress that each transition records (usage, step
    count, the run's input with suspend bookkeeping) and the lease the writes
    are fenced by; the executor and the hook pipeline advance the progress and
    call the transitions.
    """

    def __init__(
        self,
        *,
        services: Services,
        run: RunRecord,
        lease: Lease,
        sink: EventSink,
        report: HookReport,
        agent: str = "",
    ) -> None:
        self._services = services
        self._report = report
        self._agent = agent
        self._started_at = run.started_at
        self.sink = sink
        self.run_id = run.id
        self.scope = run.scope
        self.thread_id = run.thread_id
        #: The current lease (renewed by the executor's heartbeat).
        self.lease = lease
        self.usage = Usage.model_validate(run.usage)
        self.step_count = run.step_count
        #: The run's input (with suspend bookkeeping while tools wait).
        self.input: dict[str, Any] = dict(run.input)
        #: (status, reason) of the terminal or waiting transition, once committed.
        self.ended: tuple[str, str | None] | None = None
        #: Called once, at the first content chunk emitted (time to first chunk).
        self.on_first_chunk: Callable[[], None] | None = None

    def emit(self, payload: RunEventPayload) -> None:
        """Emit one live event of this run."""
        if isinstance(payload, ChunkEvent):
            self.emit_chunk(payload.chunk)
        else:
            self.sink.emit(payload)

    def emit_chunk(self, chunk: StepStreamChunk) -> None:
        """Emit a chunk event of this run (a step's stream: one per delta)."""
        first = self.on_first_chunk
        # start-step is the runtime's own marker, not content.
        if first is not None and chunk.type != "start-step":
            first()
            self.on_first_chunk = None
        self.sink.emit_chunk(chunk)

    @property
    def channel(self) -> RunChannel:
        """The run's live channel (its readers, for a publisher that must give way)."""
        return self.sink.channel

    def check_sink(self) -> None:
        """Re-raise a background flush's failure (e.g. a lost lease)."""
        if self.sink.failure is not None:
            raise self.sink.failure

    def run_update(self, **changes: Any) -> RunUpdate:
        """A fenced run update carrying the usage and step count so far.

        Hooks that failed open since the last transition are recorded too.
        """
        if self._report.dirty:
            changes.setdefault("hook_failures", self._report.to_json())
            self._report.dirty = False
        return RunUpdate(
            id=self.run_id,
            lease=self.lease,
            usage=self.usage.model_dump(mode="json", exclude_none=True),
            step_count=self.step_count,
            **changes,
        )

    async def commit_step(self, message: NewMessage) -> None:
        """Commit a non-terminal step: its message plus usage and step count."""
        await self.commit(
            WriteSet(
                scope=self.scope,
                thread_id=self.thread_id,
                append_messages=[message],
                update_runs=[self.run_update()],
            ),
            after=lambda result: [MessageEvent(message=message_from_record(result.messages[0]))],
            count=1,
            kinds=("messages_committed",),
        )

    async def finish(
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
            final.append(ChunkEvent(chunk=FinishChunk(total_usage=self.usage)))
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

        await self.commit(
            WriteSet(
                scope=self.scope,
                thread_id=self.thread_id,
                expected_message_count=expected_message_count,
                thread=ThreadPatch(active_run_id=PROMOTE_NEXT),
                append_messages=[message] if message else [],
                update_messages=list(update_messages),
                update_pending=[
                    PendingActionPatch(id=a, status="cancelled") for a in cancel_pending
                ],
                update_runs=[
                    self.run_update(
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
        self.ended = (status, reason)
        self._count_finished(status, reason)
        raise Stop

    def _count_finished(self, status: str, reason: str | None) -> None:
        metrics = self._services.metrics
        metrics.runs_finished.add(
            1, {"agent": self._agent, "status": status, "reason": bounded_reason(reason)}
        )
        if self._started_at is not None:
            # started_at is the database's clock at the first claim; hosts keep
            # clocks in step closely enough for a histogram of seconds.
            elapsed = (datetime.now(UTC) - self._started_at).total_seconds()
            metrics.run_duration.record(max(elapsed, 0.0), {"agent": self._agent})

    async def commit_outcomes(
        self, message_id: str, parts: list[MessagePart], outcomes: Sequence[ToolOutcome]
    ) -> list[MessagePart]:
        """Publish tool results and commit them into the step's message.

        With pending actions (client tools, suspends) the run waits, in the
        same write (then Stop is raised); otherwise the loop goes on.
        """
        final = merge_outcomes(parts, outcomes)
        for outcome in outcomes:
            for chunk in outcome.chunks:
                self.emit(ChunkEvent(chunk=chunk))
        pending = [o.pending for o in outcomes if o.pending is not None]
        suspends = dict(self.input.get("suspends") or {})
        for o in outcomes:
            if o.pending is not None and o.suspend is not None:
                suspends[o.pending.tool_call_id] = o.suspend
        self.input = {**self.input, "suspends": suspends}
        patch = MessagePatch(id=message_id, parts=parts_to_json(final))
        if not pending:
            await self.commit(
                WriteSet(
                    scope=self.scope,
                    thread_id=self.thread_id,
                    update_messages=[patch],
                    update_runs=[self.run_update(input=self.input)],
                )
            )
            return final
        await self.wait(patch, pending)
        return final

    async def wait(self, patch: MessagePatch, pending: list[NewPendingAction]) -> None:
        """The waiting transition: pending actions open, the lease is released; Stop."""
        now = datetime.now(UTC)
        await self.commit(
            WriteSet(
                scope=self.scope,
                thread_id=self.thread_id,
                thread=ThreadPatch(status="waiting"),
                update_messages=[patch],
                insert_pending=pending,
                update_runs=[
                    self.run_update(status="waiting", input=self.input, release_lease=True)
                ],
            ),
            after=lambda _result: [
                *(
                    PendingActionEvent(action=_pending_domain(p, self.thread_id, now))
                    for p in pending
                ),
                StatusEvent(status="waiting"),
            ],
            count=len(pending) + 1,
            kinds=("status",),
        )
        self.ended = ("waiting", None)
        raise Stop

    async def steered_since(self, anchor: int) -> tuple[bool, int]:
        """Whether a user message was committed at or after ``anchor``; and the count now."""
        thread = await self._services.store.get_thread(self.scope, self.thread_id)
        if thread is None:
            raise RunFailure("THREAD_GONE", "the thread was deleted")
        if thread.message_count <= anchor:
            return False, thread.message_count
        newer = await self._services.store.list_messages(
            self.scope,
            self.thread_id,
            view="all",
            order="desc",
            limit=max(1, thread.message_count - anchor),
        )
        steered = any(m.role == "user" and m.position >= anchor for m in newer.items)
        return steered, thread.message_count

    async def last_step_message(self) -> Message | None:
        """The latest assistant message this run committed (its last step), if any."""
        page = await self._services.store.list_messages(
            self.scope, self.thread_id, view="all", order="desc", limit=50
        )
        for record in page.items:
            if record.run_id == self.run_id and record.role == "assistant":
                return message_from_record(record)
        return None

    async def message_count(self) -> int:
        """The thread's current message count."""
        thread = await self._services.store.get_thread(self.scope, self.thread_id)
        if thread is None:
            raise RunFailure("THREAD_GONE", "the thread was deleted")
        return thread.message_count

    async def commit(
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
        built: list[EncodedRunEvent] = []
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
                # Only if a queued run became active: runners elsewhere would otherwise
                # wake up and look for work that is not there.
                ws.notify_if_promoted.append(services.signals.note_runnable())
            # Named before the commit so the same hint reaches watchers in other
            # processes (NOTIFY on commit) as the ones in this one.
            hint = None
            if kinds:
                visible = tuple(m.id for m in ws.append_messages if m.visible_transcript)
                hint = ThreadHint(self.thread_id, kinds, visible)
                ws.notify.append(services.signals.note_thread(hint))

            def events_after(result: CommitResult) -> list[NewEvent]:
                payloads = after(result) if after is not None else []
                if len(payloads) != len(seqs):
                    raise RuntimeError(f"expected {len(seqs)} events, built {len(payloads)}")
                now = datetime.now(UTC)
                encoded = [
                    # Unvalidated: ``after`` returns validated payloads (see EventSink.emit).
                    encode_event(self.run_id, RunEvent.model_construct(seq=q, time=now, payload=p))
                    for q, p in zip(seqs, payloads, strict=True)
                ]
                built[:] = [live for _, live in encoded]
                return [logged for logged, _ in encoded]

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


__all__ = ["RunCommitter", "RunFailure", "Stop", "lifecycle_draft"]
