"""A step's output: the output policy over its stream, reduction and publication.

``transform_step_stream`` (the canonical output policy) sees every chunk of a
step before the reducer and the run's watchers do; ``ui_data.write()`` data
chunks are published between them, and ``abort()`` ends the step with nothing
of it committed unless a replacement is given (TSS-*). Hook-authored
responses (prepare_run / prepare_model_step ``Respond``, ``Block``) pass
through the same policy and complete the run; so does an abort's
replacement. Terminal outcomes commit through the run committer, which
raises Stop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from pai_grpc.domain import (
    AbortChunk,
    ChunkEvent,
    DataChunk,
    ErrorChunk,
    RunError,
    StartStepChunk,
    StepStreamChunk,
    new_id,
    new_ulid,
)
from pai_grpc.lifecycle import (
    AbortStep,
    AgentLifecycle,
    AssistantResponse,
    FacadeClosed,
    InvalidDecision,
    ModelStepRequest,
    StepAbort,
    StepInfo,
    TransformStepStreamInput,
    UiDataWriter,
)
from pai_grpc.lifecycle.internal import response_chunks
from pai_grpc.runtime._agents import Agent
from pai_grpc.runtime._committer import RunCommitter
from pai_grpc.runtime._model_step import (
    ModelCaller,
    check_chunk,
    close_stream,
    iterate,
    json_call,
    without_nul,
)
from pai_grpc.runtime._records import parts_to_json
from pai_grpc.runtime._reducer import StepReducer
from storage import NewMessage, check_strict_json

#: A step publishing a burst of chunks lets the rest of the event loop (a reader
#: still sending earlier ones, other calls) run at least this often, in seconds:
#: their latency is bounded, and a burst costs a few loop turns rather than one
#: per chunk.
GIVE_WAY_SECONDS = 0.0002


@dataclass
class StepResult:
    """One streamed step: what was reduced, under which request, and whether it was aborted."""

    reducer: StepReducer
    request: ModelStepRequest
    step: StepInfo
    anchor: int
    aborted: StepAbort | None = None


class StepOutput:
    """The output side of an episode's steps (owned by the hook pipeline)."""

    def __init__(
        self,
        *,
        agent: Agent,
        run_id: str,
        committer: RunCommitter,
        hooks: AgentLifecycle | None,
        phases: frozenset[str],
        base: Callable[[], dict[str, Any]],
        caller: ModelCaller,
    ) -> None:
        self._agent = agent
        self._run_id = run_id
        self._committer = committer
        self._hooks = hooks
        self._has = phases
        self._base = base
        self._caller = caller

    async def stream(
        self,
        source: AsyncIterator[StepStreamChunk],
        request: ModelStepRequest,
        step: StepInfo,
        *,
        anchor: int,
    ) -> StepResult:
        """Pass a step stream through the output policy; reduce and publish it (TSS-*)."""
        reducer = StepReducer()
        start = StartStepChunk()
        reducer.apply(start)
        self._committer.emit_chunk(start)
        result = StepResult(reducer=reducer, request=request, step=step, anchor=anchor)
        data: list[DataChunk] = []
        open_ = [True]
        stream = source
        if "transform_step_stream" in self._has:
            contract = self._agent.contract

            def write(chunk: DataChunk) -> None:
                if not open_[0]:
                    raise FacadeClosed("ui_data.write() after the step ended", reason="STEP_ENDED")
                if not isinstance(chunk, DataChunk):
                    raise InvalidDecision(
                        "ui_data", "transform_step_stream", "ui_data.write() takes data chunks"
                    )
                value = contract.parse_data(chunk.name, chunk.data)
                check_strict_json(value, path=f"data-{chunk.name}")
                data.append(chunk)

            async def abort(decision: StepAbort) -> NoReturn:
                if not isinstance(decision, StepAbort):
                    raise InvalidDecision(
                        "abort", "transform_step_stream", "abort() takes a StepAbort"
                    )
                raise AbortStep(decision)

            stream = self._lifecycle.transform_step_stream(
                TransformStepStreamInput(
                    **self._base(),
                    step=step,
                    stream=source,
                    input=request,
                    ui_data=UiDataWriter(write),
                    abort=abort,
                )
            )
            if not hasattr(stream, "__anext__"):
                raise InvalidDecision(
                    "transform_step_stream", "transform_step_stream", "expected an async iterator"
                )
        # When the stream hands over chunks without waiting (a burst the provider's
        # buffer already holds, a model that answers at once), this loop would
        # never let anything else on the event loop run: it gives way at once to
        # a reader it woke, and every GIVE_WAY_SECONDS to everything else (a
        # reader still sending, each of whose messages waits for a turn of the
        # loop; the StreamRun that will read this run, not dispatched yet; every
        # other client's call).
        channel = self._committer.channel
        give_way_at = 0.0
        try:
            async for chunk in stream:
                self._publish_data(data, reducer)
                check_chunk(chunk)
                chunk = json_call(without_nul(chunk))
                self._committer.check_sink()
                reducer.apply(chunk)
                # check_chunk proved it one arm of the chunk union: encoded as it is.
                self._committer.emit_chunk(chunk)
                if chunk.type in ("error", "abort"):
                    break
                if channel.readers_waiting or time.monotonic() >= give_way_at:
                    await asyncio.sleep(0)
                    give_way_at = time.monotonic() + GIVE_WAY_SECONDS
            self._publish_data(data, reducer)
        except AbortStep as e:
            result.aborted = e.abort
        finally:
            open_[0] = False
            # Stop the transforms and every provider attempt (cancel, abort, error, early end).
            await close_stream(stream)
            await self._caller.close_streams()
        return result

    def _publish_data(self, data: list[DataChunk], reducer: StepReducer) -> None:
        for chunk in data:
            reducer.apply(chunk)
            self._committer.emit(ChunkEvent(chunk=chunk))
        data.clear()

    async def abort(self, result: StepResult) -> NoReturn:
        """End an aborted step: nothing of it is committed unless replaced (TSS-04)."""
        decision = result.aborted
        assert decision is not None
        self._committer.emit(ChunkEvent(chunk=AbortChunk(reason=decision.reason)))
        if decision.outcome == "failed":
            await self.fail(decision.reason, decision.message)
        message = None
        if decision.replacement is not None:
            reducer = StepReducer()
            start = StartStepChunk()
            reducer.apply(start)
            self._committer.emit_chunk(start)
            for chunk in response_chunks(decision.replacement, prefix=f"txt_{new_ulid()}_"):
                reducer.apply(chunk)
                self._committer.emit_chunk(chunk)
            self._committer.step_count += 1
            message = NewMessage(
                id=new_id("msg"),
                role="assistant",
                parts=parts_to_json(reducer.finalize()),
                metadata=self._agent.contract.validate(
                    "message_metadata", dict(decision.replacement.metadata)
                ),
                run_id=self._run_id,
                step_index=result.step.index,
            )
        await self._committer.finish(
            status="completed", outcome="blocked", reason=decision.reason, message=message
        )
        raise AssertionError("unreachable")

    async def respond(
        self,
        response: AssistantResponse,
        *,
        outcome: str,
        reason: str | None,
        request: ModelStepRequest,
        step: StepInfo,
    ) -> NoReturn:
        """Commit a hook-authored response through the output policy; complete (PR-03/05)."""
        if not isinstance(response, AssistantResponse):
            raise InvalidDecision("respond", "respond", "the response must be an AssistantResponse")
        if outcome not in ("completed", "blocked"):
            raise InvalidDecision("respond", "respond", f"unknown outcome {outcome!r}")
        meta = self._agent.contract.validate("message_metadata", dict(response.metadata))
        chunks = response_chunks(response, prefix=f"txt_{new_ulid()}_")
        result = await self.stream(iterate(chunks), request, step, anchor=-1)
        if result.aborted is not None:
            await self.abort(result)
        self._committer.step_count += 1
        message = NewMessage(
            id=new_id("msg"),
            role="assistant",
            parts=parts_to_json(result.reducer.finalize()),
            metadata=meta,
            run_id=self._run_id,
            step_index=step.index,
        )
        await self._committer.finish(
            status="completed", outcome=outcome, reason=reason, message=message
        )
        raise AssertionError("unreachable")

    async def block(
        self,
        reason: str,
        response: AssistantResponse | None,
        request: ModelStepRequest,
        step: StepInfo,
    ) -> NoReturn:
        """A structured policy block (PMS-03), with its response if any."""
        if response is not None:
            await self.respond(
                response, outcome="blocked", reason=reason, request=request, step=step
            )
        await self._committer.finish(
            status="completed", outcome="blocked", reason=reason, message=None
        )
        raise AssertionError("unreachable")

    async def fail(self, reason: str, message: str | None) -> NoReturn:
        error = RunError(reason=reason, message=message or reason)
        self._committer.emit(ChunkEvent(chunk=ErrorChunk(reason=reason, message=error.message)))
        await self._committer.finish(
            status="failed", outcome="failed", reason=reason, message=None, error=error
        )
        raise AssertionError("unreachable")  # _finish raises Stop

    @property
    def _lifecycle(self) -> AgentLifecycle:
        assert self._hooks is not None
        return self._hooks


__all__ = ["StepOutput", "StepResult"]
