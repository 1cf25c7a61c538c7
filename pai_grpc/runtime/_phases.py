"""The lifecycle phases of one execution episode.

prepare_run sets the episode defaults; each model step then resolves its
context (middleware, anchored at the step start), is shaped by
prepare_model_step, calls the model through around_model_call, passes the
output through transform_step_stream (the canonical output policy), runs its
tool calls through before_tool_call / after_tool_result, and lets after_step
decide the transition. With no lifecycle every phase is the runtime default,
and no hook machinery runs at all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from pydantic import BaseModel

from pai_grpc.domain import (
    AbortChunk,
    AssistantModelMessage,
    ChunkEvent,
    DataChunk,
    ErrorChunk,
    LifecycleMessage,
    MessagePart,
    ModelMessage,
    RunError,
    StartStepChunk,
    StepStreamChunk,
    SystemModelMessage,
    ToolCallChunk,
    ToolErrorChunk,
    ToolModelMessage,
    ToolPart,
    UserModelMessage,
    new_id,
)
from pai_grpc.domain._ids import new_ulid
from pai_grpc.errors import ModelError
from pai_grpc.lifecycle import (
    AbortSignal,
    AbortStep,
    AfterStepInput,
    AfterToolResultInput,
    AgentLifecycle,
    AssistantResponse,
    BeforeToolCallInput,
    Block,
    Complete,
    Continue,
    Fail,
    InvalidDecision,
    ModelStepRequest,
    ModelStepStreamResult,
    NextStep,
    PrepareModelStepInput,
    PrepareRunInput,
    ResolveModelContextInput,
    Respond,
    RunPatch,
    StepAbort,
    StepInfo,
    StepSummary,
    ToolInfo,
    ToolResult,
    TransformStepStreamInput,
    UiDataWriter,
    apply_patch,
    instructions_of,
    missing_text_id,
)
from pai_grpc.lifecycle._commit import FacadeState
from pai_grpc.lifecycle._compose import Effective
from pai_grpc.lifecycle._errors import FacadeClosed
from pai_grpc.lifecycle._facade import LifecycleRun, LifecycleThread, ModelHistory
from pai_grpc.lifecycle._stream import response_chunks
from pai_grpc.models import prune_reasoning
from pai_grpc.runtime._facade_backend import FacadeBackend
from pai_grpc.runtime._records import lifecycle_message_from_record, parts_to_json
from pai_grpc.runtime._reducer import StepReducer
from pai_grpc.runtime._tool_phase import ToolOutcome, ToolPhase, ValidCall
from pai_grpc.runtime._transitions import RunFailure, Transitions, lifecycle_draft
from pai_grpc.tools import Tool, ToolEntry
from storage import InvalidJson, NewMessage, check_strict_json
from storage import NotFound as StorageNotFound

_MODEL_MESSAGES = (SystemModelMessage, UserModelMessage, AssistantModelMessage, ToolModelMessage)
#: Chunk types a transform may not emit: run framing, and data (only through ui_data).
_FRAMING = frozenset({"start", "finish", "start-step", "data"})


@dataclass
class StepResult:
    """One streamed step: what was reduced, under which request, and whether it was aborted."""

    reducer: StepReducer
    request: ModelStepRequest
    step: StepInfo
    anchor: int
    aborted: StepAbort | None = None


@dataclass(frozen=True)
class CalledModel:
    """around_model_call's outcome: the step stream and the request it answers."""

    stream: AsyncIterator[StepStreamChunk]
    #: The effective request the provider received for this stream (see _source_of).
    request: ModelStepRequest


@dataclass(frozen=True)
class _Attempt:
    """One successful provider attempt of the current step."""

    result: ModelStepStreamResult
    #: The request as sent: after every patch and reasoning pruning.
    request: ModelStepRequest
    #: The tool names snapshotted when the attempt began (TV-05).
    tools: frozenset[str]


@dataclass
class Episode:
    """Episode state: defaults set by prepare_run and the model-only overlay (AS-04)."""

    defaults: ModelStepRequest
    max_steps: int
    overlay: list[ModelMessage] = field(default_factory=list)
    #: The anchor the overlay was last confirmed against (steering since drops it).
    overlay_anchor: int = 0


class Phases(Transitions):
    """The phase methods of an execution (state is set up by :class:`Execution`)."""

    _hooks: AgentLifecycle | None
    _has: frozenset[str]
    _facade: FacadeState | None
    _thread_view: LifecycleThread | None
    _resolver_view: LifecycleThread | None
    _run_view: LifecycleRun | None
    _runtime_context: Any
    _signal: AbortSignal
    _episode_state: Episode
    #: Provider streams opened in the current step (closed when it ends).
    _provider_streams: list[AsyncIterator[StepStreamChunk]]
    #: The tools that may execute in the current step (the source attempt's, TV-05).
    _advertised: frozenset[str] | None
    #: The successful provider attempts of the current step, in order.
    _attempts: list[_Attempt]

    # ---- hook plumbing -----------------------------------------------------

    def _open_facade(self) -> None:
        """Create the episode's facade (only when the agent has lifecycle hooks)."""
        state = FacadeState(
            backend=FacadeBackend(self._services, self._agent, self._runtime_context),
            scope=self._scope,
            thread_id=self._thread_id,
            contract=self._agent.contract,
            run_id=self.run_id,
            lease=self._lease,
        )
        self._facade = state
        self._thread_view = LifecycleThread(state)
        self._resolver_view = LifecycleThread(state, allow_visibility=False)
        self._run_view = LifecycleRun.of(
            state,
            initiator=self._run.initiator,
            started_at=self._run.started_at,
            operation=self._run.operation,
            execution_started_at=self._run.execution_started_at,
        )

    def _base(self, *, resolver: bool = False) -> dict[str, Any]:
        """The fields every hook input carries."""
        assert self._run_view is not None
        assert self._thread_view is not None
        return {
            "run": self._run_view,
            "thread": self._resolver_view if resolver else self._thread_view,
            "runtime_context": self._runtime_context,
            "signal": self._signal,
        }

    @property
    def _lifecycle(self) -> AgentLifecycle:
        assert self._hooks is not None
        return self._hooks

    # ---- prepare_run ------------------------------------------------------------

    def _episode_defaults(self) -> Episode:
        agent = self._agent
        return Episode(
            defaults=ModelStepRequest(
                run_id=self.run_id,
                thread_id=self._thread_id,
                step_index=self._step_count,
                model=agent.model,
                instructions=instructions_of(agent.instructions),
                messages=[],
                tools=[t.manifest() for t in agent.tools],
                provider_tools=agent.provider_tools,
                tool_choice=agent.tool_choice,
                model_settings=agent.model_settings,
                provider_options=dict(agent.provider_options),
                runtime_context=self._runtime_context,
                signal=self._signal,
            ),
            max_steps=agent.max_steps,
        )

    async def _prepare_run(self) -> None:
        """prepare_run: episode defaults, or a respond/complete/fail that ends the run."""
        episode = self._episode_state = self._episode_defaults()
        if "prepare_run" not in self._has:
            return
        decision = await self._lifecycle.prepare_run(
            PrepareRunInput(
                **self._base(),
                latest_user_message=await self._latest_user_message(),
                input=self._operation_input(),
            )
        )
        match decision:
            case None:
                return
            case Continue():
                patches = decision.patch if isinstance(decision.patch, list) else [decision.patch]
                for patch in patches:
                    if patch is None:
                        continue
                    assert isinstance(patch, RunPatch)
                    episode.defaults = apply_patch(episode.defaults, patch)
                    if patch.max_steps:
                        if not isinstance(patch.max_steps, int) or patch.max_steps < 1:
                            raise InvalidDecision(
                                "prepare_run", "prepare_run", "max_steps must be a positive int"
                            )
                        episode.max_steps = patch.max_steps
                    if patch.append_model_messages:
                        episode.overlay += _model_messages(
                            patch.append_model_messages, "prepare_run"
                        )
                episode.overlay_anchor = await self._message_count()
            case Respond():
                step = StepInfo(step_id=new_id("stp"), index=self._step_count)
                await self._respond(
                    decision.response,
                    outcome=decision.outcome,
                    reason=decision.reason,
                    request=episode.defaults,
                    step=step,
                )
            case Complete():
                await self._finish(
                    status="completed", outcome="completed", reason=decision.reason, message=None
                )
            case Fail():
                await self._fail_deliberately(decision.reason, decision.message)

    async def _fail_deliberately(self, reason: str, message: str | None) -> NoReturn:
        error = RunError(reason=reason, message=message or reason)
        self.emit(ChunkEvent(chunk=ErrorChunk(reason=reason, message=error.message)))
        await self._finish(
            status="failed", outcome="failed", reason=reason, message=None, error=error
        )
        raise AssertionError("unreachable")  # _finish raises Stop

    def _operation_input(self) -> Any:
        source = self._run.input
        if self._run.initiator == "trigger" and "trigger" in source:
            return source["trigger"]
        return {k: v for k, v in source.items() if k != "suspends"}

    async def _latest_user_message(self) -> LifecycleMessage | None:
        """The user message this operation appended (send only)."""
        if self._run.operation != "send":
            return None
        queued = self._input.get("message")
        message_id = self._input.get("message_id") or (
            queued.get("id") if isinstance(queued, dict) else None
        )
        if not isinstance(message_id, str):
            return None
        found = await self._services.store.get_messages(self._scope, self._thread_id, [message_id])
        return lifecycle_message_from_record(found[0]) if found else None

    async def _message_count(self) -> int:
        thread = await self._services.store.get_thread(self._scope, self._thread_id)
        if thread is None:
            raise RunFailure("THREAD_GONE", "the thread was deleted")
        return thread.message_count

    # ---- resolve_model_context ------------------------------------------------

    async def _resolve_model_context(self, step: StepInfo) -> tuple[int, list[ModelMessage]]:
        """The step's physical anchor and its base context (RMC-*).

        The default leaf is every context-visible message in order, read from
        one snapshot; history is capped at the anchor, so messages appended
        while the step runs never leak into it.
        """
        try:
            context = await self._services.contexts.read(self._scope, self._thread_id)
        except StorageNotFound as e:
            raise RunFailure("THREAD_GONE", "the thread was deleted") from e
        if "resolve_model_context" not in self._has:
            return context.count, context.model_messages
        assert self._facade is not None
        leaf = list(context.model_messages)

        async def default_leaf(base: list[ModelMessage] | None = None) -> list[ModelMessage]:
            return list(leaf)

        through = await self._message_at(context.count - 1)
        resolved = await self._lifecycle.resolve_model_context(
            ResolveModelContextInput(
                **self._base(resolver=True),
                step=step,
                history=ModelHistory(state=self._facade, through=through),
            ),
            default_leaf,
        )
        return context.count, _model_messages(resolved, "resolve_model_context")

    async def _message_at(self, position: int) -> LifecycleMessage | None:
        if position < 0:
            return None
        page = await self._services.store.list_messages(
            self._scope,
            self._thread_id,
            view="all",
            order="desc",
            through_position=position,
            limit=1,
        )
        return lifecycle_message_from_record(page.items[0]) if page.items else None

    # ---- prepare_model_step -----------------------------------------------------

    async def _prepare_model_step(
        self, step: StepInfo, context: list[ModelMessage], anchor: int
    ) -> ModelStepRequest:
        """The step's effective request: episode defaults + context + overlay + step patches."""
        episode = self._episode_state
        if episode.overlay and anchor > episode.overlay_anchor:
            steered, _ = await self._steered_since(episode.overlay_anchor)
            if steered:
                episode.overlay = []  # steering drops the model-only overlay (AS-04)
        episode.overlay_anchor = anchor
        request = replace(
            episode.defaults, step_index=step.index, messages=[*context, *episode.overlay]
        )
        if "prepare_model_step" not in self._has:
            return request
        decision = await self._lifecycle.prepare_model_step(
            PrepareModelStepInput(**self._base(), step=step, input=request)
        )
        match decision:
            case None:
                return request
            case Continue():
                patches = decision.patch if isinstance(decision.patch, list) else [decision.patch]
                for patch in patches:
                    if patch is not None:
                        request = apply_patch(request, patch)
                return request
            case Respond():
                await self._respond(
                    decision.response,
                    outcome=decision.outcome,
                    reason=decision.reason,
                    request=request,
                    step=step,
                )
            case Block():
                await self._block(decision.reason, decision.response, request, step)
        raise InvalidDecision("prepare_model_step", "prepare_model_step", repr(decision))

    async def _respond(
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
        result = await self._stream_step(_iterate(chunks), request, step, anchor=-1)
        if result.aborted is not None:
            await self._abort_step(result)
        self._step_count += 1
        message = NewMessage(
            id=new_id("msg"),
            role="assistant",
            parts=parts_to_json(result.reducer.finalize()),
            metadata=meta,
            run_id=self.run_id,
            step_index=step.index,
        )
        await self._finish(status="completed", outcome=outcome, reason=reason, message=message)
        raise AssertionError("unreachable")

    async def _block(
        self,
        reason: str,
        response: AssistantResponse | None,
        request: ModelStepRequest,
        step: StepInfo,
    ) -> NoReturn:
        """A structured policy block (PMS-03), with its response if any."""
        if response is not None:
            await self._respond(
                response, outcome="blocked", reason=reason, request=request, step=step
            )
        await self._finish(status="completed", outcome="blocked", reason=reason, message=None)
        raise AssertionError("unreachable")

    # ---- around_model_call --------------------------------------------------------

    async def _model_call(self, request: ModelStepRequest) -> CalledModel:
        """around_model_call, outermost first, down to the provider attempt.

        Returns the stream the wrappers returned with the request it answers:
        the effective request of the attempt it came from, as the provider
        received it (after every patch and reasoning pruning).
        """
        self._advertised = None
        self._attempts = []
        if "around_model_call" not in self._has:
            called = await self._attempt(request)
        else:

            async def leaf(effective: Effective | None = None) -> ModelStepStreamResult:
                return await self._attempt(effective.request if effective is not None else request)

            called = await self._lifecycle.around_model_call(request, leaf)
        return self._source_of(called, request)

    def _source_of(self, called: ModelStepStreamResult, request: ModelStepRequest) -> CalledModel:
        """The attempt whose stream ``called`` is; its request and tools are authoritative.

        A stream returned unchanged (or re-wrapped in a new result) is that
        attempt's; with a single successful attempt there is no other source.
        A newly wrapped stream after several successful attempts cannot be
        traced: PAI fails closed and keeps only tools every attempt advertised
        (TV-05), reporting the latest attempt's request narrowed to them, so
        hooks, telemetry and the executor agree on the tool list.
        """
        attempts = self._attempts
        source = next(
            (a for a in attempts if a.result is called or a.result.stream is called.stream),
            attempts[0] if len(attempts) == 1 else None,
        )
        if source is not None:
            self._advertised = source.tools
            return CalledModel(stream=called.stream, request=source.request)
        if not attempts:
            # Answered without a provider call (e.g. a cache hit): nothing was sent.
            return CalledModel(stream=called.stream, request=request)
        allowed = frozenset.intersection(*(a.tools for a in attempts))
        latest = attempts[-1].request
        self._advertised = allowed
        narrowed = replace(latest, tools=[t for t in latest.tools if t.name in allowed])
        return CalledModel(stream=called.stream, request=narrowed)

    async def _attempt(self, request: ModelStepRequest) -> ModelStepStreamResult:
        """One provider attempt: resolves once the stream is constructed (AMC-03)."""
        # The request as sent: the tool list snapshotted when the attempt begins
        # (later mutation of the hook's list cannot widen what may execute, TV-05),
        # and reasoning pruned for the attempt only; history and the hooks that
        # run before the call keep the full context (RSN-04).
        sent = replace(
            request, tools=list(request.tools), messages=prune_reasoning(request.messages)
        )
        stream = await request.model.stream(sent.to_call())
        self._provider_streams.append(stream)
        signals = list(request.attempt_signals)
        if request.timeout is not None:
            signals.append(AbortSignal.timeout(request.timeout))
        if signals:
            stream = _abortable(stream, AbortSignal.any(*signals))
        result = ModelStepStreamResult(stream=stream)
        self._attempts.append(
            _Attempt(result=result, request=sent, tools=frozenset(t.name for t in sent.tools))
        )
        return result

    # ---- transform_step_stream and reduction --------------------------------------

    async def _stream_step(
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
        self.emit(ChunkEvent(chunk=start))
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
        try:
            async for chunk in stream:
                self._publish_data(data, reducer)
                _check_chunk(chunk)
                chunk = _json_call(_without_nul(chunk))
                self._check_sink()
                reducer.apply(chunk)
                self.emit(ChunkEvent(chunk=chunk))
                if chunk.type in ("error", "abort"):
                    break
            self._publish_data(data, reducer)
        except AbortStep as e:
            result.aborted = e.abort
        finally:
            open_[0] = False
            # Stop the transforms and every provider attempt (cancel, abort, error, early end).
            await _close(stream)
            for provider in self._provider_streams:
                await _close(provider)
            self._provider_streams.clear()
        return result

    def _publish_data(self, data: list[DataChunk], reducer: StepReducer) -> None:
        for chunk in data:
            reducer.apply(chunk)
            self.emit(ChunkEvent(chunk=chunk))
        data.clear()

    async def _abort_step(self, result: StepResult) -> NoReturn:
        """abort(): nothing of the partial step is committed unless replaced (TSS-04)."""
        decision = result.aborted
        assert decision is not None
        self.emit(ChunkEvent(chunk=AbortChunk(reason=decision.reason)))
        if decision.outcome == "failed":
            await self._fail_deliberately(decision.reason, decision.message)
        message = None
        if decision.replacement is not None:
            reducer = StepReducer()
            start = StartStepChunk()
            reducer.apply(start)
            self.emit(ChunkEvent(chunk=start))
            for chunk in response_chunks(decision.replacement, prefix=f"txt_{new_ulid()}_"):
                reducer.apply(chunk)
                self.emit(ChunkEvent(chunk=chunk))
            self._step_count += 1
            message = NewMessage(
                id=new_id("msg"),
                role="assistant",
                parts=parts_to_json(reducer.finalize()),
                metadata=self._agent.contract.validate(
                    "message_metadata", dict(decision.replacement.metadata)
                ),
                run_id=self.run_id,
                step_index=result.step.index,
            )
        await self._finish(
            status="completed", outcome="blocked", reason=decision.reason, message=message
        )
        raise AssertionError("unreachable")

    # ---- tools and after_step ---------------------------------------------------------

    def _phase(self, message_id: str, advertised: Iterable[str], step: StepInfo) -> ToolPhase:
        hooks = None
        if self._has & {"before_tool_call", "after_tool_result"}:
            hooks = _BoundToolHooks(self, step)
        return ToolPhase(
            run_id=self.run_id,
            thread_id=self._thread_id,
            tools=self._agent.tool_map(),
            advertised=set(advertised),
            message_id=message_id,
            hooks=hooks,
        )

    async def _after_step_hook(
        self, result: StepResult, message: NewMessage, parts: list[MessagePart]
    ) -> NextStep | Complete | None:
        """after_step: runs on the assembled step, before its transition commits (AS-01)."""
        if "after_step" not in self._has:
            return None
        reducer = result.reducer
        summary = StepSummary(
            step_id=result.step.step_id,
            index=result.step.index,
            message=lifecycle_draft(message, self._thread_id, max(result.anchor, 0), parts),
            finish_reason=reducer.finish_reason,
            provider_metadata=reducer.provider_metadata,
            usage=reducer.usage,
            tool_calls=list(reducer.tool_calls),
        )
        decision = await self._lifecycle.after_step(
            AfterStepInput(**self._base(), step=summary, request=result.request)
        )
        if isinstance(decision, NextStep):
            for value in (decision.append_model_messages, decision.replace_model_messages):
                if value is not None:
                    _model_messages(value, "after_step")
        return decision

    def _apply_overlay(self, decision: NextStep | Complete | None) -> None:
        if not isinstance(decision, NextStep):
            return
        episode = self._episode_state
        if decision.replace_model_messages is not None:
            episode.overlay = list(decision.replace_model_messages)
        if decision.append_model_messages:
            episode.overlay = [*episode.overlay, *decision.append_model_messages]


class _BoundToolHooks:
    """before_tool_call / after_tool_result bound to one step of this run."""

    def __init__(self, execution: Phases, step: StepInfo) -> None:
        self._x = execution
        self._step = step

    def _input(
        self, part: ToolPart, tool: Tool | None, entry: ToolEntry, history: list[Any]
    ) -> dict[str, Any]:
        info = ToolInfo(
            name=part.tool_name,
            source=tool.source if tool is not None else "backend",
            description=tool.description if tool is not None else "",
        )
        return {
            **self._x._base(),
            "step": self._step,
            "tool": info,
            "tool_call_id": part.tool_call_id,
            "entry": entry,
            "suspend_history": list(history),
            "input": part.input,
        }

    async def before(self, part: ToolPart, tool: Tool, entry: ToolEntry, history: list[Any]) -> Any:
        """before_tool_call (TH-01)."""
        if "before_tool_call" not in self._x._has:
            return None
        return await self._x._lifecycle.before_tool_call(
            BeforeToolCallInput(**self._input(part, tool, entry, history))
        )

    async def after(
        self,
        part: ToolPart,
        tool: Tool | None,
        entry: ToolEntry,
        history: list[Any],
        result: ToolResult,
    ) -> Any:
        """after_tool_result (TH-03)."""
        if "after_tool_result" not in self._x._has:
            return None
        return await self._x._lifecycle.after_tool_result(
            AfterToolResultInput(**self._input(part, tool, entry, history), result=result)
        )


def cancelled_outcome(part: ToolPart) -> ToolOutcome:
    """A waiting tool part cancelled because the run completes (AS-03)."""
    message = "the run completed before this tool call finished"
    return ToolOutcome(
        part=part.model_copy(update={"state": "output-error", "error_text": message}),
        chunks=[
            ToolErrorChunk(
                tool_call_id=part.tool_call_id,
                tool_name=part.tool_name,
                input=part.input,
                error_text=message,
            )
        ],
        result=ToolResult(status="output-error", message=message, source="cancel"),
    )


def validate_calls(
    phase: ToolPhase, reducer: StepReducer, parts: list[MessagePart]
) -> tuple[list[ValidCall], list[ToolOutcome]]:
    """Parse every runtime tool call once, after the whole transform composition (TV-01/02)."""
    by_id = {p.tool_call_id: p for p in parts if isinstance(p, ToolPart)}
    valid: list[ValidCall] = []
    rejected: list[ToolOutcome] = []
    for call in reducer.tool_calls:
        if call.provider_executed or call.invalid or call.tool_call_id not in by_id:
            continue
        checked = phase.validate(call, by_id[call.tool_call_id])
        if isinstance(checked, ValidCall):
            valid.append(checked)
        else:
            rejected.append(checked)
    return valid, rejected


def _model_messages(value: Any, where: str) -> list[ModelMessage]:
    if not isinstance(value, list) or not all(isinstance(m, _MODEL_MESSAGES) for m in value):
        raise InvalidDecision(where, where, "expected a list of model messages")
    return value


def _json_call(chunk: StepStreamChunk) -> StepStreamChunk:
    """A tool call with non-JSON input becomes an invalid call without it (TV-02).

    Its input is left out of everything durable (the chunk log and the
    message), so persistence cannot fail; the model sees a tool-input error.
    """
    if not isinstance(chunk, ToolCallChunk):
        return chunk
    try:
        check_strict_json(chunk.input, path="input")
    except InvalidJson as e:
        return chunk.model_copy(
            update={
                "input": None,
                "invalid": True,
                "error_text": f"invalid input for tool {chunk.tool_name}: {e}",
            }
        )
    return chunk


def _without_nul(chunk: StepStreamChunk) -> StepStreamChunk:
    """Model text holding U+0000 (which no backend stores) gets U+FFFD in its place.

    A model is outside input like a tool: its stray NUL must not stall the run
    at commit. Only the chunk's own strings are scanned (deltas, ids, error text).
    """
    update = {
        name: value.replace("\x00", "\ufffd")
        for name in type(chunk).model_fields
        if isinstance(value := getattr(chunk, name), str) and "\x00" in value
    }
    return chunk.model_copy(update=update) if update else chunk


def _check_chunk(chunk: Any) -> None:
    """The canonical stream's own rules (TSS-02, TSS-05)."""
    kind = getattr(chunk, "type", None)
    if not isinstance(chunk, BaseModel) or not isinstance(kind, str):
        raise InvalidDecision(
            "transform_step_stream", "transform_step_stream", f"not a step chunk: {chunk!r}"
        )
    if kind in _FRAMING:
        detail = (
            "application data is written through ui_data.write()"
            if kind == "data"
            else f"{kind} chunks are emitted by the runtime"
        )
        raise InvalidDecision("transform_step_stream", "transform_step_stream", detail)
    if problem := missing_text_id(chunk):
        raise InvalidDecision("transform_step_stream", "transform_step_stream", problem)


async def _iterate(chunks: list[StepStreamChunk]) -> AsyncIterator[StepStreamChunk]:
    for chunk in chunks:
        yield chunk


async def _close(stream: Any) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


async def _abortable(
    stream: AsyncIterator[StepStreamChunk], signal: AbortSignal
) -> AsyncIterator[StepStreamChunk]:
    """The provider stream, stopped when an attempt signal fires (AMC-04)."""
    aborted = asyncio.ensure_future(signal.wait())
    step: asyncio.Future[StepStreamChunk] | None = None
    try:
        while True:
            step = asyncio.ensure_future(anext(stream))
            done, _ = await asyncio.wait({step, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if step in done:
                try:
                    chunk = step.result()
                except StopAsyncIteration:
                    return
                yield chunk
                continue
            raise ModelError(
                f"the model call was aborted by its attempt signal ({signal.reason})",
                reason=signal.reason or "MODEL_CALL_ABORTED",
            )
    finally:
        aborted.cancel()
        # The provider's in-flight read runs in its own task: stop it too, whether
        # the attempt signal fired or the runtime cancelled/stopped the step.
        if step is not None and not step.done():
            step.cancel()
            with contextlib.suppress(BaseException):
                await step
        await _close(stream)


__all__ = ["CalledModel", "Episode", "Phases", "StepResult", "cancelled_outcome", "validate_calls"]
