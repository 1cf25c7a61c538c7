"""One execution episode of a claimed run: the model/tool loop under a lease.

The loop is laid out along the lifecycle phases of the seeds (prepare run,
resolve model context, prepare model step, model call, transform step
stream, tool phases, after step); each phase is its own method so hooks
slot in without reshaping the loop. Each completed assistant step commits
its own message atomically with the run transition (RT-05). A lost lease
stops the episode and nothing more is written.
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
    MessageEvent,
    ModelMessage,
    RunError,
    RunEvent,
    RunEventPayload,
    StartStepChunk,
    StatusEvent,
    StepStreamChunk,
    SystemModelMessage,
    Usage,
    new_id,
)
from pai_grpc.errors import ModelError
from pai_grpc.models import ModelCall, to_model_messages
from pai_grpc.runtime._agents import Agent
from pai_grpc.runtime._records import (
    message_from_record,
    parts_to_json,
    payload_to_json,
)
from pai_grpc.runtime._reducer import StepReducer, StreamProtocolError
from pai_grpc.runtime._sink import EventSink
from pai_grpc.streams import Broker
from storage import (
    NOW,
    PROMOTE_NEXT,
    ClaimedRun,
    CommitResult,
    LeaseLost,
    MessageRecord,
    NewEvent,
    NewMessage,
    RunPatch,
    Store,
    ThreadPatch,
    WriteSet,
)

log = logging.getLogger("pai_grpc.runtime")

#: Page size used when the default context leaf collects every context message.
CONTEXT_PAGE = 500


class _Stop(Exception):
    """Internal: the episode ended (terminal transition committed)."""


@dataclass
class StepOutcome:
    """What one model step produced."""

    reducer: StepReducer
    request: ModelCall
    usage: Usage = field(default_factory=Usage)


class Execution:
    """Executes one claimed run until it is terminal, waits, or loses its lease."""

    def __init__(
        self,
        *,
        store: Store,
        broker: Broker,
        agent: Agent,
        claimed: ClaimedRun,
        lease_seconds: float,
    ) -> None:
        self._store = store
        self._broker = broker
        self._agent = agent
        self._run = claimed.run
        self._lease = claimed.lease
        self._lease_seconds = lease_seconds
        self._scope = claimed.run.scope
        self._thread_id = claimed.run.thread_id
        self._usage = Usage.model_validate(claimed.run.usage)
        self._step_count = claimed.run.step_count
        self.sink = EventSink(
            store=store,
            broker=broker,
            scope=self._scope,
            thread_id=self._thread_id,
            run_id=self._run.id,
            lease=self._lease,
            last_seq=claimed.run.last_seq,
        )
        self.lease_lost = False

    @property
    def run_id(self) -> str:
        """The run being executed."""
        return self._run.id

    # ---- driver ------------------------------------------------------------

    async def run(self) -> None:
        """Run the episode; never raises except for cancellation."""
        heartbeat = asyncio.create_task(self._heartbeat(asyncio.current_task()))
        aborted = False
        try:
            await self._episode()
        except _Stop:
            pass
        except LeaseLost:
            aborted = True
            self.lease_lost = True
            log.warning("run %s: lease lost; this execution stops writing", self.run_id)
        except asyncio.CancelledError:
            aborted = True
            if self.lease_lost:
                log.warning("run %s: lease lost; this execution stops writing", self.run_id)
            else:
                # Shutdown: hand the run back so another runner resumes it at once.
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._store.release(self._lease))
                raise
        except Exception as e:  # any other failure fails the run, with its reason
            log.exception("run %s failed", self.run_id)
            try:
                await self._fail(_error_of(e))
            except (_Stop, LeaseLost):
                pass
            except Exception:
                # The failure could not be recorded (e.g. the database is down): the lease
                # expires and another runner recovers the run.
                log.exception("run %s: could not record the failure", self.run_id)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            await self.sink.close(aborted=aborted)

    async def _heartbeat(self, main: asyncio.Task[Any] | None) -> None:
        interval = self._lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                self._lease = await self._store.heartbeat(
                    self._lease, lease_seconds=self._lease_seconds
                )
            except LeaseLost:
                self.lease_lost = True
                if main is not None:
                    main.cancel()
                return
            except Exception:  # a transient database error: try again next beat
                log.warning("run %s: heartbeat failed", self.run_id, exc_info=True)

    # ---- the episode, phase by phase --------------------------------------

    async def _episode(self) -> None:
        await self._start()
        await self._prepare_run()
        first_step = self._step_count
        while True:
            if self._step_count - first_step >= self._agent.max_steps:
                await self._complete(reason="MAX_STEPS")
                return
            context = await self._resolve_model_context()
            call = await self._prepare_model_step(context)
            outcome = await self._model_step(call)
            continue_ = await self._after_step(outcome)
            if not continue_:
                return

    async def _start(self) -> None:
        """Apply the run's queued input (if any) and announce that it runs."""
        if self._run.attempts > 1:
            # A previous execution was lost: whatever it streamed after its last
            # committed step is void, and readers must drop it.
            self.emit(ChunkEvent(chunk=AbortChunk(reason="recovery")))
        queued = self._run.input.get("message")
        if not isinstance(queued, dict):
            self.emit(StatusEvent(status="running"))
            return
        parts, metadata = queued.get("parts"), queued.get("metadata")
        message = NewMessage(
            id=str(queued["id"]),
            role="user",
            parts=parts if isinstance(parts, list) else [],
            metadata=metadata if isinstance(metadata, dict) else {},
            run_id=self.run_id,
        )
        self.emit(StatusEvent(status="running"))
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
        )

    async def _prepare_run(self) -> None:
        """prepare_run: episode defaults (hooks arrive with the lifecycle)."""

    async def _resolve_model_context(self) -> list[ModelMessage]:
        """resolve_model_context: the default leaf, every context-visible message in order."""
        records: list[MessageRecord] = []
        token = ""
        while True:
            page = await self._store.list_messages(
                self._scope,
                self._thread_id,
                view="context",
                limit=CONTEXT_PAGE,
                page_token=token,
            )
            records.extend(page.items)
            token = page.next_page_token
            if not token:
                break
        return to_model_messages(message_from_record(r) for r in records)

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
            settings=self._agent.model_settings,
            provider_options=self._agent.provider_options,
        )

    async def _model_step(self, call: ModelCall) -> StepOutcome:
        """around_model_call + transform_step_stream: stream one step and reduce it."""
        reducer = StepReducer()
        start = StartStepChunk()
        reducer.apply(start)
        self.emit(ChunkEvent(chunk=start))
        stream = await self._agent.model.stream(call)
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
        return StepOutcome(reducer=reducer, request=call, usage=reducer.usage)

    async def _transform_step_stream(
        self, stream: AsyncIterator[StepStreamChunk]
    ) -> AsyncIterator[StepStreamChunk]:
        """transform_step_stream: the canonical output policy (identity for now)."""
        async for chunk in stream:
            yield chunk

    async def _after_step(self, outcome: StepOutcome) -> bool:
        """Tool phases + after_step, then commit the step; return whether to continue."""
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
            return False
        self._usage = self._usage + outcome.usage
        self._step_count += 1
        message = NewMessage(
            id=new_id("msg"),
            role="assistant",
            parts=parts_to_json(reducer.finalize()),
            run_id=self.run_id,
            step_index=self._step_count - 1,
        )
        await self._finish(status="completed", outcome="completed", reason=None, message=message)
        return False

    # ---- transitions -------------------------------------------------------

    async def _complete(self, *, reason: str | None) -> None:
        await self._finish(status="completed", outcome="completed", reason=reason, message=None)

    async def _fail(self, error: RunError) -> None:
        self.emit(ChunkEvent(chunk=ErrorChunk(reason=error.reason, message=error.message)))
        await self._finish(
            status="failed", outcome="failed", reason=error.reason, message=None, error=error
        )

    async def _finish(
        self,
        *,
        status: str,
        outcome: str,
        reason: str | None,
        message: NewMessage | None,
        error: RunError | None = None,
    ) -> None:
        """Commit the terminal transition (with the last step's message, if any)."""
        final: list[RunEventPayload] = []
        if status == "completed":
            final.append(ChunkEvent(chunk=FinishChunk(total_usage=self._usage)))
        final.append(StatusEvent(status=status, outcome=outcome, reason=reason, error=error))

        def after(result: CommitResult) -> list[RunEventPayload]:
            payloads: list[RunEventPayload] = [
                MessageEvent(message=message_from_record(m)) for m in result.messages
            ]
            return payloads + final

        await self._commit(
            WriteSet(
                scope=self._scope,
                thread_id=self._thread_id,
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
    ) -> CommitResult:
        """Commit ``ws`` with every buffered event, plus ``count`` events built from its result.

        ``after(result)`` returns the payloads describing what was committed
        (messages with their assigned positions, the final status). They get
        their sequence numbers now and land in the same transaction, and are
        published live only once durable.
        """
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

            def events_after(result: CommitResult) -> list[NewEvent]:
                payloads = after(result) if after is not None else []
                if len(payloads) != len(seqs):
                    raise RuntimeError(f"expected {len(seqs)} events, built {len(payloads)}")
                now = datetime.now(UTC)
                built[:] = [
                    RunEvent(seq=q, time=now, payload=p)
                    for q, p in zip(seqs, payloads, strict=False)
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
        return result


def _error_of(e: BaseException) -> RunError:
    if isinstance(e, ModelError):
        return RunError(reason=e.reason, message=e.message)
    if isinstance(e, StreamProtocolError):
        return RunError(reason="STREAM_PROTOCOL_ERROR", message=str(e))
    return RunError(reason="INTERNAL", message=f"{type(e).__name__}: {e}")


__all__ = ["Execution"]
