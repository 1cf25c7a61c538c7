"""Runs, pending actions and run events."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal, TypeAlias

from pydantic import Field

from pai_grpc.domain._base import DomainModel, JsonObject, JsonValue
from pai_grpc.domain._chunks import StepStreamChunk, Usage
from pai_grpc.domain._threads import Message

RunStatus: TypeAlias = Literal["queued", "running", "waiting", "completed", "failed", "cancelled"]
RunOutcome: TypeAlias = Literal["completed", "blocked", "failed", "cancelled"]
RunInitiator: TypeAlias = Literal["send", "trigger", "regenerate"]
RunOperation: TypeAlias = Literal["send", "trigger", "regenerate", "resume"]
PendingActionKind: TypeAlias = Literal["client_tool", "approval", "data"]
PendingActionStatus: TypeAlias = Literal["open", "resolved", "cancelled"]

TERMINAL_RUN_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


class RunExecution(DomainModel):
    """The current execution episode of a run."""

    operation: RunOperation
    started_at: datetime | None = None


class RunError(DomainModel):
    """Why a run failed."""

    reason: str
    message: str = ""


class HookFailure(DomainModel):
    """A hook skipped because it failed open."""

    plugin: str
    phase: str
    reason: str
    count: int = 1


class Run(DomainModel):
    """A durable run as clients see it (never private metadata)."""

    id: str
    thread_id: str
    status: RunStatus
    outcome: RunOutcome | None = None
    reason: str | None = None
    initiator: RunInitiator
    started_at: datetime | None = None
    execution: RunExecution
    metadata: JsonObject = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    step_count: int = 0
    attempts: int = 0
    error: RunError | None = None
    hook_failures: list[HookFailure] = Field(default_factory=list)
    last_seq: int = 0
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None = None

    @property
    def is_terminal(self) -> bool:
        """Whether the run has ended."""
        return self.status in TERMINAL_RUN_STATUSES


class RunHandle(DomainModel):
    """What Send/Trigger/Regenerate return once the work is committed or queued."""

    run_id: str
    thread_id: str
    status: RunStatus
    message_id: str | None = None


class PendingAction(DomainModel):
    """Something a waiting run needs from outside."""

    id: str
    run_id: str
    thread_id: str
    kind: PendingActionKind
    status: PendingActionStatus
    tool_call_id: str
    tool_name: str
    input: JsonValue = None
    request: JsonValue = None
    created_at: datetime


class ChunkEvent(DomainModel):
    """A canonical stream chunk."""

    kind: Literal["chunk"] = "chunk"
    chunk: StepStreamChunk


class StatusEvent(DomainModel):
    """A run status transition."""

    kind: Literal["status"] = "status"
    status: RunStatus
    outcome: RunOutcome | None = None
    reason: str | None = None
    error: RunError | None = None


class MessageEvent(DomainModel):
    """A message the run committed."""

    kind: Literal["message"] = "message"
    message: Message


class PendingActionEvent(DomainModel):
    """A pending action the run opened."""

    kind: Literal["pending_action"] = "pending_action"
    action: PendingAction


class CompactedEvent(DomainModel):
    """Stands in for deltas retention removed from a terminal run's log.

    Carries the seq ``last_seq`` in the log: a reader resuming anywhere inside
    ``[first_seq, last_seq]`` receives it next.
    """

    kind: Literal["compacted"] = "compacted"
    first_seq: int
    last_seq: int
    removed_events: int


#: What a hook call came to (see :class:`HookCallEvent`).
HookCallOutcome: TypeAlias = Literal["ok", "error", "failed_open", "timeout"]


class HookCallEvent(DomainModel):
    """One lifecycle hook call of a run's execution, for the run's timeline.

    ``decision`` names the kind of decision returned (``none``, ``continue``,
    ``next_step``, ``skip``, ...; ``result`` for middleware phases), never its
    content; it is empty when the call failed.
    """

    kind: Literal["hook_call"] = "hook_call"
    phase: str
    hook: str
    outcome: HookCallOutcome
    decision: str = ""
    duration_ms: float = 0.0
    step: int | None = None
    reason: str | None = None


RunEventPayload: TypeAlias = Annotated[
    ChunkEvent | StatusEvent | MessageEvent | PendingActionEvent | CompactedEvent | HookCallEvent,
    Field(discriminator="kind"),
]


class RunEvent(DomainModel):
    """One entry of a run's event log."""

    seq: int
    time: datetime
    payload: RunEventPayload


@dataclass(frozen=True)
class Resolution:
    """The answer to a pending action: a client tool's result, an approval, or data."""

    kind: str
    output: JsonValue = None
    error_text: str | None = None
    approved: bool | None = None
    reason: str | None = None
    data: JsonValue = None

    def to_json(self) -> dict[str, JsonValue]:
        """The stored resolution (what the resumed tool receives)."""
        match self.kind:
            case "tool_result":
                if self.error_text is not None:
                    return {"error_text": self.error_text}
                return {"output": self.output}
            case "approval":
                return {"approved": bool(self.approved), "reason": self.reason}
            case _:
                return {"data": self.data}
