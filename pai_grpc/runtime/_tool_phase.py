"""The tool phases of a step: authority and validation, execution, suspension.

Each model-requested tool call is checked against the effective request's
tool list (a tool the request did not advertise never executes, TV-04) and
the tool's schema (invalid input becomes a model-visible tool error, TV-02).
Backend tools run concurrently where allowed; client tools and suspended
tools become pending actions and the run waits. Every final result is what
``after_tool_result`` sees (TH-03); the step's message carries the outcome.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pai_grpc.domain import (
    JsonValue,
    StepStreamChunk,
    ToolApproval,
    ToolApprovalRequestChunk,
    ToolCallChunk,
    ToolErrorChunk,
    ToolOutputDeniedChunk,
    ToolPart,
    ToolResultChunk,
    new_id,
)
from pai_grpc.tools import (
    InitialEntry,
    InvalidToolInput,
    ResumeEntry,
    Tool,
    ToolContext,
    ToolDenied,
    ToolEntry,
    ToolFailed,
    ToolSuspended,
    parse_input,
)
from storage import NewPendingAction

log = logging.getLogger("pai_grpc.tools")

ResultSource = Literal[
    "execute", "skip", "resume", "client", "manual", "reject", "throw", "fail", "cancel", "recovery"
]
#: Tool-part states that still wait for a result.
WAITING_STATES = ("input-available", "approval-requested", "approval-responded")


@dataclass
class ToolResult:
    """A final tool result, as ``after_tool_result`` hooks see it."""

    status: Literal["output-available", "output-error"]
    output: JsonValue = None
    error: JsonValue = None
    message: str | None = None
    source: ResultSource = "execute"


@dataclass
class ToolOutcome:
    """What the tool phase decided for one call."""

    part: ToolPart
    chunks: list[StepStreamChunk] = field(default_factory=list)
    pending: NewPendingAction | None = None
    #: Suspend bookkeeping kept in the run's input until the action is resolved.
    suspend: dict[str, Any] | None = None
    result: ToolResult | None = None


def _error(part: ToolPart, message: str, source: ResultSource) -> ToolOutcome:
    updated = part.model_copy(update={"state": "output-error", "error_text": message})
    return ToolOutcome(
        part=updated,
        chunks=[
            ToolErrorChunk(
                tool_call_id=part.tool_call_id,
                tool_name=part.tool_name,
                input=part.input,
                error_text=message,
            )
        ],
        result=ToolResult(status="output-error", message=message, source=source),
    )


def _output(part: ToolPart, output: JsonValue, source: ResultSource) -> ToolOutcome:
    updated = part.model_copy(update={"state": "output-available", "output": output})
    return ToolOutcome(
        part=updated,
        chunks=[
            ToolResultChunk(
                tool_call_id=part.tool_call_id,
                tool_name=part.tool_name,
                input=part.input,
                output=output,
            )
        ],
        result=ToolResult(status="output-available", output=output, source=source),
    )


def _denied(part: ToolPart, reason: str | None, approval_id: str) -> ToolOutcome:
    updated = part.model_copy(
        update={
            "state": "output-denied",
            "approval": ToolApproval(id=approval_id, approved=False, reason=reason),
        }
    )
    return ToolOutcome(
        part=updated,
        chunks=[ToolOutputDeniedChunk(tool_call_id=part.tool_call_id)],
        result=ToolResult(status="output-error", message=reason or "denied", source="resume"),
    )


def recovered(part: ToolPart) -> ToolOutcome:
    """The result of a call whose runner was lost mid-execution (source recovery)."""
    return _error(
        part,
        "the runner executing this tool was lost; it may or may not have completed",
        "recovery",
    )


class ToolPhase:
    """Runs the tool calls of one step for one run."""

    def __init__(
        self,
        *,
        run_id: str,
        thread_id: str,
        tools: dict[str, Tool],
        advertised: set[str],
        message_id: str,
    ) -> None:
        self._run_id = run_id
        self._thread_id = thread_id
        self._tools = tools
        self._advertised = advertised
        self._message_id = message_id

    async def run(self, calls: Sequence[tuple[ToolCallChunk, ToolPart]]) -> list[ToolOutcome]:
        """Decide every call: concurrent tools together, the others one after another."""
        outcomes: dict[str, ToolOutcome] = {}
        concurrent = [
            (c, p) for c, p in calls if (t := self._tools.get(c.tool_name)) is None or t.concurrent
        ]
        serial = [(c, p) for c, p in calls if (c, p) not in concurrent]
        results = await asyncio.gather(*(self.initial(c, p) for c, p in concurrent))
        for (call, _), outcome in zip(concurrent, results, strict=True):
            outcomes[call.tool_call_id] = outcome
        for call, part in serial:
            outcomes[call.tool_call_id] = await self.initial(call, part)
        return [outcomes[c.tool_call_id] for c, _ in calls]

    async def initial(self, call: ToolCallChunk, part: ToolPart) -> ToolOutcome:
        """The first execution of a validated call."""
        tool = self._tools.get(call.tool_name)
        if tool is None or call.tool_name not in self._advertised:
            # The request's tool list is authoritative, whatever the provider emitted.
            return _error(part, f"tool {call.tool_name!r} is not available", "reject")
        try:
            parsed = parse_input(tool, call.input)
        except InvalidToolInput as e:
            return _error(part, str(e), "reject")
        if tool.is_client:
            return self._wait(part, kind="client_tool", request=None, suspend=None)
        if tool.approval:
            request = {"tool": tool.name, "input": call.input}
            return self._wait(
                part,
                kind="approval",
                request=request,
                suspend={"name": "approval", "history": [request], "builtin": True},
            )
        return await self._execute(tool, part, parsed, InitialEntry(), [])

    async def resume(
        self,
        part: ToolPart,
        *,
        kind: str,
        action_id: str,
        resolution: dict[str, Any],
        suspend: dict[str, Any] | None,
    ) -> ToolOutcome:
        """Apply a resolved pending action to its waiting tool part."""
        if kind == "client_tool":
            if "error_text" in resolution:
                return _error(part, str(resolution["error_text"]), "client")
            return _output(part, resolution.get("output"), "client")
        tool = self._tools.get(part.tool_name)
        if tool is None:
            return _error(part, f"tool {part.tool_name!r} is no longer available", "resume")
        history = list((suspend or {}).get("history", []))
        name = str((suspend or {}).get("name", kind))
        if (suspend or {}).get("builtin") and not resolution.get("approved"):
            return _denied(part, resolution.get("reason"), action_id)
        try:
            parsed = parse_input(tool, part.input)
        except InvalidToolInput as e:
            return _error(part, str(e), "resume")
        entry = ResumeEntry(name=name, resume=resolution, action_id=action_id)
        outcome = await self._execute(tool, part, parsed, entry, history)
        if outcome.result is not None:
            outcome.result.source = (
                "resume" if outcome.result.source == "execute" else outcome.result.source
            )
        if (suspend or {}).get("builtin") and outcome.part.state in (
            "output-available",
            "output-error",
        ):
            outcome.part = outcome.part.model_copy(
                update={"approval": ToolApproval(id=action_id, approved=True)}
            )
        return outcome

    async def _execute(
        self,
        tool: Tool,
        part: ToolPart,
        parsed: Any,
        entry: ToolEntry,
        history: list[JsonValue],
    ) -> ToolOutcome:
        assert tool.execute is not None
        ctx = ToolContext(
            run_id=self._run_id,
            thread_id=self._thread_id,
            tool_call_id=part.tool_call_id,
            tool_name=part.tool_name,
            entry=entry,
            suspend_history=list(history),
        )
        try:
            output = await tool.execute(parsed, ctx)
        except ToolFailed as e:
            return _error(part, e.message, "fail")
        except ToolDenied as e:
            action = entry.action_id if isinstance(entry, ResumeEntry) else part.tool_call_id
            return _denied(part, e.reason, action)
        except ToolSuspended as e:
            return self._wait(
                part,
                kind=e.kind,
                request=e.request,
                suspend={"name": e.name, "history": [*history, e.request]},
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:  # an exception is a tool failure with source "throw"
            log.warning("tool %s raised", part.tool_name, exc_info=True)
            return _error(part, f"{type(e).__name__}: {e}", "throw")
        return _output(part, output, "execute")

    def _wait(
        self,
        part: ToolPart,
        *,
        kind: str,
        request: JsonValue,
        suspend: dict[str, Any] | None,
    ) -> ToolOutcome:
        action_id = new_id("act")
        pending = NewPendingAction(
            id=action_id,
            run_id=self._run_id,
            kind=kind,
            tool_call_id=part.tool_call_id,
            tool_name=part.tool_name,
            input=part.input,
            request=request,
            message_id=self._message_id,
        )
        chunks: list[StepStreamChunk] = []
        updated = part.model_copy(update={"state": "input-available"})
        if kind == "approval":
            updated = part.model_copy(
                update={"state": "approval-requested", "approval": ToolApproval(id=action_id)}
            )
            chunks.append(
                ToolApprovalRequestChunk(approval_id=action_id, tool_call_id=part.tool_call_id)
            )
        return ToolOutcome(part=updated, chunks=chunks, pending=pending, suspend=suspend)
