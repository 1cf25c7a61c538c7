"""Lifecycle hooks: the hook-author API.

* :class:`AgentLifecycle` (subclass it) and :func:`lifecycle` (functions as
  hooks); :func:`compose_lifecycle` runs several in order;
* the phase inputs (``PrepareRunInput`` ... ``HistoryRewrittenInput``) and what
  they carry (``StepInfo``, ``ToolInfo``, ``AbortSignal``, ...);
* the decisions each phase may return (``Respond``, ``Continue``, ``Block``,
  ...) and the patches they carry (``RunPatch``, ``ModelStepPatch``,
  ``ModelCallPatch``) over a ``ModelStepRequest``;
* the thread facade a hook writes through, as Protocols (``ThreadFacade``,
  ``RunFacade``, ``HistoryFacade``, ``TransactionFacade``), with the ``Page``
  it reads and the ``VersionConflict`` a compare-and-swap ``mutate()`` raises;
* errors (``HookError``, ``InvalidDecision``, ``FacadeClosed``,
  ``ContractViolation``, ``AbortStep``) and the agent's ``AgentContract``;
* the built-in hooks users configure (``Quota``, ``RecentWindow``,
  ``ContextCompactor``, ``RedactSecrets``, ``ModelFallback``).

The same API serves hooks in process and in a plugin process
(:mod:`pai_grpc.plugin_sdk`); nothing here loads storage or the runtime. The
runtime's own plumbing (composition internals, patch application, hook
reports) is in :mod:`pai_grpc.lifecycle.internal`.
"""

from pai_grpc.lifecycle._builtins import (
    DEFAULT_SECRET_PATTERNS,
    ModelFallback,
    Quota,
    RecentWindow,
    RedactSecrets,
)
from pai_grpc.lifecycle._compaction import ContextCompactor
from pai_grpc.lifecycle._compose import compose_lifecycle
from pai_grpc.lifecycle._contract import AgentContract, ContractViolation
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
    StepAbort,
)
from pai_grpc.lifecycle._errors import FacadeClosed, HookError, InvalidDecision, VersionConflict
from pai_grpc.lifecycle._inputs import (
    AfterStepInput,
    AfterToolResultInput,
    BeforeToolCallInput,
    ContextNext,
    HistoryRewrite,
    HistoryRewrittenInput,
    LifecycleBase,
    ModelCallNext,
    ModelStepStreamResult,
    PrepareHistoryRewriteInput,
    PrepareModelStepInput,
    PrepareRunInput,
    RegenerateRewrite,
    ResolveModelContextInput,
    StepInfo,
    StepSummary,
    ToolInfo,
    ToolResult,
    TransformStepStreamInput,
    UiDataWriter,
    VisibilityChange,
    VisibilityRewrite,
)
from pai_grpc.lifecycle._lifecycle import AgentLifecycle, lifecycle
from pai_grpc.lifecycle._patches import (
    ModelCallPatch,
    ModelStepPatch,
    ModelStepRequest,
    RunPatch,
)
from pai_grpc.lifecycle._protocols import (
    ContextProjection,
    Execution,
    HistoryFacade,
    Page,
    RunFacade,
    ThreadFacade,
    TransactionFacade,
    View,
)
from pai_grpc.lifecycle._signal import AbortSignal
from pai_grpc.lifecycle._stream import AbortStep

__all__ = [
    "DEFAULT_SECRET_PATTERNS",
    "AbortSignal",
    "AbortStep",
    "AfterStepInput",
    "AfterStepResult",
    "AfterToolResultInput",
    "AfterToolResultResult",
    "AgentContract",
    "AgentLifecycle",
    "AssistantResponse",
    "BeforeToolCallInput",
    "BeforeToolCallResult",
    "Block",
    "Complete",
    "ContextCompactor",
    "ContextNext",
    "ContextProjection",
    "Continue",
    "ContractViolation",
    "Execution",
    "FacadeClosed",
    "Fail",
    "HistoryFacade",
    "HistoryRewrite",
    "HistoryRewritePatch",
    "HistoryRewrittenInput",
    "HookError",
    "InvalidDecision",
    "LifecycleBase",
    "ModelCallNext",
    "ModelCallPatch",
    "ModelFallback",
    "ModelStepPatch",
    "ModelStepRequest",
    "ModelStepStreamResult",
    "NextStep",
    "Page",
    "PrepareHistoryRewriteInput",
    "PrepareModelStepInput",
    "PrepareModelStepResult",
    "PrepareRunInput",
    "PrepareRunResult",
    "Quota",
    "RecentWindow",
    "RedactSecrets",
    "RegenerateRewrite",
    "Reject",
    "ReplaceInput",
    "ReplaceMessage",
    "ReplaceOutput",
    "ResolveModelContextInput",
    "Respond",
    "RunFacade",
    "RunPatch",
    "Skip",
    "StepAbort",
    "StepInfo",
    "StepSummary",
    "ThreadFacade",
    "ToolInfo",
    "ToolResult",
    "TransactionFacade",
    "TransformStepStreamInput",
    "UiDataWriter",
    "VersionConflict",
    "View",
    "VisibilityChange",
    "VisibilityRewrite",
    "compose_lifecycle",
    "lifecycle",
]
