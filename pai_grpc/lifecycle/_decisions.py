"""Hook results: small tagged dataclasses, matched with ``match``.

Each phase returns one of its decisions (or ``None``: no decision).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from pai_grpc.domain import JsonObject, JsonValue, MessagePart, ModelMessage
from pai_grpc.lifecycle._patches import ModelStepPatch, RunPatch


@dataclass(frozen=True)
class AssistantResponse:
    """An assistant message authored by a hook (it still passes the output policy)."""

    parts: list[MessagePart]
    metadata: JsonObject = field(default_factory=dict)

    @classmethod
    def text(cls, text: str) -> AssistantResponse:
        """A plain-text response."""
        from pai_grpc.domain import TextPart

        return cls(parts=[TextPart(text=text)])


# ---- prepare_run --------------------------------------------------------------


@dataclass(frozen=True)
class Continue:
    """Go on (with an optional patch where the phase takes one)."""

    patch: RunPatch | ModelStepPatch | None = None


@dataclass(frozen=True)
class Respond:
    """Commit this assistant response and complete the run without calling the model."""

    response: AssistantResponse
    outcome: Literal["completed", "blocked"] = "completed"
    reason: str | None = None


@dataclass(frozen=True)
class Complete:
    """Complete the run (prepare_run: without a message; after_step: deliberately)."""

    reason: str | None = None


@dataclass(frozen=True)
class Fail:
    """Fail the run without pretending the agent answered."""

    reason: str
    message: str | None = None


@dataclass(frozen=True)
class Block:
    """Stop the run as a structured policy block (optionally with a response)."""

    reason: str
    response: AssistantResponse | None = None


#: What prepare_run may return (``None``: carry on unchanged).
PrepareRunResult: TypeAlias = Continue | Respond | Complete | Fail
#: What prepare_model_step may return (``None``: carry on unchanged).
PrepareModelStepResult: TypeAlias = Continue | Respond | Block


# ---- tool hooks -------------------------------------------------------------


@dataclass(frozen=True)
class ReplaceInput:
    """Continue with replaced tool input."""

    input: JsonValue


@dataclass(frozen=True)
class Skip:
    """Skip execution/routing and use this synthetic output."""

    output: JsonValue


@dataclass(frozen=True)
class Reject:
    """Reject the call with a model-visible error."""

    message: str


@dataclass(frozen=True)
class ReplaceOutput:
    """Replace a successful tool output before the model sees it."""

    output: JsonValue


@dataclass(frozen=True)
class ReplaceMessage:
    """Replace the model-visible error/rejection message."""

    message: str


#: What before_tool_call may return (``None``: run the tool as called).
BeforeToolCallResult: TypeAlias = Continue | ReplaceInput | Skip | Reject
#: What after_tool_result may return (``None``: keep the result).
AfterToolResultResult: TypeAlias = Continue | ReplaceOutput | ReplaceMessage


# ---- after_step ---------------------------------------------------------------


@dataclass(frozen=True)
class NextStep:
    """Request another step; optionally change the model-only overlay."""

    append_model_messages: list[ModelMessage] | None = None
    replace_model_messages: list[ModelMessage] | None = None


#: What after_step may return (``None``: the runtime's own transition).
AfterStepResult: TypeAlias = NextStep | Complete


# ---- history rewrites ---------------------------------------------------------


@dataclass(frozen=True)
class HistoryRewritePatch:
    """Sparse metadata patches committed in the rewrite's transaction."""

    metadata: JsonObject | None = None
    private_metadata: JsonObject | None = None


# ---- transform_step_stream ----------------------------------------------------


@dataclass(frozen=True)
class StepAbort:
    """A controlled policy abort of the current step."""

    reason: str
    outcome: Literal["blocked", "failed"] = "blocked"
    message: str | None = None
    replacement: AssistantResponse | None = None
