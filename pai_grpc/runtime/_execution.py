"""One execution episode of a claimed run: the model/tool loop under a lease.

The loop follows the lifecycle phases of the seeds (see :mod:`._phases`).
Each completed assistant step commits its own message atomically with the
run transition (RT-05). A lost lease stops the episode and nothing more is
written; a cancellation is written by the lease holder itself, so a run's
event log always has a single writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import Any

from pai_grpc.domain import (
    AbortChunk,
    ChunkEvent,
    ErrorChunk,
    MessageEvent,
    MessagePart,
    RunError,
    StatusEvent,
    ToolCallChunk,
    ToolPart,
    Usage,
    new_id,
)
from pai_grpc.errors import ModelError, PaiError
from pai_grpc.lifecycle import (
    AbortSignal,
    Complete,
    NextStep,
    RegenerateRewrite,
    StepInfo,
    compose_lifecycle,
)
from pai_grpc.lifecycle._report import HookReport, current_report
from pai_grpc.runtime._agents import Agent
from pai_grpc.runtime._phases import Phases, StepResult, cancelled_outcome, validate_calls
from pai_grpc.runtime._records import message_from_record, parts_to_json
from pai_grpc.runtime._reducer import StreamProtocolError
from pai_grpc.runtime._services import Services
from pai_grpc.runtime._sink import EventSink
from pai_grpc.runtime._tool_phase import (
    WAITING_STATES,
    ToolOutcome,
    ValidCall,
    recovered,
)
from pai_grpc.runtime._transitions import RunFailure, Stop
from pai_grpc.tools import InitialEntry
from storage import (
    ClaimedRun,
    LeaseLost,
    MessagePatch,
    NewMessage,
    PendingActionRecord,
    RunPatch,
    Unavailable,
    VersionConflict,
    WriteSet,
)

log = logging.getLogger("pai_grpc.runtime")


class Execution(Phases):
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
            # Above every number an earlier (possibly lost) execution may have published.
            first_seq=claimed.first_seq,
            reserved_seq=claimed.run.reserved_seq,
        )
        self.lease_lost = False
        self._cancel_reason: str | None = None
        self._task: asyncio.Task[Any] | None = None
        # Lifecycle: composed once; with no hooks none of the hook machinery runs.
        self._hooks = compose_lifecycle(agent.lifecycle) if agent.lifecycle is not None else None
        self._has = self._hooks.phases() if self._hooks is not None else frozenset()
        self._facade = None
        self._thread_view = self._resolver_view = None
        self._run_view = None
        self._runtime_context = None
        self._signal = AbortSignal()
        self._report = HookReport.from_json(list(claimed.run.hook_failures))
        self._provider_streams = []
        self._advertised = None

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
        current_report.set(self._report)  # this task's context: remote hooks report here
        heartbeat = asyncio.create_task(self._heartbeat())
        aborted = False
        try:
            await self._episode()
        except Stop:
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
                self._close_episode(self._cancel_reason)
                aborted = not await self._write_cancellation(self._cancel_reason)
            else:
                # Shutdown: hand the run back so another runner resumes it at once.
                aborted = True
                self._close_episode("shutdown")
                try:
                    await asyncio.shield(self._store.release(self._lease))
                except BaseException as e:
                    log.warning("run %s: could not release the lease: %r", self.run_id, e)
                raise
        except Unavailable as e:
            # The database went away during a COMMIT (an execution otherwise waits
            # outages out): whether it landed is unknown, so nothing is repeated.
            # Hand the run back; a fresh claim resumes it from what is durable.
            aborted = True
            self._close_episode("database_unavailable")
            log.warning("run %s: handed back after a database outage (%s)", self.run_id, e)
            with contextlib.suppress(Exception):
                await self._store.release(self._lease)
        except Exception as e:  # any other failure fails the run, with its reason
            if isinstance(e, PaiError) and not isinstance(e, ModelError | RunFailure):
                log.warning("run %s failed: %s", self.run_id, e)
            else:
                log.exception("run %s failed", self.run_id)
            self._close_episode("failed")
            aborted = not await self._write_failure(_error_of(e))
        finally:
            # The facade closes with the episode: retained clients cannot write later.
            self._close_episode("stopped")
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            await self.sink.close(aborted=aborted)

    def _close_episode(self, reason: str) -> None:
        if self._facade is not None:
            self._facade.alive = False
        self._signal.abort(reason)

    def _lost(self) -> None:
        self.lease_lost = True
        self._close_episode("lease_lost")
        log.warning("run %s: lease lost; this execution stops writing", self.run_id)

    async def _heartbeat(self) -> None:
        interval = self._lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                beat = await self._store.heartbeat(self._lease, lease_seconds=self._lease_seconds)
            except LeaseLost:
                self.lease_lost = True
                self._close_episode("lease_lost")
                if self._task is not None:
                    self._task.cancel()
                return
            except Exception:  # a transient database error: try again next beat
                log.warning("run %s: heartbeat failed", self.run_id, exc_info=True)
                continue
            self._lease = beat.lease
            if self._facade is not None:
                self._facade.lease = beat.lease
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
        except Stop:
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
        await self._open()
        await self._start()
        await self._prepare_run()
        first_step = self._step_count
        while True:
            if self._step_count - first_step >= self._episode_state.max_steps:
                await self._finish(
                    status="completed", outcome="completed", reason="MAX_STEPS", message=None
                )
            step = StepInfo(step_id=new_id("stp"), index=self._step_count)
            anchor, context = await self._resolve_model_context(step)
            request = await self._prepare_model_step(step, context, anchor)
            called = await self._model_call(request)
            # Transforms and after_step see the request the provider actually received.
            result = await self._stream_step(called.stream, called.request, step, anchor=anchor)
            await self._after_step(result)

    async def _open(self) -> None:
        """Build the runtime context and the facade (only for agents with hooks)."""
        if self._hooks is None:
            return
        self._runtime_context = await self._agent.build_runtime_context()
        self._open_facade()

    async def _start(self) -> None:
        """Apply the run's queued input (if any) and announce that it runs."""
        if self._run.attempts > 1:
            # A previous execution was lost: whatever it streamed after its last
            # committed step is void, and readers must drop it. This is the first
            # event of the attempt, numbered above everything the lost one may have
            # published (see ClaimedRun.first_seq), so a reader resuming from any
            # seq it saw gets this abort next.
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
        self._input = {**self._input, "message_id": message.id}
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
        """A queued regeneration, applied now: the same history-rewrite hooks as Regenerate."""
        store = self._store
        for _ in range(20):
            target = await store.get_messages(self._scope, self._thread_id, [target_id])
            thread = await store.get_thread(self._scope, self._thread_id)
            if not target or target[0].role != "assistant" or thread is None:
                raise RunFailure(
                    "REGENERATE_TARGET_GONE", f"message {target_id!r} is no longer there"
                )
            history = self._services.history
            rewrite, patch = await history.regeneration(
                store, self._agent, thread, target[0], self._runtime_context
            )
            applied: dict[str, Any] = {
                "target_message_id": target_id,
                "applied": True,
                "removed": list(rewrite.removed_message_ids),
                "retained": list(rewrite.retained_message_ids),
            }
            try:
                result = await self._commit(
                    WriteSet(
                        scope=self._scope,
                        thread_id=self._thread_id,
                        expected_version=thread.version,
                        thread=patch,
                        truncate_from_message_id=target_id,
                        update_runs=[
                            RunPatch(
                                id=self.run_id,
                                lease=self._lease,
                                input={"regenerate": applied},
                            )
                        ],
                    ),
                    kinds=("messages_removed",),
                )
            except VersionConflict:
                continue  # decided on stale state: prepare again (HR-03)
            after = result.thread.version if result.thread else thread.version + 1
            history.announce(
                self._agent.lifecycle,
                thread_id=self._thread_id,
                rewrite=_with_after(rewrite, after),
                runtime_context=self._runtime_context,
            )
            return
        raise RunFailure("THREAD_CONTENDED", "the thread kept changing during regeneration")

    # ---- after the stream: tools, after_step, the transition -----------------

    async def _after_step(self, result: StepResult) -> None:
        """Validate tool calls, run the tool phases and after_step, then commit the transition."""
        reducer = result.reducer
        if result.aborted is not None:
            await self._abort_step(result)
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
        self._usage = self._usage + reducer.usage
        self._step_count += 1
        parts = reducer.finalize()
        message_id = new_id("msg")
        advertised = self._advertised
        if advertised is None:
            advertised = frozenset(t.name for t in result.request.tools)
        phase = self._phase(message_id, advertised, result.step)
        valid, rejected = validate_calls(phase, reducer, parts)
        for outcome in rejected:
            for chunk in outcome.chunks:
                self.emit(ChunkEvent(chunk=chunk))
        parts = self._merge(parts, rejected)
        message = NewMessage(
            id=message_id,
            role="assistant",
            parts=parts_to_json(parts),
            run_id=self.run_id,
            step_index=self._step_count - 1,
        )
        runtime_calls = any(not c.provider_executed for c in reducer.tool_calls)
        outcomes: list[ToolOutcome] = []
        if valid:
            # The calls are durable before any tool runs, so a lost runner's
            # successor knows which ones may have had side effects (TH-03).
            await self._commit_step(message)
            outcomes = await phase.run(valid)
        decision = await self._after_step_hook(result, message, self._merge(parts, outcomes))
        if isinstance(decision, Complete):
            await self._complete_step(
                message, parts, outcomes, committed=bool(valid), decision=decision
            )
        if any(o.pending is not None for o in outcomes):
            # Waiting takes precedence over next-step requests; the overlay is dropped.
            self._episode_state.overlay = []
            await self._commit_outcomes(message_id, parts, outcomes)
        if valid:
            await self._commit_outcomes(message_id, parts, outcomes)
            self._apply_overlay(decision)
            return  # a step with runtime tool calls continues with another step
        if runtime_calls or isinstance(decision, NextStep):
            await self._commit_step(message)
            self._apply_overlay(decision)
            return
        # No tool calls: the run completes, unless a user steered it meanwhile
        # (steering takes precedence over completion and next-step requests).
        anchor = result.anchor
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
                steered, anchor = await self._steered_since(result.anchor)
                if steered:
                    await self._commit_step(message)
                    self._episode_state.overlay = []
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
                self.emit(ChunkEvent(chunk=chunk))
        final = self._merge(parts, final_outcomes)
        if committed:
            await self._finish(
                status="completed",
                outcome="completed",
                reason=decision.reason,
                message=None,
                update_messages=[MessagePatch(id=message.id, parts=parts_to_json(final))],
            )
        await self._finish(
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
            await self._commit(
                WriteSet(
                    scope=self._scope,
                    thread_id=self._thread_id,
                    update_messages=[MessagePatch(id=message.id, parts=parts_to_json(marked))],
                    update_runs=[RunPatch(id=self.run_id, lease=self._lease)],
                )
            )
        step = StepInfo(step_id=new_id("stp"), index=message.step_index or 0)
        phase = self._phase(message.id, set(tools), step)
        suspends = dict(self._input.get("suspends") or {})
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
        self._input = {**self._input, "suspends": suspends}
        await self._commit_outcomes(message.id, parts, outcomes)


def _fulfilled(action: PendingActionRecord) -> bool:
    """Whether an operator answered the action with a result (no execution follows)."""
    resolution = action.resolution if isinstance(action.resolution, dict) else {}
    return "output" in resolution or "error_text" in resolution


def _original(parts: list[MessagePart], part: ToolPart) -> ToolPart:
    for p in parts:
        if isinstance(p, ToolPart) and p.tool_call_id == part.tool_call_id:
            return p
    return part


def _with_after(rewrite: RegenerateRewrite, after: int) -> RegenerateRewrite:
    return replace(rewrite, after_version=after)


def _error_of(e: BaseException) -> RunError:
    if isinstance(e, PaiError):
        return RunError(reason=e.reason, message=e.message)
    if isinstance(e, RunFailure):
        return RunError(reason=e.reason, message=str(e))
    if isinstance(e, StreamProtocolError):
        return RunError(reason="STREAM_PROTOCOL_ERROR", message=str(e))
    return RunError(reason="INTERNAL", message=f"{type(e).__name__}: {e}")


__all__ = ["Execution"]
