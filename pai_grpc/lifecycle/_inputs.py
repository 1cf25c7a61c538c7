"""One input dataclass per phase (fields can be added without breaking hooks)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pai_grpc.domain import (
    DataChunk,
    FinishReason,
    JsonObject,
    JsonValue,
    LifecycleMessage,
    ModelMessage,
    StepStreamChunk,
    ToolCallChunk,
    Usage,
    Visibility,
)
from pai_grpc.lifecycle._decisions import StepAbort
from pai_grpc.lifecycle._patches import ModelStepRequest

if TYPE_CHECKING:
    from pai_grpc.domain import ToolEntry
    from pai_grpc.lifecycle._protocols import HistoryFacade, RunFacade, ThreadFacade


@dataclass(frozen=True)
class StepInfo:
    """The step a hook runs in."""

    step_id: str
    index: int


@dataclass
class LifecycleBase:
    """What every hook receives."""

    run: RunFacade
    thread: ThreadFacade
    runtime_context: Any = None
    #: Set when the run is cancelled or the episode stops.
    signal: Any = None


@dataclass
class PrepareRunInput(LifecycleBase):
    """prepare_run: the operation was accepted and the run created."""

    latest_user_message: LifecycleMessage | None = None
    #: The operation input that created or resumed this run.
    input: JsonValue = None


@dataclass
class ResolveModelContextInput(LifecycleBase):
    """resolve_model_context: choose the durable/base messages of one step."""

    step: StepInfo | None = None
    history: HistoryFacade | None = None


#: next() / next(base) of resolve_model_context.
ContextNext = Callable[..., Awaitable[list[ModelMessage]]]


@dataclass
class PrepareModelStepInput(LifecycleBase):
    """prepare_model_step: shape one step (ephemeral patches)."""

    step: StepInfo | None = None
    input: ModelStepRequest | None = None


@dataclass
class ModelStepStreamResult:
    """What around_model_call returns: the step's chunk stream."""

    stream: AsyncIterator[StepStreamChunk]


#: next() / next(patch) of around_model_call.
ModelCallNext = Callable[..., Awaitable[ModelStepStreamResult]]


class UiDataWriter:
    """uiData.write(): the only application-data path of transform_step_stream (TSS-02)."""

    def __init__(self, write: Callable[[DataChunk], None]) -> None:
        self._write = write

    def write(self, chunk: DataChunk) -> None:
        """Emit a registered data chunk (validated against its schema)."""
        self._write(chunk)


@dataclass
class TransformStepStreamInput(LifecycleBase):
    """transform_step_stream: the canonical output transform."""

    step: StepInfo | None = None
    stream: AsyncIterator[StepStreamChunk] | None = None
    #: The request of the attempt whose stream is transformed, as the provider
    #: received it: after around_model_call patches and reasoning pruning. (For a
    #: hook-authored response, the step's request; nothing was sent.)
    input: ModelStepRequest | None = None
    ui_data: UiDataWriter | None = None
    #: abort(StepAbort): stop the step deliberately (raises; never returns).
    abort: Callable[[StepAbort], Awaitable[Any]] | None = None


@dataclass(frozen=True)
class ToolInfo:
    """A tool as hooks see it."""

    name: str
    source: Literal["backend", "client", "mcp", "subagent"]
    description: str = ""


@dataclass
class ToolResult:
    """A final tool result (TH-03)."""

    status: Literal["output-available", "output-error"]
    output: JsonValue = None
    error: JsonValue = None
    message: str | None = None
    reason: str | None = None
    source: Literal[
        "execute", "skip", "resume", "client", "manual", "reject", "throw", "fail", "cancel",
        "recovery",
    ] = "execute"  # fmt: skip


@dataclass
class BeforeToolCallInput(LifecycleBase):
    """before_tool_call: a validated call before execution, routing or suspension."""

    step: StepInfo | None = None
    tool: ToolInfo | None = None
    tool_call_id: str = ""
    entry: ToolEntry | None = None
    suspend_history: list[JsonValue] = field(default_factory=list)
    input: JsonValue = None


@dataclass
class AfterToolResultInput(BeforeToolCallInput):
    """after_tool_result: any final result before the model sees it."""

    result: ToolResult | None = None


@dataclass(frozen=True)
class StepSummary:
    """An assembled step, as after_step sees it (it cannot rewrite the message)."""

    step_id: str
    index: int
    message: LifecycleMessage
    finish_reason: FinishReason | None
    provider_metadata: JsonObject | None = None
    usage: Usage | None = None
    tool_calls: list[ToolCallChunk] = field(default_factory=list)


@dataclass
class AfterStepInput(LifecycleBase):
    """after_step: after the step is assembled, before its transition commits."""

    step: StepSummary | None = None
    #: The effective request of the completed provider call, as the provider
    #: received it: after every around_model_call patch (model, instructions,
    #: settings, tools, messages) and reasoning pruning, so completion policy,
    #: cost accounting and telemetry see the route actually taken (ModelFallback
    #: included). The attempt is the one whose stream around_model_call returned;
    #: a newly wrapped stream after several attempts reports the latest attempt
    #: with its tools narrowed to those every attempt advertised (TV-05).
    request: ModelStepRequest | None = None


@dataclass(frozen=True)
class VisibilityChange:
    """One message's complete visibility before and after a rewrite."""

    message_id: str
    before: Visibility
    after: Visibility


@dataclass(frozen=True)
class RegenerateRewrite:
    """A regeneration: the target and the chronological retained/removed ids."""

    target_message_id: str
    retained_message_ids: tuple[str, ...]
    removed_message_ids: tuple[str, ...]
    before_version: int
    kind: Literal["regenerate"] = "regenerate"
    after_version: int | None = None


@dataclass(frozen=True)
class VisibilityRewrite:
    """A visibility rewrite: every changed message's complete before/after."""

    changes: tuple[VisibilityChange, ...]
    before_version: int
    kind: Literal["visibility"] = "visibility"
    after_version: int | None = None


#: The rewrite a history-rewrite hook sees: a regenerate or a visibility change.
HistoryRewrite = RegenerateRewrite | VisibilityRewrite


@dataclass
class PrepareHistoryRewriteInput:
    """prepare_history_rewrite: before a rewrite commits (deterministic, no side effects)."""

    thread_id: str
    rewrite: HistoryRewrite
    metadata: JsonObject
    private_metadata: JsonObject
    runtime_context: Any = None


@dataclass
class HistoryRewrittenInput:
    """history_rewritten: after commit (best effort)."""

    thread_id: str
    rewrite: HistoryRewrite
    runtime_context: Any = None


__all__ = [
    "AfterStepInput",
    "AfterToolResultInput",
    "BeforeToolCallInput",
    "ContextNext",
    "HistoryRewrite",
    "HistoryRewrittenInput",
    "LifecycleBase",
    "ModelCallNext",
    "ModelStepStreamResult",
    "PrepareHistoryRewriteInput",
    "PrepareModelStepInput",
    "PrepareRunInput",
    "RegenerateRewrite",
    "ResolveModelContextInput",
    "StepInfo",
    "StepSummary",
    "ToolInfo",
    "ToolResult",
    "TransformStepStreamInput",
    "UiDataWriter",
    "VisibilityChange",
    "VisibilityRewrite",
]
