"""One execution episode of a claimed run: the model/tool loop under a lease.

The loop is laid out along the lifecycle phases of the seeds (prepare run,
resolve model context, prepare model step, model call, transform step
stream, tool phases, after step); each phase is its own method so hooks slot
in without reshaping the loop. Each completed assistant step commits its own
message atomically with the run transition (RT-05). A lost lease stops the
episode and nothing more is written; a cancellation is written by the lease
holder itself, so a run's event log always has a single writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from pai_grpc.domain import (
    AbortChunk,
    ChunkEvent,
    ErrorChunk,
    FinishChunk,
    Message,
    MessageEvent,
    MessagePart,
    ModelMessage,
    PendingAction,
    PendingActionEvent,
    RunError,
    RunEvent,
    RunEventPayload,
    StartStepChunk,
    StatusEvent,
    StepStreamChunk,
    SystemModelMessage,
    ToolCallChunk,
    ToolPart,
    Usage,
    new_id,
)
from pai_grpc.errors import ModelError
from pai_grpc.models import ModelCall, prune_reasoning
from pai_grpc.runtime._agents import Agent
from pai_grpc.runtime._records import message_from_record, parts_to_json, payload_to_json
from pai_grpc.runtime._reducer import StepReducer, StreamProtocolError
from pai_grpc.runtime._services import Services
from pai_grpc.runtime._sink import EventSink
from pai_grpc.runtime._tool_phase import WAITING_STATES, ToolOutcome, ToolPhase, recovered
from pai_grpc.streams import ThreadHint
from storage import (
    NOW,
    PROMOTE_NEXT,
    ClaimedRun,
    CommitResult,
    LeaseLost,
    MessagePatch,
    NewEvent,
    NewMessage,
    NewPendingAction,
    PendingActionRecord,
    RunPatch,
    ThreadPatch,
    VersionConflict,
    WriteSet,
)
from storage import NotFound as StorageNotFound

log = logging.getLogger("pai_grpc.runtime")


class _Stop(Exception):
    """Internal: the episode ended (its terminal transition is committed)."""


class _Steered(Exception):
    """Internal: a user message arrived while the step ran; take it in next."""


@dataclass
class StepOutcome:
    """What one model step produced."""

    reducer: StepReducer
    request: ModelCall
    #: Messages in the thread when the step started (its physical anchor).
    anchor_count: int
    usage: Usage = field(default_factory=Usage)


class Execution:
    """Executes one claimed run until it is terminal, waits, or loses its lease."""

    def __init__(
        self, services: Services, agent: Agent, claimed: ClaimedRun, *, lease_seconds: float
    ) -> None:
        self._services = services
        self._store = services.store
        self._agent = agent
        self._run = claimed.run
        self._lease = claimed.lease
        self._lease_seconds = lease_seconds
        self._scope = claimed.run.scope
        self._thread_id = claimed.run.thread_id
        self._usage = Usage.model_validate(claimed.run.usage)
        self._step_count = claimed.run.step_count
        #: The run's input (with suspend bookkeeping while tools wait).
        self._input: dict[str, Any] = dict(claimed.run.input)
        self.sink = EventSink(
            services=services,
            scope=self._scope,
            thread_id=self._thread_id,
            run_id=self._run.id,
            lease=self._lease,
            last_seq=claimed.run.last_seq,
        )
        self.lease_lost = False
        self._cancel_reason: str | None = None
        self._task: asyncio.Task[Any] | None = None

    @property
    def run_id(self) -> str:
        """The run being executed."""
        return self._run.id

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the episode: the provider stream is aborted and the cancellation committed."""
        if self._cancel_reason is None:
            self._cancel_reason = reason
            if self._task is not None:
                self._task.cancel()

    # ---- driver ------------------------------------------------------------

    async def run(self) -> None:
        """Run the episode; only shutdown cancellation propagates."""
        self._task = asyncio.current_task()
        heartbeat = asyncio.create_task(self._heartbeat())
        aborted = False
        try:
            await self._episode()
        except _Stop:
            pass
        except LeaseLost:
            aborted = True
            self._lost()
        except asyncio.CancelledError:
            if self.lease_lost:
                aborted = True
                self._lost()
            elif self._cancel_reason is not None:
                if self._task is not None:
                    self._task.uncancel()
                aborted = not await self._write_cancellation(self._cancel_reason)
            else:
                # Shutdown: hand the run back so another runner resumes it at once.
                aborted = True
                try:
                    await asyncio.shield(self._store.release(self._lease))
                except BaseException as e:
                    log.warning("run %s: could not release the lease: %r", self.run_id, e)
                raise
        except Exception as e:  # any other failure fails the run, with its reason
            log.exception("run %s failed", self.run_id)
            aborted = not await self._write_failure(_error_of(e))
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            await self.sink.close(aborted=aborted)

    def _lost(self) -> None:
        self.lease_lost = True
        log.warning("run %s: lease lost; this execution stops writing", self.run_id)

    async def _heartbeat(self) -> None:
        interval = self._lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                beat = await self._store.heartbeat(self._lease, lease_seconds=self._lease_seconds)
            except LeaseLost:
                self.lease_lost = True
                if self._task is not None:
                    self._task.cancel()
                return
            except Exception:  # a transient database error: try again next beat
                log.warning("run %s: heartbeat failed", self.run_id, exc_info=True)
                continue
            self._lease = beat.lease
            if beat.cancel_requested:
                self.cancel("cancelled")

    async def _write_cancellation(self, reason: str) -> bool:
        with contextlib.suppress(Exception):
            record = await self._store.get_run(self._scope, self.run_id)
            if record is not None and record.cancel_requested_at and record.reason:
                reason = record.reason  # the canceller's reason
        try:
            await self._finish(
                status="cancelled",
                outcome="cancelled",
                reason=reason,
                message=None,
                before=[ChunkEvent(chunk=AbortChunk(reason=reason))],
            )
        except _Stop:
            return True
        except LeaseLost:
            self._lost()
        except Exception:
            log.exception("run %s: could not record the cancellation", self.run_id)
        return False

    async def _write_failure(self, error: RunError) -> bool:
        try:
            self.emit(ChunkEvent(chunk=ErrorChunk(reason=error.reason, message=error.message)))
            await self._finish(
                status="failed", outcome="failed", reason=error.reason, message=None, error=error
            )
        except _Stop:
            return True
        except LeaseLost:
            self._lost()
        except Exception:
            # The failure could not be recorded (e.g. the database is down): the lease
            # expires and another runner recovers the run.
            log.exception("run %s: could not record the failure", self.run_id)
        return False

    # ---- the episode, phase by phase --------------------------------------

    async def _episode(self) -> None:
        await self._start()
        await self._prepare_run()
        first_step = self._step_count
        while True:
            if self._step_count - first_step >= self._agent.max_steps:
                await self._finish(
                    status="completed", outcome="completed", reason="MAX_STEPS", message=None
                )
            anchor, context = await self._resolve_model_context()
            call = await self._prepare_model_step(context)
            outcome = await self._model_step(call, anchor)
            await self._after_step(outcome)

    async def _start(self) -> None:
        """Apply the run's queued input (if any) and announce that it runs."""
        if self._run.attempts > 1:
            # A previous execution was lost: whatever it streamed after its last
            # committed step is void, and readers must drop it.
            self.emit(ChunkEvent(chunk=AbortChunk(reason="recovery")))
        self.emit(StatusEvent(status="running"))
        queued = self._run.input.get("message")
        regenerate = self._run.input.get("regenerate")
        if isinstance(queued, dict):
            await self._apply_queued_message(queued)
        elif isinstance(regenerate, dict) and not regenerate.get("applied"):
            await self._apply_queued_regenerate(str(regenerate.get("target_message_id", "")))
        if self._run.operation == "resume" or self._run.attempts > 1:
            await self._settle_tools()

    async def _apply_queued_message(self, queued: dict[str, Any]) -> None:
        parts, metadata = queued.get("parts"), queued.get("metadata")
        message = NewMessage(
            id=str(queued["id"]),
            role="user",
            parts=parts if isinstance(parts, list) else [],
            metadata=metadata if isinstance(metadata, dict) else {},
            run_id=self.run_id,
        )
        await self._commit(
            WriteSet(
                scope=self._scope,
                thread_id=self._thread_id,
                append_messages=[message],
                update_runs=[
                    RunPatch(id=self.run_id, lease=self._lease, input={"message_id": message.id})
                ],
            ),
            after=lambda result: [MessageEvent(message=message_from_record(result.messages[0]))],
            count=1,
            kinds=("messages_committed",),
        )

    async def _apply_queued_regenerate(self, target_id: str) -> None:
        target = await self._store.get_messages(self._scope, self._thread_id, [target_id])
        if not target or target[0].role != "assistant":
            raise _RunFailure("REGENERATE_TARGET_GONE", f"message {target_id!r} is no longer there")
        await self._commit(
            WriteSet(
                scope=self._scope,
                thread_id=self._thread_id,
                truncate_from_message_id=target_id,
                update_runs=[
                    RunPatch(
                        id=self.run_id,
                        lease=self._lease,
                        input={"regenerate": {"target_message_id": target_id, "applied": True}},
                    )
                ],
            ),
            kinds=("messages_removed",),
        )

    async def _prepare_run(self) -> None:
        """prepare_run: episode defaults (hooks arrive with the lifecycle)."""

    async def _resolve_model_context(self) -> tuple[int, list[ModelMessage]]:
        """resolve_model_context: the default leaf, every context-visible message in order.

        Returns the step's physical anchor (the number of messages when the
        step starts) with the context, read from one snapshot, so messages
        appended while the step runs never leak into it.
        """
        try:
            context = await self._services.contexts.read(self._scope, self._thread_id)
        except StorageNotFound as e:
            raise _RunFailure("THREAD_GONE", "the thread was deleted") from e
        return context.count, context.model_messages

    async def _prepare_model_step(self, context: list[ModelMessage]) -> ModelCall:
        """prepare_model_step: the effective request of this step."""
        instructions = (
            [SystemModelMessage(content=self._agent.instructions)]
            if self._agent.instructions
            else []
        )
        return ModelCall(
            messages=context,
            instructions=instructions,
            tools=[t.manifest() for t in self._agent.tools],
            settings=self._agent.model_settings,
            provider_options=self._agent.provider_options,
        )

    async def _model_step(self, call: ModelCall, anchor: int) -> StepOutcome:
        """around_model_call + transform_step_stream: stream one step and reduce it."""
        reducer = StepReducer()
        start = StartStepChunk()
        reducer.apply(start)
        self.emit(ChunkEvent(chunk=start))
        # Pruned for the provider attempt only; hooks and history keep the full context.
        attempt = replace(call, messages=prune_reasoning(call.messages))
        stream = await self._agent.model.stream(attempt)
        try:
            async for chunk in self._transform_step_stream(stream):
                self._check_sink()
                reducer.apply(chunk)
                self.emit(ChunkEvent(chunk=chunk))
                if chunk.type in ("error", "abort"):
                    break
        finally:
            # Abort the provider stream if we stopped early (cancel, lease loss, error).
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
        return StepOutcome(reducer=reducer, request=call, anchor_count=anchor, usage=reducer.usage)

    async def _transform_step_stream(
        self, stream: AsyncIterator[StepStreamChunk]
    ) -> AsyncIterator[StepStreamChunk]:
        """transform_step_stream: the canonical output policy (identity for now)."""
        async for chunk in stream:
            yield chunk

    async def _after_step(self, outcome: StepOutcome) -> None:
        """Tool phases + after_step, then commit the step with its transition."""
        reducer = outcome.reducer
        if reducer.error is not None:
            raise ModelError(
                reducer.error.message or reducer.error.reason, reason=reducer.error.reason
            )
        if reducer.aborted is not None:
            await self._finish(
                status="failed",
                outcome="blocked",
                reason=reducer.aborted.reason or "ABORTED",
                message=None,
            )
        self._usage = self._usage + outcome.usage
        self._step_count += 1
        parts = reducer.finalize()
        message = NewMessage(
            id=new_id("msg"),
            role="assistant",
            parts=parts_to_json(parts),
            run_id=self.run_id,
            step_index=self._step_count - 1,
        )
        calls = [c for c in reducer.tool_calls if not c.provider_executed and not c.invalid]
        if calls:
            # The calls are durable before any tool runs, so a lost runner's
            # successor knows which ones may have had side effects (TH-03).
            await self._commit_step(message)
            phase = self._phase(message.id, {t.name for t in outcome.request.tools})
            by_id = {p.tool_call_id: p for p in parts if isinstance(p, ToolPart)}
            outcomes = await phase.run([(c, by_id[c.tool_call_id]) for c in calls])
            await self._apply_outcomes(message.id, parts, outcomes)
            return  # a step with runtime tool calls continues with another step
        # No tool calls: the run completes, unless a user steered it meanwhile
        # (steering takes precedence over completion and next-step requests).
        anchor = outcome.anchor_count
        while True:
            try:
                await self._finish(
                    status="completed",
                    outcome="completed",
                    reason=None,
                    message=message,
                    expected_message_count=anchor,
                )
            except VersionConflict:
                steered, anchor = await self._steered_since(outcome.anchor_count)
                if steered:
                    await self._commit_step(message)
                    return

    def _phase(self, message_id: str, advertised: set[str]) -> ToolPhase:
        return ToolPhase(
            run_id=self.run_id,
            thread_id=self._thread_id,
            tools=self._agent.tool_map(),
            advertised=advertised,
            message_id=message_id,
        )

    async def _apply_outcomes(
        self, message_id: str, parts: list[MessagePart], outcomes: list[ToolOutcome]
    ) -> None:
        """Publish tool results and commit them into the step's message.

        With pending actions (client tools, suspends) the run waits, in the
        same write; otherwise the loop goes on to the next step.
        """
        replaced = {o.part.tool_call_id: o.part for o in outcomes}
        for outcome in outcomes:
            for chunk in outcome.chunks:
                self.emit(ChunkEvent(chunk=chunk))
        final = [replaced.get(p.tool_call_id, p) if isinstance(p, ToolPart) else p for p in parts]
        parts[:] = final
        pending = [o.pending for o in outcomes if o.pending is not None]
        suspends = dict(self._input.get("suspends") or {})
        for o in outcomes:
            if o.pending is not None and o.suspend is not None:
                suspends[o.pending.tool_call_id] = o.suspend
        self._input = {**self._input, "suspends": suspends}
        if not pending:
            await self._commit(
                WriteSet(
                    scope=self._scope,
                    thread_id=self._thread_id,
                    update_messages=[MessagePatch(id=message_id, parts=parts_to_json(final))],
                    update_runs=[RunPatch(id=self.run_id, lease=self._lease, input=self._input)],
                )
            )
            return
        now = datetime.now(UTC)
        await self._commit(
            WriteSet(
                scope=self._scope,
                thread_id=self._thread_id,
                thread=ThreadPatch(status="waiting"),
                update_messages=[MessagePatch(id=message_id, parts=parts_to_json(final))],
                insert_pending=pending,
                update_runs=[
                    RunPatch(
                        id=self.run_id,
                        lease=self._lease,
                        status="waiting",
                        input=self._input,
                        usage=self._usage.model_dump(mode="json", exclude_none=True),
                        step_count=self._step_count,
                        release_lease=True,
                    )
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
        raise _Stop

    async def _settle_tools(self) -> None:
        """On resume or recovery: finish the tool parts the last step left waiting.

        A resolved pending action resumes its tool (or delivers the client's
        result); a call that was executing when the previous runner was lost
        gets a recovery error, since it may or may not have run (TH-03).
        """
        message = await self._last_step_message()
        if message is None:
            return
        parts = list(message.parts)
        waiting = [
            p
            for p in parts
            if isinstance(p, ToolPart) and not p.provider_executed and p.state in WAITING_STATES
        ]
        if not waiting:
            return
        actions = {
            a.tool_call_id: a
            for a in await self._store.list_pending_actions(self._scope, self.run_id)
        }
        tools = self._agent.tool_map()
        plan: list[tuple[ToolPart, PendingActionRecord | None]] = []
        executing: dict[str, ToolPart] = {}
        for part in waiting:
            action = actions.get(part.tool_call_id)
            if action is not None and action.status == "open":
                continue  # still waiting for its human
            if (
                action is not None
                and action.status == "resolved"
                and action.kind != "client_tool"
                and part.state != "approval-responded"
            ):
                executing[part.tool_call_id] = part.model_copy(
                    update={"state": "approval-responded"}
                )
            plan.append((part, action))
        if not plan:
            return
        if executing:
            # Resumed executions are marked durable first, like a step's first
            # execution: if this runner is lost, the next one must not redo them.
            marked = [
                executing.get(p.tool_call_id, p) if isinstance(p, ToolPart) else p for p in parts
            ]
            await self._commit(
                WriteSet(
                    scope=self._scope,
                    thread_id=self._thread_id,
                    update_messages=[MessagePatch(id=message.id, parts=parts_to_json(marked))],
                    update_runs=[RunPatch(id=self.run_id, lease=self._lease)],
                )
            )
        phase = self._phase(message.id, set(tools))
        suspends = dict(self._input.get("suspends") or {})
        outcomes: list[ToolOutcome] = []
        for part, action in plan:
            if action is not None and action.status == "resolved":
                if part.state == "approval-responded":
                    outcomes.append(recovered(part))  # it was executing when lost
                    continue
                resolution = action.resolution if isinstance(action.resolution, dict) else {}
                outcomes.append(
                    await phase.resume(
                        part,
                        kind=action.kind,
                        action_id=action.id,
                        resolution=resolution,
                        suspend=suspends.pop(part.tool_call_id, None),
                    )
                )
            elif (tool := tools.get(part.tool_name)) is not None and tool.is_client:
                # Nothing ran yet for a client tool: open its pending action again.
                call = ToolCallChunk(
                    tool_call_id=part.tool_call_id, tool_name=part.tool_name, input=part.input
                )
                outcomes.append(await phase.initial(call, part))
            else:
                outcomes.append(recovered(part))
        self._input = {**self._input, "suspends": suspends}
        await self._apply_outcomes(message.id, parts, outcomes)

    async def _last_step_message(self) -> Message | None:
        page = await self._store.list_messages(
            self._scope, self._thread_id, view="all", order="desc", limit=50
        )
        for record in page.items:
            if record.run_id == self.run_id and record.role == "assistant":
                return message_from_record(record)
        return None

    async def _steered_since(self, anchor: int) -> tuple[bool, int]:
        """Whether a user message was committed at or after ``anchor``; and the count now."""
        thread = await self._store.get_thread(self._scope, self._thread_id)
        if thread is None:
            raise _RunFailure("THREAD_GONE", "the thread was deleted")
        newer = await self._store.list_messages(
            self._scope,
            self._thread_id,
            view="all",
            order="desc",
            limit=max(1, thread.message_count - anchor),
        )
        steered = any(m.role == "user" and m.position >= anchor for m in newer.items)
        return steered, thread.message_count

    # ---- transitions -------------------------------------------------------

    async def _commit_step(self, message: NewMessage) -> None:
        """Commit a non-terminal step: its message plus usage and step count."""
        await self._commit(
            WriteSet(
                scope=self._scope,
                thread_id=self._thread_id,
                append_messages=[message],
                update_runs=[
                    RunPatch(
                        id=self.run_id,
                        lease=self._lease,
                        usage=self._usage.model_dump(mode="json", exclude_none=True),
                        step_count=self._step_count,
                    )
                ],
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
    ) -> None:
        """Commit the terminal transition (with the last step's message, if any); raise _Stop."""
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
                update_runs=[
                    RunPatch(
                        id=self.run_id,
                        lease=self._lease,
                        status=status,
                        outcome=outcome,
                        reason=reason,
                        error=error.model_dump(mode="json") if error else None,
                        usage=self._usage.model_dump(mode="json", exclude_none=True),
                        step_count=self._step_count,
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
        raise _Stop

    # ---- plumbing ----------------------------------------------------------

    def emit(self, payload: RunEventPayload) -> RunEvent:
        """Emit one live event of this run."""
        return self.sink.emit(payload)

    def _check_sink(self) -> None:
        if self.sink.failure is not None:
            raise self.sink.failure

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
            if last is not None:
                ws.update_runs = [
                    replace(p, last_seq=last) if p.id == self.run_id and p.lease else p
                    for p in ws.update_runs
                ]
            ws.notify.append(services.signals.note_run(self.run_id))
            if runnable:
                ws.notify.append(services.signals.note_runnable())

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
                result = await self._store.commit(ws, events_after=events_after)
            except BaseException:
                self.sink.restore(pending, seqs)
                raise
        if last is not None:
            self.sink.mark_durable(last)
        self.sink.published(built)
        hint = None
        if kinds:
            visible = tuple(m.id for m in result.messages if m.visible_transcript)
            hint = ThreadHint(self._thread_id, kinds, visible)
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


class _RunFailure(Exception):
    """Internal: fail the run with a specific reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _error_of(e: BaseException) -> RunError:
    if isinstance(e, ModelError):
        return RunError(reason=e.reason, message=e.message)
    if isinstance(e, _RunFailure):
        return RunError(reason=e.reason, message=str(e))
    if isinstance(e, StreamProtocolError):
        return RunError(reason="STREAM_PROTOCOL_ERROR", message=str(e))
    return RunError(reason="INTERNAL", message=f"{type(e).__name__}: {e}")


__all__ = ["Execution"]
