"""The hook pipeline: the lifecycle phases of one execution episode.

prepare_run sets the episode defaults; each model step then resolves its
context (middleware, anchored at the step start), is shaped by
prepare_model_step, calls the model through around_model_call, passes the
output through transform_step_stream (the canonical output policy), runs its
tool calls through before_tool_call / after_tool_result, and lets after_step
decide the transition. With no lifecycle every phase is the runtime default,
and no hook machinery runs at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from pai_grpc.domain import (
    AssistantModelMessage,
    LifecycleMessage,
    MessagePart,
    ModelMessage,
    StepStreamChunk,
    SystemModelMessage,
    ToolModelMessage,
    UserModelMessage,
    new_id,
)
from pai_grpc.lifecycle import (
    AbortSignal,
    AfterStepInput,
    AgentLifecycle,
    Block,
    Complete,
    Continue,
    Fail,
    InvalidDecision,
    ModelStepRequest,
    NextStep,
    PrepareModelStepInput,
    PrepareRunInput,
    ResolveModelContextInput,
    Respond,
    RunPatch,
    StepInfo,
    StepSummary,
    compose_lifecycle,
)
from pai_grpc.lifecycle.internal import apply_patch, instructions_of
from pai_grpc.models import ContextMessages
from pai_grpc.runtime._agents import Agent
from pai_grpc.runtime._committer import RunCommitter, RunFailure, lifecycle_draft
from pai_grpc.runtime._facade import LifecycleRun, LifecycleThread, ModelHistory
from pai_grpc.runtime._facade_backend import FacadeBackend
from pai_grpc.runtime._facade_commit import FacadeState
from pai_grpc.runtime._model_step import (
    CalledModel,
    ModelCaller,
)
from pai_grpc.runtime._records import lifecycle_message_from_record
from pai_grpc.runtime._services import Services
from pai_grpc.runtime._step_output import StepOutput, StepResult
from pai_grpc.runtime._tool_phase import BoundToolHooks
from storage import Lease, NewMessage, RunRecord
from storage import NotFound as StorageNotFound

_MODEL_MESSAGES = (SystemModelMessage, UserModelMessage, AssistantModelMessage, ToolModelMessage)


@dataclass
class Episode:
    """Episode state: defaults set by prepare_run and the model-only overlay (AS-04)."""

    defaults: ModelStepRequest
    max_steps: int
    overlay: list[ModelMessage] = field(default_factory=list)
    #: The anchor the overlay was last confirmed against (steering since drops it).
    overlay_anchor: int = 0


class HookPipeline:
    """The lifecycle phases of one episode: the facade, the hook inputs, the episode state.

    With no lifecycle every phase is the runtime default and no hook
    machinery runs. Terminal decisions (respond, block, complete, fail,
    abort) are committed through the run committer, which raises Stop.
    """

    def __init__(
        self, *, services: Services, agent: Agent, run: RunRecord, committer: RunCommitter
    ) -> None:
        self._services = services
        self._agent = agent
        self._run = run
        self._committer = committer
        self._scope = run.scope
        self._thread_id = run.thread_id
        # Composed once; with no hooks none of the hook machinery runs.
        self._hooks = compose_lifecycle(agent.lifecycle) if agent.lifecycle is not None else None
        self._has = self._hooks.phases() if self._hooks is not None else frozenset()
        self._facade: FacadeState | None = None
        self._thread_view: LifecycleThread | None = None
        self._resolver_view: LifecycleThread | None = None
        self._run_view: LifecycleRun | None = None
        self._runtime_context: Any = None
        #: Aborted when the episode ends, whatever ends it.
        self.signal = AbortSignal()
        self._caller = ModelCaller(self._hooks if "around_model_call" in self._has else None)
        self._output = StepOutput(
            agent=agent,
            run_id=run.id,
            committer=committer,
            hooks=self._hooks,
            phases=self._has,
            base=self._base,
            caller=self._caller,
        )
        #: Set by prepare_run.
        self.episode: Episode

    @property
    def runtime_context(self) -> Any:
        """The agent's runtime context for this episode (None without hooks)."""
        return self._runtime_context

    @property
    def advertised(self) -> frozenset[str] | None:
        """The tools that may execute in the current step (the source attempt's, TV-05)."""
        return self._caller.advertised

    async def open(self) -> None:
        """Build the runtime context and the facade (only for agents with hooks)."""
        if self._hooks is None:
            return
        self._runtime_context = await self._agent.build_runtime_context()
        self._open_facade()

    def renew(self, lease: Lease) -> None:
        """The heartbeat renewed the lease: the facade writes under the new one."""
        if self._facade is not None:
            self._facade.lease = lease

    def close(self, reason: str) -> None:
        """End the episode: the facade closes and the signal aborts."""
        if self._facade is not None:
            self._facade.alive = False
        self.signal.abort(reason)

    # ---- hook plumbing -----------------------------------------------------

    def _open_facade(self) -> None:
        """Create the episode's facade (only when the agent has lifecycle hooks)."""
        state = FacadeState(
            backend=FacadeBackend(self._services, self._agent, self._runtime_context),
            scope=self._scope,
            thread_id=self._thread_id,
            contract=self._agent.contract,
            run_id=self._run.id,
            lease=self._committer.lease,
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
            "signal": self.signal,
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
                run_id=self._run.id,
                thread_id=self._thread_id,
                step_index=self._committer.step_count,
                model=agent.model,
                instructions=instructions_of(agent.instructions),
                messages=[],
                tools=[t.manifest() for t in agent.tools],
                provider_tools=agent.provider_tools,
                tool_choice=agent.tool_choice,
                model_settings=agent.model_settings,
                provider_options=dict(agent.provider_options),
                runtime_context=self._runtime_context,
                signal=self.signal,
            ),
            max_steps=agent.max_steps,
        )

    async def prepare_run(self) -> None:
        """prepare_run: episode defaults, or a respond/complete/fail that ends the run."""
        episode = self.episode = self._episode_defaults()
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
                episode.overlay_anchor = await self._committer.message_count()
            case Respond():
                step = StepInfo(step_id=new_id("stp"), index=self._committer.step_count)
                await self._output.respond(
                    decision.response,
                    outcome=decision.outcome,
                    reason=decision.reason,
                    request=episode.defaults,
                    step=step,
                )
            case Complete():
                await self._committer.finish(
                    status="completed", outcome="completed", reason=decision.reason, message=None
                )
            case Fail():
                await self._output.fail(decision.reason, decision.message)

    def _operation_input(self) -> Any:
        source = self._run.input
        if self._run.initiator == "trigger" and "trigger" in source:
            return source["trigger"]
        return {k: v for k, v in source.items() if k != "suspends"}

    async def _latest_user_message(self) -> LifecycleMessage | None:
        """The user message this operation appended (send only)."""
        if self._run.operation != "send":
            return None
        queued = self._committer.input.get("message")
        message_id = self._committer.input.get("message_id") or (
            queued.get("id") if isinstance(queued, dict) else None
        )
        if not isinstance(message_id, str):
            return None
        found = await self._services.store.get_messages(self._scope, self._thread_id, [message_id])
        return lifecycle_message_from_record(found[0]) if found else None

    # ---- resolve_model_context ------------------------------------------------

    async def resolve_model_context(self, step: StepInfo) -> tuple[int, list[ModelMessage]]:
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
            # A base some layer passed down replaces the durable context (RMC-03).
            return list(base) if base is not None else list(leaf)

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

    async def prepare_model_step(
        self, step: StepInfo, context: list[ModelMessage], anchor: int
    ) -> ModelStepRequest:
        """The step's effective request: episode defaults + context + overlay + step patches."""
        episode = self.episode
        if episode.overlay and anchor > episode.overlay_anchor:
            steered, _ = await self._committer.steered_since(episode.overlay_anchor)
            if steered:
                episode.overlay = []  # steering drops the model-only overlay (AS-04)
        episode.overlay_anchor = anchor
        # The cached context keeps what it knows of its messages' reasoning (see
        # prune_reasoning) when the overlay follows it.
        messages = (
            context.plus(episode.overlay)
            if isinstance(context, ContextMessages)
            else [*context, *episode.overlay]
        )
        request = replace(episode.defaults, step_index=step.index, messages=messages)
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
                await self._output.respond(
                    decision.response,
                    outcome=decision.outcome,
                    reason=decision.reason,
                    request=request,
                    step=step,
                )
            case Block():
                await self._output.block(decision.reason, decision.response, request, step)
        raise InvalidDecision("prepare_model_step", "prepare_model_step", repr(decision))

    # ---- around_model_call --------------------------------------------------------

    async def model_call(self, request: ModelStepRequest) -> CalledModel:
        """around_model_call down to the provider: the step stream and its request."""
        return await self._caller.call(request)

    # ---- transform_step_stream and reduction --------------------------------------

    async def stream_step(
        self,
        source: AsyncIterator[StepStreamChunk],
        request: ModelStepRequest,
        step: StepInfo,
        *,
        anchor: int,
    ) -> StepResult:
        """Pass a step stream through the output policy; reduce and publish it (TSS-*)."""
        return await self._output.stream(source, request, step, anchor=anchor)

    async def abort_step(self, result: StepResult) -> NoReturn:
        """abort(): nothing of the partial step is committed unless replaced (TSS-04)."""
        await self._output.abort(result)

    # ---- tools and after_step ---------------------------------------------------------

    def tool_hooks(self, step: StepInfo) -> BoundToolHooks | None:
        """before_tool_call / after_tool_result bound to ``step`` (None without them)."""
        if self._hooks is None or not self._has & {"before_tool_call", "after_tool_result"}:
            return None
        return BoundToolHooks(self._hooks, phases=self._has, base=self._base, step=step)

    async def after_step(
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

    def apply_overlay(self, decision: NextStep | Complete | None) -> None:
        if not isinstance(decision, NextStep):
            return
        episode = self.episode
        if decision.replace_model_messages is not None:
            episode.overlay = list(decision.replace_model_messages)
        if decision.append_model_messages:
            episode.overlay = [*episode.overlay, *decision.append_model_messages]


def _model_messages(value: Any, where: str) -> list[ModelMessage]:
    if not isinstance(value, list) or not all(isinstance(m, _MODEL_MESSAGES) for m in value):
        raise InvalidDecision(where, where, "expected a list of model messages")
    return value


__all__ = ["Episode", "HookPipeline", "StepResult"]
