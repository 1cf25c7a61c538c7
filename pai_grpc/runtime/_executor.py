"""One execution episode of a claimed run: the model/tool loop under a lease.

The loop follows the lifecycle phases of the seeds (see :mod:`._pipeline`).
Each completed assistant step commits its own message atomically with the
run transition (RT-05). A lost lease stops the episode and nothing more is
written; a cancellation is written by the lease holder itself, so a run's
event log always has a single writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from pai_grpc.domain import (
    AbortChunk,
    ChunkEvent,
    ErrorChunk,
    MessagePart,
    RunError,
    StatusEvent,
    ToolCallChunk,
    ToolPart,
    new_id,
)
from pai_grpc.errors import ModelError, PaiError
from pai_grpc.lifecycle import Complete, NextStep, StepInfo
from pai_grpc.lifecycle.internal import HookReport, current_hook_calls, current_report
from pai_grpc.runtime._agents import Agent
from pai_grpc.runtime._committer import RunCommitter, RunFailure, Stop
from pai_grpc.runtime._pipeline import HookPipeline, StepResult
from pai_grpc.runtime._queued import apply_queued_message, apply_queued_regenerate
from pai_grpc.runtime._records import parts_to_json
from pai_grpc.runtime._reducer import StreamProtocolError
from pai_grpc.runtime._services import Services
from pai_grpc.runtime._sink import EventSink
from pai_grpc.runtime._step_telemetry import (
    count_tool_calls,
    record_model_call,
    trace_model_call,
)
from pai_grpc.runtime._tool_phase import (
    WAITING_STATES,
    ToolOutcome,
    ToolPhase,
    ValidCall,
    cancelled_outcome,
    merge_outcomes,
    recovered,
    validate_calls,
)
from pai_grpc.telemetry import RunLabels, current_run, tracing
from pai_grpc.tools import InitialEntry
from storage import (
    ClaimedRun,
    LeaseLost,
    MessagePatch,
    NewMessage,
    PendingActionRecord,
    RunUpdate,
    Unavailable,
    VersionConflict,
    WriteSet,
)

log = logging.getLogger("pai_grpc.runtime")


class RunExecutor:
    """Executes one claimed run until it is terminal, waits, or loses its lease.

    It owns the episode loop and three collaborators: the run committer (every
    write, with the event sink), the hook pipeline (the lifecycle phases, the
    facade and the episode state) and, per step, the tool phase.
    """

    def __init__(
        self, services: Services, agent: Agent, claimed: ClaimedRun, *, lease_seconds: float
    ) -> None:
        run = claimed.run
        self._services = services
        self._store = services.store
        self._agent = agent
        self._run = run
        self._lease_seconds = lease_seconds
        self.run_id = run.id
        self._scope = run.scope
        self._thread_id = run.thread_id
        self.sink = EventSink(
            services=services,
            scope=run.scope,
            thread_id=run.thread_id,
            run_id=run.id,
            lease=claimed.lease,
            # Above every number an earlier (possibly lost) execution may have published.
            first_seq=claimed.first_seq,
            reserved_seq=run.reserved_seq,
        )
        self._report = HookReport.from_json(list(run.hook_failures))
        self._committer = RunCommitter(
            services=services,
            run=run,
            lease=claimed.lease,
            sink=self.sink,
            report=self._report,
            agent=agent.name,
        )
        self._metrics = services.metrics
        if run.attempts == 1 and run.execution_started_at is not None:
            self._committer.on_first_chunk = self._first_chunk(
                run.execution_started_at - run.created_at
            )
        self._pipeline = HookPipeline(
            services=services, agent=agent, run=run, committer=self._committer
        )
        self.lease_lost = False
        self._cancel_reason: str | None = None
        self._task: asyncio.Task[Any] | None = None

    def _first_chunk(self, queued: timedelta) -> Callable[[], None]:
        """Records the time to first chunk: the queue wait (database clock), then ours."""
        claimed = time.monotonic()

        def record() -> None:
            elapsed = queued.total_seconds() + time.monotonic() - claimed
            self._metrics.time_to_first_chunk.record(elapsed, {"agent": self._agent.name})

        return record

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the episode: the provider stream is aborted and the cancellation committed."""
        if self._cancel_reason is None:
            self._cancel_reason = reason
            if self._task is not None:
                self._task.cancel()

    # ---- driver ------------------------------------------------------------

    async def run(self) -> None:
        """Run the episode in its execution span; only shutdown cancellation propagates."""
        run = self._run
        with tracing.execution_span(
            self._services.telemetry,
            run_id=run.id,
            thread_id=run.thread_id,
            agent=self._agent.name,
            attempt=run.attempts,
            trace_context=run.trace_context,
            # A waiting run's resumption is a new attempt too, but nothing was lost.
            recovered=run.attempts > 1 and run.operation != "resume",
        ) as span:
            try:
                await self._execute()
            finally:
                ended = self._committer.ended
                status = ended[0] if ended else ("lease_lost" if self.lease_lost else "handed_back")
                tracing.run_ended(span, status, ended[1] if ended else None)

    async def _execute(self) -> None:
        self._task = asyncio.current_task()
        current_report.set(self._report)  # this task's context: remote hooks report here
        current_run.set(RunLabels(self.run_id, self._thread_id, self._agent.name, self._metrics))
        current_hook_calls.set(self._committer.emit)  # hook calls go on the run's timeline
        heartbeat = asyncio.create_task(self._heartbeat())
        try:
            await self._episode()
        except Stop:
            pass
        except LeaseLost:
            self._lost()
        except asyncio.CancelledError:
            if self.lease_lost:
                self._lost()
            elif self._cancel_reason is not None:
                if self._task is not None:
                    self._task.uncancel()
                self._close_episode(self._cancel_reason)
                await self._write_cancellation(self._cancel_reason)
            else:
                # Shutdown: hand the run back so another runner resumes it at once.
                self._close_episode("shutdown")
                try:
                    await asyncio.shield(self._store.release(self._committer.lease))
                except BaseException as e:
                    log.warning("run %s: could not release the lease: %r", self.run_id, e)
                raise
        except Unavailable as e:
            # The database went away during a COMMIT (an execution otherwise waits
            # outages out): whether it landed is unknown, so nothing is repeated.
            # Hand the run back; a fresh claim resumes it from what is durable.
            self._close_episode("database_unavailable")
            log.warning("run %s: handed back after a database outage (%s)", self.run_id, e)
            with contextlib.suppress(Exception):
                await self._store.release(self._committer.lease)
        except Exception as e:  # any other failure fails the run, with its reason
            if isinstance(e, PaiError) and not isinstance(e, ModelError | RunFailure):
                log.warning("run %s failed: %s", self.run_id, e)
            else:
                log.exception("run %s failed", self.run_id)
            self._close_episode("failed")
            await self._write_failure(_error_of(e))
        finally:
            # The facade closes with the episode: retained clients cannot write later.
            self._close_episode("stopped")
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            await self.sink.close()

    def _close_episode(self, reason: str) -> None:
        self._pipeline.close(reason)

    def _lost(self) -> None:
        self.lease_lost = True
        self._close_episode("lease_lost")
        log.warning("run %s: lease lost; this execution stops writing", self.run_id)

    async def _heartbeat(self) -> None:
        interval = self._lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                beat = await self._store.heartbeat(
                    self._committer.lease, lease_seconds=self._lease_seconds
                )
            except LeaseLost:
                self.lease_lost = True
                self._close_episode("lease_lost")
                if self._task is not None:
                    self._task.cancel()
                return
            except Exception:  # a transient database error: try again next beat
                log.warning("run %s: heartbeat failed", self.run_id, exc_info=True)
                continue
            self._committer.lease = beat.lease
            self._pipeline.renew(beat.lease)
            if beat.cancel_requested:
                self.cancel("cancelled")

    async def _write_cancellation(self, reason: str) -> bool:
        with contextlib.suppress(Exception):
            record = await self._store.get_run(self._scope, self.run_id)
            if record is not None and record.cancel_requested_at and record.reason:
                reason = record.reason  # the canceller's reason
        try:
            await self._committer.finish(
                status="cancelled",
                outcome="cancelled",
                reason=reason,
                message=None,
                before=[ChunkEvent(chunk=AbortChunk(reason=reason))],
            )
        except Stop:
            return True
        except LeaseLost:
            self._lost()
        except Exception:
            log.exception("run %s: could not record the cancellation", self.run_id)
        return False

    async def _write_failure(self, error: RunError) -> bool:
        try:
            self._committer.emit(
                ChunkEvent(chunk=ErrorChunk(reason=error.reason, message=error.message))
            )
            await self._committer.finish(
                status="failed", outcome="failed", reason=error.reason, message=None, error=error
            )
        except Stop:
            return True
        except LeaseLost:
            self._lost()
        except Exception:
            # The failure could not be recorded (e.g. the database is down): the lease
            # expires and another runner recovers the run.
            log.exception("run %s: could not record the failure", self.run_id)
        return False

    # ---- the episode ----------------------------------------------------------

    async def _episode(self) -> None:
        """The episode's table of contents: open, start, prepare, then step after step."""
        pipeline, committer = self._pipeline, self._committer
        await pipeline.open()
        await self._start()
        await pipeline.prepare_run()
        first_step = committer.step_count
        while True:
            if committer.step_count - first_step >= pipeline.episode.max_steps:
                await committer.finish(
                    status="completed", outcome="completed", reason="MAX_STEPS", message=None
                )
            step = StepInfo(step_id=new_id("stp"), index=committer.step_count)
            with tracing.step_span(step.index, step.step_id, expected=(Stop,)):
                anchor, context = await pipeline.resolve_model_context(step)
                request = await pipeline.prepare_model_step(step, context, anchor)
                with tracing.model_span(request.model.provider, request.model.model_id) as chat:
                    called = await pipeline.model_call(request)
                    # Transforms and after_step see the request the provider actually received.
                    result = await pipeline.stream_step(
                        called.stream, called.request, step, anchor=anchor
                    )
                    trace_model_call(chat, result)
                await self._after_step(result)

    def _tool_phase(self, message_id: str, advertised: Iterable[str], step: StepInfo) -> ToolPhase:
        """The tool phase of one step's calls, with the step's tool hooks."""
        return ToolPhase(
            run_id=self.run_id,
            thread_id=self._thread_id,
            tools=self._agent.tool_map(),
            advertised=set(advertised),
            message_id=message_id,
            hooks=self._pipeline.tool_hooks(step),
        )

    async def _start(self) -> None:
        """Apply the run's queued input (if any) and announce that it runs."""
        if self._run.attempts > 1:
            # A previous execution was lost: whatever it streamed after its last
            # committed step is void, and readers must drop it. This is the first
            # event of the attempt, numbered above everything the lost one may have
            # published (see ClaimedRun.first_seq), so a reader resuming from any
            # seq it saw gets this abort next.
            self._committer.emit(ChunkEvent(chunk=AbortChunk(reason="recovery")))
        self._committer.emit(StatusEvent(status="running"))
        queued = self._run.input.get("message")
        regenerate = self._run.input.get("regenerate")
        if isinstance(queued, dict):
            await apply_queued_message(self._committer, queued)
        elif isinstance(regenerate, dict) and not regenerate.get("applied"):
            await apply_queued_regenerate(
                self._committer,
                services=self._services,
                agent=self._agent,
                target_id=str(regenerate.get("target_message_id", "")),
                runtime_context=self._pipeline.runtime_context,
            )
        if self._run.operation == "resume" or self._run.attempts > 1:
            await self._settle_tools()

    # ---- after the stream: tools, after_step, the transition -----------------

    async def _after_step(self, result: StepResult) -> None:
        """Validate tool calls, run the tool phases and after_step, then commit the transition."""
        reducer = result.reducer
        if result.aborted is not None:
            await self._pipeline.abort_step(result)
        if reducer.error is not None:
            raise ModelError(
                reducer.error.message or reducer.error.reason, reason=reducer.error.reason
            )
        if reducer.aborted is not None:
            await self._committer.finish(
                status="failed",
                outcome="blocked",
                reason=reducer.aborted.reason or "ABORTED",
                message=None,
            )
        self._committer.usage = self._committer.usage + reducer.usage
        record_model_call(self._metrics, result)
        self._committer.step_count += 1
        parts = reducer.finalize()
        message_id = new_id("msg")
        advertised = self._pipeline.advertised
        if advertised is None:
            advertised = frozenset(t.name for t in result.request.tools)
        phase = self._tool_phase(message_id, advertised, result.step)
        valid, rejected = validate_calls(phase, reducer, parts)
        count_tool_calls(self._metrics, self._agent, rejected)
        for outcome in rejected:
            for chunk in outcome.chunks:
                self._committer.emit(ChunkEvent(chunk=chunk))
        parts = merge_outcomes(parts, rejected)
        message = NewMessage(
            id=message_id,
            role="assistant",
            parts=parts_to_json(parts),
            run_id=self.run_id,
            step_index=self._committer.step_count - 1,
        )
        runtime_calls = any(not c.provider_executed for c in reducer.tool_calls)
        outcomes: list[ToolOutcome] = []
        if valid:
            # The calls are durable before any tool runs, so a lost runner's
            # successor knows which ones may have had side effects (TH-03).
            await self._committer.commit_step(message)
            outcomes = await phase.run(valid)
            count_tool_calls(self._metrics, self._agent, outcomes)
        decision = await self._pipeline.after_step(result, message, merge_outcomes(parts, outcomes))
        if isinstance(decision, Complete):
            await self._complete_step(
                message, parts, outcomes, committed=bool(valid), decision=decision
            )
        if any(o.pending is not None for o in outcomes):
            # Waiting takes precedence over next-step requests; the overlay is dropped.
            self._pipeline.episode.overlay = []
            await self._committer.commit_outcomes(message_id, parts, outcomes)
        if valid:
            await self._committer.commit_outcomes(message_id, parts, outcomes)
            self._pipeline.apply_overlay(decision)
            return  # a step with runtime tool calls continues with another step
        if runtime_calls or isinstance(decision, NextStep):
            await self._committer.commit_step(message)
            self._pipeline.apply_overlay(decision)
            return
        # No tool calls: the run completes, unless a user steered it meanwhile
        # (steering takes precedence over completion and next-step requests).
        anchor = result.anchor
        while True:
            try:
                await self._committer.finish(
                    status="completed",
                    outcome="completed",
                    reason=None,
                    message=message,
                    expected_message_count=anchor,
                )
            except VersionConflict:
                steered, anchor = await self._committer.steered_since(result.anchor)
                if steered:
                    await self._committer.commit_step(message)
                    self._pipeline.episode.overlay = []
                    return

    async def _complete_step(
        self,
        message: NewMessage,
        parts: list[MessagePart],
        outcomes: list[ToolOutcome],
        *,
        committed: bool,
        decision: Complete,
    ) -> None:
        """after_step complete: finish now, cancelling the step's waiting tool parts (AS-03)."""
        final_outcomes = [
            cancelled_outcome(_original(parts, o.part)) if o.pending is not None else o
            for o in outcomes
        ]
        for outcome in final_outcomes:
            for chunk in outcome.chunks:
                self._committer.emit(ChunkEvent(chunk=chunk))
        final = merge_outcomes(parts, final_outcomes)
        if committed:
            await self._committer.finish(
                status="completed",
                outcome="completed",
                reason=decision.reason,
                message=None,
                update_messages=[MessagePatch(id=message.id, parts=parts_to_json(final))],
            )
        await self._committer.finish(
            status="completed",
            outcome="completed",
            reason=decision.reason,
            message=replace(message, parts=parts_to_json(final)),
        )

    async def _settle_tools(self) -> None:
        """On resume or recovery: finish the tool parts the last step left waiting.

        A resolved pending action resumes its tool (or delivers the client's
        result); a call that was executing when the previous runner was lost
        gets a recovery error, since it may or may not have run (TH-03).
        """
        message = await self._committer.last_step_message()
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
                and not _fulfilled(action)
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
            await self._committer.commit(
                WriteSet(
                    scope=self._scope,
                    thread_id=self._thread_id,
                    update_messages=[MessagePatch(id=message.id, parts=parts_to_json(marked))],
                    update_runs=[RunUpdate(id=self.run_id, lease=self._committer.lease)],
                )
            )
        step = StepInfo(step_id=new_id("stp"), index=message.step_index or 0)
        phase = self._tool_phase(message.id, set(tools), step)
        suspends = dict(self._committer.input.get("suspends") or {})
        outcomes: list[ToolOutcome] = []
        for part, action in plan:
            tool = tools.get(part.tool_name)
            if action is not None and action.status == "resolved":
                if part.state == "approval-responded":
                    # It was executing when the previous runner was lost.
                    outcomes.append(await phase.conclude(recovered(part), tool, InitialEntry(), []))
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
            elif tool is not None and tool.is_client:
                # Nothing ran yet for a client tool: open its pending action again.
                call = ToolCallChunk(
                    tool_call_id=part.tool_call_id, tool_name=part.tool_name, input=part.input
                )
                checked = phase.validate(call, part)
                if isinstance(checked, ValidCall):
                    outcomes.append(await phase.initial(checked))
                else:
                    outcomes.append(checked)
            else:
                outcomes.append(await phase.conclude(recovered(part), tool, InitialEntry(), []))
        self._committer.input = {**self._committer.input, "suspends": suspends}
        count_tool_calls(self._metrics, self._agent, outcomes)
        await self._committer.commit_outcomes(message.id, parts, outcomes)


def _fulfilled(action: PendingActionRecord) -> bool:
    """Whether an operator answered the action with a result (no execution follows)."""
    resolution = action.resolution if isinstance(action.resolution, dict) else {}
    return "output" in resolution or "error_text" in resolution


def _original(parts: list[MessagePart], part: ToolPart) -> ToolPart:
    for p in parts:
        if isinstance(p, ToolPart) and p.tool_call_id == part.tool_call_id:
            return p
    return part


def _error_of(e: BaseException) -> RunError:
    if isinstance(e, PaiError):
        return RunError(reason=e.reason, message=e.message)
    if isinstance(e, RunFailure):
        return RunError(reason=e.reason, message=str(e))
    if isinstance(e, StreamProtocolError):
        return RunError(reason="STREAM_PROTOCOL_ERROR", message=str(e))
    return RunError(reason="INTERNAL", message=f"{type(e).__name__}: {e}")


__all__ = ["RunExecutor"]
