"""AgentLifecycle: the ten phases, each optional.

Subclass and override the phases you need, or build one from functions with
:func:`lifecycle`. Hooks may be sync or async. Hooks return structured
decisions; durable changes go through the runtime-owned thread facade (LC-01).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from pai_grpc.domain import ModelMessage, StepStreamChunk
from pai_grpc.lifecycle._decisions import (
    AfterStepResult,
    AfterToolResultResult,
    BeforeToolCallResult,
    HistoryRewritePatch,
    PrepareModelStepResult,
    PrepareRunResult,
)
from pai_grpc.lifecycle._inputs import (
    AfterStepInput,
    AfterToolResultInput,
    BeforeToolCallInput,
    ContextNext,
    HistoryRewrittenInput,
    ModelCallNext,
    ModelStepStreamResult,
    PrepareHistoryRewriteInput,
    PrepareModelStepInput,
    PrepareRunInput,
    ResolveModelContextInput,
    TransformStepStreamInput,
)
from pai_grpc.lifecycle._patches import ModelStepRequest

#: The phases, in snake_case, in pipeline order.
PHASES = (
    "prepare_run",
    "resolve_model_context",
    "prepare_history_rewrite",
    "history_rewritten",
    "prepare_model_step",
    "around_model_call",
    "transform_step_stream",
    "before_tool_call",
    "after_tool_result",
    "after_step",
)

T = TypeVar("T")


async def maybe_await(value: Awaitable[T] | T) -> T:
    """Await ``value`` when a hook returned an awaitable (hooks may be sync)."""
    if inspect.isawaitable(value):
        return await value
    return value


#: Class -> the phases it overrides (see :meth:`AgentLifecycle.phases`).
_PHASES_OF: weakref.WeakKeyDictionary[type, frozenset[str]] = weakref.WeakKeyDictionary()


class AgentLifecycle:
    """Lifecycle hooks of an agent; every phase is optional.

    ``prefetch_model_context`` matters only when the lifecycle is served as a
    remote plugin (:func:`pai_grpc.plugin_sdk.serve_plugin`). Set it to True
    when :meth:`resolve_model_context` always begins with ``await next()`` (no
    base): the runtime then evaluates next() before calling the plugin and
    sends the result along, so the hook's first next() needs no round trip.
    next() stays memoised and ``next(base)`` works as before, but the inner
    layers have then already run once for the prefetched next(), so leave it
    False for a resolver that may answer without next() or only calls
    ``next(base)``.
    """

    name: str | None = None
    #: Served as a plugin, the runtime prefetches next() for resolve_model_context.
    prefetch_model_context: bool = False

    def phases(self) -> frozenset[str]:
        """The phases this lifecycle implements."""
        # A class's phases never change; composition asks on every hook call.
        cls = type(self)
        found = _PHASES_OF.get(cls)
        if found is None:
            found = _PHASES_OF[cls] = frozenset(
                p for p in PHASES if getattr(cls, p, None) is not getattr(AgentLifecycle, p)
            )
        return found

    async def prepare_run(self, input: PrepareRunInput) -> PrepareRunResult | None:
        """Prepare or short-circuit one execution episode before model steps start."""
        return None

    async def resolve_model_context(
        self, input: ResolveModelContextInput, next: ContextNext
    ) -> list[ModelMessage]:
        """Resolve durable/base context for one model step, as lazy middleware."""
        return await next()

    async def prepare_history_rewrite(
        self, input: PrepareHistoryRewriteInput
    ) -> HistoryRewritePatch | None:
        """Prepare metadata patches that commit atomically with a history rewrite."""
        return None

    async def history_rewritten(self, input: HistoryRewrittenInput) -> None:
        """Observe a committed history rewrite (best effort)."""
        return None

    async def prepare_model_step(
        self, input: PrepareModelStepInput
    ) -> PrepareModelStepResult | None:
        """Prepare one model step (ephemeral patches)."""
        return None

    async def around_model_call(
        self, request: ModelStepRequest, next: ModelCallNext
    ) -> ModelStepStreamResult:
        """Wrap one model provider call.

        ``next()`` keeps the request; ``next(patch)`` takes a sparse
        :class:`ModelCallPatch`, a plain :class:`ModelStepPatch` or a dict
        (runtime-owned fields are rejected). Return one attempt's result
        unchanged (or its stream in a new result) and that attempt's request
        is the step's effective request and its tool list decides what may
        execute; a newly wrapped stream after several successful next() calls
        cannot be traced, so only tools every attempt advertised may execute.
        """
        return await next()

    def transform_step_stream(
        self, input: TransformStepStreamInput
    ) -> AsyncIterator[StepStreamChunk]:
        """Transform the step stream; the result is canonical output.

        ``input.input`` is the request of the attempt whose stream this is, as
        the provider received it (after around_model_call patches and
        reasoning pruning).
        """
        assert input.stream is not None
        return input.stream

    async def before_tool_call(self, input: BeforeToolCallInput) -> BeforeToolCallResult | None:
        """Inspect, replace, skip or reject a tool call before it runs."""
        return None

    async def after_tool_result(self, input: AfterToolResultInput) -> AfterToolResultResult | None:
        """Inspect or replace any final tool result before the model sees it."""
        return None

    async def after_step(self, input: AfterStepInput) -> AfterStepResult | None:
        """Decide the transition after a step is assembled.

        ``input.request`` is the effective request of the completed provider
        call, as the provider received it (see :class:`AfterStepInput`).
        """
        return None


class _FunctionLifecycle(AgentLifecycle):
    """A lifecycle made of plain functions (sync or async)."""

    def __init__(self, name: str | None, hooks: dict[str, Callable[..., Any]]) -> None:
        unknown = sorted(set(hooks) - set(PHASES))
        if unknown:
            raise TypeError(f"unknown lifecycle phases {unknown}; the phases are {list(PHASES)}")
        self.name = name
        self._hooks = hooks

    def phases(self) -> frozenset[str]:
        """The phases given as functions."""
        return frozenset(self._hooks)

    async def prepare_run(self, input: PrepareRunInput) -> PrepareRunResult | None:
        """Call the prepare_run function."""
        fn = self._hooks.get("prepare_run")
        return await maybe_await(fn(input)) if fn else None

    async def resolve_model_context(
        self, input: ResolveModelContextInput, next: ContextNext
    ) -> list[ModelMessage]:
        """Call the resolve_model_context function."""
        fn = self._hooks.get("resolve_model_context")
        out: list[ModelMessage] = await maybe_await(fn(input, next)) if fn else await next()
        return out

    async def prepare_history_rewrite(
        self, input: PrepareHistoryRewriteInput
    ) -> HistoryRewritePatch | None:
        """Call the prepare_history_rewrite function."""
        fn = self._hooks.get("prepare_history_rewrite")
        return await maybe_await(fn(input)) if fn else None

    async def history_rewritten(self, input: HistoryRewrittenInput) -> None:
        """Call the history_rewritten function."""
        fn = self._hooks.get("history_rewritten")
        if fn:
            await maybe_await(fn(input))

    async def prepare_model_step(
        self, input: PrepareModelStepInput
    ) -> PrepareModelStepResult | None:
        """Call the prepare_model_step function."""
        fn = self._hooks.get("prepare_model_step")
        return await maybe_await(fn(input)) if fn else None

    async def around_model_call(
        self, request: ModelStepRequest, next: ModelCallNext
    ) -> ModelStepStreamResult:
        """Call the around_model_call function."""
        fn = self._hooks.get("around_model_call")
        out: ModelStepStreamResult = await maybe_await(fn(request, next)) if fn else await next()
        return out

    def transform_step_stream(
        self, input: TransformStepStreamInput
    ) -> AsyncIterator[StepStreamChunk]:
        """Call the transform_step_stream function."""
        fn = self._hooks.get("transform_step_stream")
        if fn is None:
            assert input.stream is not None
            return input.stream
        out: AsyncIterator[StepStreamChunk] = fn(input)
        return out

    async def before_tool_call(self, input: BeforeToolCallInput) -> BeforeToolCallResult | None:
        """Call the before_tool_call function."""
        fn = self._hooks.get("before_tool_call")
        return await maybe_await(fn(input)) if fn else None

    async def after_tool_result(self, input: AfterToolResultInput) -> AfterToolResultResult | None:
        """Call the after_tool_result function."""
        fn = self._hooks.get("after_tool_result")
        return await maybe_await(fn(input)) if fn else None

    async def after_step(self, input: AfterStepInput) -> AfterStepResult | None:
        """Call the after_step function."""
        fn = self._hooks.get("after_step")
        return await maybe_await(fn(input)) if fn else None


def lifecycle(name: str | None = None, **hooks: Callable[..., Any]) -> AgentLifecycle:
    """A lifecycle from functions, e.g. ``lifecycle("guard", prepare_run=check)``."""
    return _FunctionLifecycle(name, hooks)
