"""composeLifecycle: deterministic composition of lifecycle parts (CMPS-*).

* non-around hooks run left to right; value-transforming phases pass the
  patched value on (prepare_model_step input, stream, tool input, result);
  prepare_run and after_step accumulate decisions against the same input;
* resolve_model_context and around_model_call compose as middleware, the
  first part outermost;
* the first prepare_run / prepare_model_step that responds, blocks,
  completes or fails ends that path; the first before_tool_call that skips
  or rejects skips execution;
* a part that raises fails the run (the error names the part and phase).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from typing import Any, TypeVar

from pai_grpc.domain import ModelMessage, StepStreamChunk
from pai_grpc.errors import PaiError
from pai_grpc.lifecycle._decisions import (
    AfterStepResult,
    AfterToolResultResult,
    AssistantResponse,
    BeforeToolCallResult,
    Block,
    Complete,
    Continue,
    Fail,
    HistoryRewritePatch,
    NextStep,
    PrepareModelStepResult,
    PrepareRunResult,
    Reject,
    ReplaceInput,
    ReplaceMessage,
    ReplaceOutput,
    Respond,
    Skip,
)
from pai_grpc.lifecycle._errors import HookError, InvalidDecision
from pai_grpc.lifecycle._hook_calls import observe_hook_call, step_index
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
    ToolResult,
    TransformStepStreamInput,
)
from pai_grpc.lifecycle._lifecycle import AgentLifecycle, maybe_await
from pai_grpc.lifecycle._patches import (
    UNSET,
    ModelCallPatch,
    ModelStepPatch,
    ModelStepRequest,
    RunPatch,
    apply_patch,
    coerce_patch,
)
from pai_grpc.telemetry import current_run, tracing


def hook_name(part: AgentLifecycle, index: int) -> str:
    """A part's name for diagnostics."""
    return part.name or f"{type(part).__name__}#{index}"


class Effective:
    """Internal: a complete request handed down a middleware chain (never a user patch)."""

    __slots__ = ("request",)

    def __init__(self, request: ModelStepRequest) -> None:
        self.request = request


def _patches(decision: Continue) -> list[Any]:
    patch = decision.patch
    if patch is None:
        return []
    return list(patch) if isinstance(patch, list | tuple) else [patch]


class ComposedLifecycle(AgentLifecycle):
    """Parts composed by the rules above (nested compositions are flattened)."""

    parts: list[AgentLifecycle]

    def __init__(self, parts: list[AgentLifecycle]) -> None:
        flat: list[AgentLifecycle] = []
        for part in parts:
            flat.extend(part.parts if isinstance(part, ComposedLifecycle) else [part])
        self.parts = flat
        self.name = "+".join(hook_name(p, i) for i, p in enumerate(flat)) or "empty"

    def phases(self) -> frozenset[str]:
        """Every phase any part implements."""
        out: frozenset[str] = frozenset()
        for part in self.parts:
            out |= part.phases()
        return out

    def _with(self, phase: str) -> list[tuple[str, AgentLifecycle]]:
        return [(hook_name(p, i), p) for i, p in enumerate(self.parts) if phase in p.phases()]

    # ---- prepare_run: accumulate against the same input ---------------------

    async def prepare_run(self, input: PrepareRunInput) -> PrepareRunResult | None:
        """Left to right; patches accumulate; the first respond/complete/fail ends it."""
        patches: list[RunPatch] = []
        for name, part in self._with("prepare_run"):
            decision = await _call(name, "prepare_run", part.prepare_run(input), input)
            match decision:
                case None:
                    continue
                case Continue():
                    for patch in _patches(decision):
                        patches.append(_coerce(patch, RunPatch, name, "prepare_run"))
                    _check_max_steps(name, patches)
                case Respond() | Complete() | Fail():
                    return _checked(name, "prepare_run", decision)
                case _:
                    raise InvalidDecision(name, "prepare_run", f"{decision!r}")
        return Continue(patch=patches) if patches else None  # type: ignore[arg-type]

    # ---- resolve_model_context: middleware, first part outermost -----------

    async def resolve_model_context(
        self, input: ResolveModelContextInput, next: ContextNext
    ) -> list[ModelMessage]:
        """A is outer, b inner; next() is memoised; next(base) replaces the leaf.

        The leaf is ``next``, what lies below this composition: the runtime's
        default context, or, in a plugin, the runtime's own inner layers over
        the wire. A base is handed down to it (``next(base)``) rather than
        returned here, so inner layers below the composition run with it too.
        """
        parts = self._with("resolve_model_context")

        async def layer(i: int, leaf: ContextNext) -> list[ModelMessage]:
            if i == len(parts):
                return list(await leaf())
            name, part = parts[i]
            memo: list[list[ModelMessage]] = []

            async def nxt(base: list[ModelMessage] | None = None) -> list[ModelMessage]:
                if base is not None:
                    fixed = list(base)

                    async def base_leaf(
                        inner: list[ModelMessage] | None = None,
                    ) -> list[ModelMessage]:
                        return list(await leaf(list(inner) if inner is not None else fixed))

                    return await layer(i + 1, base_leaf)
                if not memo:
                    memo.append(await layer(i + 1, leaf))
                return list(memo[0])

            result = await _call(
                name, "resolve_model_context", part.resolve_model_context(input, nxt), input
            )
            if not isinstance(result, list):
                raise InvalidDecision(name, "resolve_model_context", "expected a list of messages")
            return result

        return await layer(0, next)

    # ---- history rewrites ---------------------------------------------------

    async def prepare_history_rewrite(
        self, input: PrepareHistoryRewriteInput
    ) -> HistoryRewritePatch | None:
        """Every part sees the same input; patches merge shallowly in order."""
        metadata: dict[str, Any] | None = None
        private: dict[str, Any] | None = None
        for name, part in self._with("prepare_history_rewrite"):
            patch = await _call(
                name, "prepare_history_rewrite", part.prepare_history_rewrite(input)
            )
            if patch is None:
                continue
            if not isinstance(patch, HistoryRewritePatch):
                raise InvalidDecision(name, "prepare_history_rewrite", f"{patch!r}")
            if patch.metadata is not None:
                metadata = {**(metadata or {}), **patch.metadata}
            if patch.private_metadata is not None:
                private = {**(private or {}), **patch.private_metadata}
        if metadata is None and private is None:
            return None
        return HistoryRewritePatch(metadata=metadata, private_metadata=private)

    async def history_rewritten(self, input: HistoryRewrittenInput) -> None:
        """Every part runs; failures are collected and raised together."""
        errors: list[HookError] = []
        for name, part in self._with("history_rewritten"):
            try:
                await _call(name, "history_rewritten", part.history_rewritten(input))
            except HookError as e:
                errors.append(e)
        if errors:
            raise ExceptionGroup("history_rewritten hooks failed", errors)

    # ---- prepare_model_step: patched input flows on ------------------------

    async def prepare_model_step(
        self, input: PrepareModelStepInput
    ) -> PrepareModelStepResult | None:
        """Left to right, each sees the input patched by the earlier ones."""
        patches: list[ModelStepPatch] = []
        current = input
        for name, part in self._with("prepare_model_step"):
            decision = await _call(
                name, "prepare_model_step", part.prepare_model_step(current), current
            )
            match decision:
                case None:
                    continue
                case Continue():
                    for raw in _patches(decision):
                        patch = _coerce(raw, ModelStepPatch, name, "prepare_model_step")
                        patches.append(patch)
                        assert current.input is not None
                        current = replace(current, input=apply_patch(current.input, patch))
                case Respond() | Block():
                    return _checked(name, "prepare_model_step", decision)
                case _:
                    raise InvalidDecision(name, "prepare_model_step", f"{decision!r}")
        return Continue(patch=patches) if patches else None  # type: ignore[arg-type]

    # ---- around_model_call: wrappers, first outermost ----------------------

    async def around_model_call(
        self, request: ModelStepRequest, next: ModelCallNext
    ) -> ModelStepStreamResult:
        """Each wrapper gets the complete request after outer patches."""
        parts = self._with("around_model_call")

        async def layer(i: int, req: ModelStepRequest) -> ModelStepStreamResult:
            if i == len(parts):
                return await next(Effective(req))
            name, part = parts[i]

            async def nxt(patch: Any = None) -> ModelStepStreamResult:
                effective = req
                if patch is not None:
                    if isinstance(patch, ModelStepRequest | Effective):
                        raise InvalidDecision(
                            name,
                            "around_model_call",
                            "next() takes a sparse patch, not the request itself",
                        )
                    effective = apply_patch(
                        req, _coerce(patch, ModelCallPatch, name, "around_model_call")
                    )
                return await layer(i + 1, effective)

            result = await _call(name, "around_model_call", part.around_model_call(req, nxt))
            if not isinstance(result, ModelStepStreamResult):
                raise InvalidDecision(name, "around_model_call", "expected ModelStepStreamResult")
            return result

        return await layer(0, request)

    # ---- transform_step_stream: a pipeline ----------------------------------

    def transform_step_stream(
        self, input: TransformStepStreamInput
    ) -> AsyncIterator[StepStreamChunk]:
        """Chunks flow through every part, left to right."""
        stream = input.stream
        assert stream is not None
        for name, part in self._with("transform_step_stream"):
            stream = _guard_stream(name, part.transform_step_stream(replace(input, stream=stream)))
        return stream

    # ---- tool hooks ---------------------------------------------------------

    async def before_tool_call(self, input: BeforeToolCallInput) -> BeforeToolCallResult | None:
        """Replaced input flows on; the first skip or reject ends it."""
        current = input
        replaced = False
        for name, part in self._with("before_tool_call"):
            decision = await _call(
                name, "before_tool_call", part.before_tool_call(current), current
            )
            match decision:
                case None | Continue():
                    continue
                case ReplaceInput():
                    current = replace(current, input=decision.input)
                    replaced = True
                case Skip() | Reject():
                    return decision
                case _:
                    raise InvalidDecision(name, "before_tool_call", f"{decision!r}")
        return ReplaceInput(current.input) if replaced else None

    async def after_tool_result(self, input: AfterToolResultInput) -> AfterToolResultResult | None:
        """Replaced results flow on to later parts."""
        current = input
        final: AfterToolResultResult | None = None
        for name, part in self._with("after_tool_result"):
            decision = await _call(
                name, "after_tool_result", part.after_tool_result(current), current
            )
            match decision:
                case None | Continue():
                    continue
                case ReplaceOutput():
                    assert current.result is not None
                    current = replace(
                        current,
                        result=ToolResult(
                            status="output-available",
                            output=decision.output,
                            source=current.result.source,
                        ),
                    )
                    final = decision
                case ReplaceMessage():
                    assert current.result is not None
                    current = replace(
                        current, result=replace(current.result, message=decision.message)
                    )
                    final = decision
                case _:
                    raise InvalidDecision(name, "after_tool_result", f"{decision!r}")
        return final

    # ---- after_step: accumulate against the same input ----------------------

    async def after_step(self, input: AfterStepInput) -> AfterStepResult | None:
        """Decisions accumulate: a complete wins; next-step overlays merge in order."""
        merged: NextStep | None = None
        completed: Complete | None = None
        for name, part in self._with("after_step"):
            decision = await _call(name, "after_step", part.after_step(input), input)
            match decision:
                case None:
                    continue
                case Complete():
                    completed = completed or decision
                case NextStep():
                    merged = _merge_next(merged, decision)
                case _:
                    raise InvalidDecision(name, "after_step", f"{decision!r}")
        return completed or merged


def _merge_next(a: NextStep | None, b: NextStep) -> NextStep:
    if a is None:
        return b
    if b.replace_model_messages is not None:
        return b
    base_replace = a.replace_model_messages
    appended = [*(a.append_model_messages or []), *(b.append_model_messages or [])]
    return NextStep(append_model_messages=appended, replace_model_messages=base_replace)


async def _call(name: str, phase: str, result: Awaitable[Any] | Any, input: Any = None) -> Any:
    run = current_run.get()  # None outside a run's execution (history rewrites)
    started = time.perf_counter()
    with (
        tracing.hook_span(phase, name),
        observe_hook_call(name, phase, step_index(input)) as observed,
    ):
        try:
            return observed.returned(await maybe_await(result))
        except PaiError:
            # Our own errors (an inner hook's failure, a model error through next()) pass as-is.
            raise
        except Exception as e:
            if run is not None:
                run.metrics.hook_failures.add(
                    1, {"plugin": name, "phase": phase, "reason": HookError.default_reason}
                )
            raise HookError(name, phase, e) from e
        finally:
            if run is not None:
                run.metrics.hook_duration.record(
                    time.perf_counter() - started, {"plugin": name, "phase": phase}
                )


def _check_max_steps(name: str, patches: list[RunPatch]) -> None:
    for patch in patches:
        steps = patch.max_steps
        if steps is not UNSET and (type(steps) is not int or steps < 1):
            raise InvalidDecision(
                name, "prepare_run", f"max_steps must be a positive int: {steps!r}"
            )


_D = TypeVar("_D", bound=Respond | Complete | Fail | Block)


def _checked(name: str, phase: str, decision: _D) -> _D:
    """A terminal decision, checked here so that a bad one names its hook."""
    needs_response = isinstance(decision, Respond) or (
        isinstance(decision, Block) and decision.response is not None
    )
    if needs_response and not isinstance(getattr(decision, "response", None), AssistantResponse):
        raise InvalidDecision(name, phase, "the response must be an AssistantResponse")
    if isinstance(decision, Respond) and decision.outcome not in ("completed", "blocked"):
        raise InvalidDecision(name, phase, f"unknown respond outcome {decision.outcome!r}")
    if isinstance(decision, Fail | Block) and not (
        isinstance(decision.reason, str) and decision.reason
    ):
        raise InvalidDecision(name, phase, "a reason (non-empty string) is required")
    return decision


def _coerce(patch: Any, kind: type[Any], name: str, phase: str) -> Any:
    try:
        return coerce_patch(patch, kind, where=f"{name}.{phase}")
    except Exception as e:
        raise InvalidDecision(name, phase, str(e)) from e


async def _guard_stream(
    name: str, stream: AsyncIterator[StepStreamChunk]
) -> AsyncIterator[StepStreamChunk]:
    from pai_grpc.lifecycle._stream import AbortStep

    try:
        async for chunk in stream:
            yield chunk
    except (AbortStep, PaiError):
        # A controlled abort, or an upstream (provider/runtime) error passing through.
        raise
    except Exception as e:
        raise HookError(name, "transform_step_stream", e) from e


def compose_lifecycle(*parts: AgentLifecycle) -> AgentLifecycle:
    """Compose lifecycle parts (see the module docstring for the rules)."""
    return ComposedLifecycle(list(parts))


__all__ = ["ComposedLifecycle", "Effective", "compose_lifecycle", "hook_name"]
