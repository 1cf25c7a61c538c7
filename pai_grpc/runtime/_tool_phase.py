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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pai_grpc.domain import (
    JsonValue,
    MessagePart,
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
from pai_grpc.lifecycle import (
    AfterToolResultInput,
    AgentLifecycle,
    BeforeToolCallInput,
    Reject,
    ReplaceInput,
    ReplaceMessage,
    ReplaceOutput,
    Skip,
    StepInfo,
    ToolInfo,
    ToolResult,
)
from pai_grpc.runtime._reducer import StepReducer
from pai_grpc.telemetry import tracing
from pai_grpc.tools import (
    InitialEntry,
    InvalidToolInput,
    InvalidToolOutput,
    ResumeEntry,
    Tool,
    ToolContext,
    ToolDenied,
    ToolEntry,
    ToolFailed,
    ToolSuspended,
    check_output,
    parse_input,
)
from storage import InvalidJson, NewPendingAction, check_strict_json

log = logging.getLogger("pai_grpc.tools")

#: Tool-part states that still wait for a result.
WAITING_STATES = ("input-available", "approval-requested", "approval-responded")


@dataclass
class ToolOutcome:
    """What the tool phase decided for one call."""

    part: ToolPart
    chunks: list[StepStreamChunk] = field(default_factory=list)
    pending: NewPendingAction | None = None
    #: Suspend bookkeeping kept in the run's input until the action is resolved.
    suspend: dict[str, Any] | None = None
    result: ToolResult | None = None


def _error(part: ToolPart, message: str, source: Any) -> ToolOutcome:
    # An error part carries no output (e.g. a streamed result after an invalid call, TV-03).
    updated = part.model_copy(
        update={"state": "output-error", "error_text": message, "output": None}
    )
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
        result=ToolResult(status="output-error", message=message, error=message, source=source),
    )


def _output(part: ToolPart, output: JsonValue, source: Any) -> ToolOutcome:
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


def _synthetic(part: ToolPart, output: JsonValue, source: Any, tool: Tool | None) -> ToolOutcome:
    """An output the tool did not produce itself (skip, client, operator): validated (TH-02)."""
    try:
        check_strict_json(output, path="output")
        check_output(tool, output)
    except InvalidJson as e:
        return _error(part, f"the {source} output is not strict JSON: {e}", source)
    except InvalidToolOutput as e:
        return _error(part, str(e), source)
    return _output(part, output, source)


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


class ToolHooks(Protocol):
    """before_tool_call / after_tool_result, bound to the current run by the execution."""

    async def before(
        self, part: ToolPart, tool: Tool, entry: ToolEntry, history: list[JsonValue]
    ) -> Any:
        """before_tool_call's decision (or None)."""
        ...

    async def after(
        self,
        part: ToolPart,
        tool: Tool | None,
        entry: ToolEntry,
        history: list[JsonValue],
        result: ToolResult,
    ) -> Any:
        """after_tool_result's decision (or None)."""
        ...


@dataclass
class ValidCall:
    """A tool call that passed authority and schema checks (parsed exactly once)."""

    call: ToolCallChunk
    part: ToolPart
    tool: Tool
    parsed: Any


#: A tool part's state after execution, as the outcome its span records.
_TRACED_OUTCOMES = {
    "output-available": "success",
    "output-error": "error",
    "output-denied": "denied",
}


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
        hooks: ToolHooks | None = None,
    ) -> None:
        self._run_id = run_id
        self._thread_id = thread_id
        self._tools = tools
        self._advertised = advertised
        self._message_id = message_id
        self._hooks = hooks

    def validate(self, call: ToolCallChunk, part: ToolPart) -> ValidCall | ToolOutcome:
        """Authority (TV-04) and schema (TV-02) checks, before persistence or execution."""
        try:
            check_strict_json(call.input, path="input")
        except InvalidJson as e:
            # Non-JSON input is left out of the durable record (TV-02).
            bare = part.model_copy(update={"input": None})
            return _error(bare, f"invalid input for tool {call.tool_name}: {e}", "reject")
        tool = self._tools.get(call.tool_name)
        if tool is None or call.tool_name not in self._advertised:
            # The request's tool list is authoritative, whatever the provider emitted.
            return _error(part, f"tool {call.tool_name!r} is not available", "reject")
        try:
            parsed = parse_input(tool, call.input)
        except InvalidToolInput as e:
            return _error(part, str(e), "reject")
        return ValidCall(call=call, part=part, tool=tool, parsed=parsed)

    async def run(self, calls: Sequence[ValidCall]) -> list[ToolOutcome]:
        """Decide every call: concurrent tools together, the others one after another."""
        outcomes: dict[str, ToolOutcome] = {}
        concurrent = [c for c in calls if c.tool.concurrent]
        serial = [c for c in calls if not c.tool.concurrent]
        results = await asyncio.gather(*(self.initial(c) for c in concurrent))
        for valid, outcome in zip(concurrent, results, strict=True):
            outcomes[valid.call.tool_call_id] = outcome
        for valid in serial:
            outcomes[valid.call.tool_call_id] = await self.initial(valid)
        return [outcomes[c.call.tool_call_id] for c in calls]

    async def initial(self, valid: ValidCall) -> ToolOutcome:
        """The first execution of a validated call (TH-01: before_tool_call first)."""
        tool, part, parsed = valid.tool, valid.part, valid.parsed
        entry: ToolEntry = InitialEntry()
        if self._hooks is not None:
            decision = await self._hooks.before(part, tool, entry, [])
            match decision:
                case ReplaceInput():
                    try:
                        check_strict_json(decision.input, path="input")
                        parsed = parse_input(tool, decision.input)
                    except (InvalidToolInput, InvalidJson) as e:
                        return await self._after(_error(part, str(e), "reject"), tool, entry, [])
                    part = part.model_copy(update={"input": decision.input})
                case Skip():
                    return await self._after(
                        _synthetic(part, decision.output, "skip", tool), tool, entry, []
                    )
                case Reject():
                    return await self._after(
                        _error(part, decision.message, "reject"), tool, entry, []
                    )
        if tool.is_client:
            return self._wait(part, kind="client_tool", request=None, suspend=None)
        if tool.approval:
            request = {"tool": tool.name, "input": part.input}
            return self._wait(
                part,
                kind="approval",
                request=request,
                suspend={"name": "approval", "history": [request], "builtin": True},
            )
        outcome = await self._execute(tool, part, parsed, entry, [])
        return await self._after(outcome, tool, entry, [])

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
        tool = self._tools.get(part.tool_name)
        history = list((suspend or {}).get("history", []))
        name = str((suspend or {}).get("name", kind))
        entry: ToolEntry = ResumeEntry(name=name, resume=resolution, action_id=action_id)
        if kind == "client_tool" or "output" in resolution or "error_text" in resolution:
            # A client's result, or an operator fulfilling the call by hand.
            source = "client" if kind == "client_tool" else "manual"
            if "error_text" in resolution:
                outcome = _error(part, str(resolution["error_text"]), source)
            else:
                outcome = _synthetic(part, resolution.get("output"), source, tool)
            return await self._after(outcome, tool, entry, history)
        if tool is None:
            outcome = _error(part, f"tool {part.tool_name!r} is no longer available", "resume")
            return await self._after(outcome, tool, entry, history)
        if (suspend or {}).get("builtin") and not resolution.get("approved"):
            return await self._after(
                _denied(part, resolution.get("reason"), action_id), tool, entry, history
            )
        try:
            parsed = parse_input(tool, part.input)
        except InvalidToolInput as e:
            return await self._after(_error(part, str(e), "resume"), tool, entry, history)
        if self._hooks is not None:
            decision = await self._hooks.before(part, tool, entry, history)
            match decision:
                case Skip():
                    return await self._after(
                        _synthetic(part, decision.output, "skip", tool), tool, entry, history
                    )
                case Reject():
                    return await self._after(
                        _error(part, decision.message, "reject"), tool, entry, history
                    )
                case ReplaceInput():
                    try:
                        check_strict_json(decision.input, path="input")
                        parsed = parse_input(tool, decision.input)
                    except (InvalidToolInput, InvalidJson) as e:
                        outcome = _error(part, str(e), "reject")
                        return await self._after(outcome, tool, entry, history)
                    part = part.model_copy(update={"input": decision.input})
        outcome = await self._execute(tool, part, parsed, entry, history)
        if outcome.result is not None and outcome.result.source == "execute":
            outcome.result.source = "resume"
        if (suspend or {}).get("builtin") and outcome.part.state in (
            "output-available",
            "output-error",
        ):
            outcome.part = outcome.part.model_copy(
                update={"approval": ToolApproval(id=action_id, approved=True)}
            )
        return await self._after(outcome, tool, entry, history)

    async def conclude(
        self, outcome: ToolOutcome, tool: Tool | None, entry: ToolEntry, history: list[JsonValue]
    ) -> ToolOutcome:
        """Pass a result decided outside execution (e.g. recovery) through after_tool_result."""
        return await self._after(outcome, tool, entry, history)

    async def _after(
        self, outcome: ToolOutcome, tool: Tool | None, entry: ToolEntry, history: list[JsonValue]
    ) -> ToolOutcome:
        """after_tool_result for every final result (TH-03); suspends get none (TH-04)."""
        if self._hooks is None or outcome.result is None or outcome.pending is not None:
            return outcome
        decision = await self._hooks.after(outcome.part, tool, entry, history, outcome.result)
        match decision:
            case ReplaceOutput() if outcome.part.state == "output-available":
                return _synthetic(outcome.part, decision.output, outcome.result.source, tool)
            case ReplaceMessage() if outcome.part.state in ("output-error", "output-denied"):
                if outcome.part.state == "output-denied":
                    reason = decision.message
                    approval = outcome.part.approval
                    denied = _denied(
                        outcome.part, reason, approval.id if approval else outcome.part.tool_call_id
                    )
                    denied.result = ToolResult(
                        status="output-error", message=reason, source=outcome.result.source
                    )
                    return denied
                replaced = _error(outcome.part, decision.message, outcome.result.source)
                return replaced
        return outcome

    async def _execute(
        self,
        tool: Tool,
        part: ToolPart,
        parsed: Any,
        entry: ToolEntry,
        history: list[JsonValue],
    ) -> ToolOutcome:
        """Execute the tool in its span ``execute_tool <name>``, recording the outcome."""
        with tracing.tool_span(part.tool_name, part.tool_call_id) as span:
            outcome = await self._invoke(tool, part, parsed, entry, history)
            state = outcome.part.state
            tracing.tool_outcome(
                span,
                "suspended" if outcome.pending is not None else _TRACED_OUTCOMES.get(state, state),
                outcome.part.error_text,
            )
            return outcome

    async def _invoke(
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
            # The exception's text may quote the tool's input or data: only at DEBUG.
            log.warning("tool %s raised %s", part.tool_name, type(e).__name__)
            log.debug("tool %s raised", part.tool_name, exc_info=True)
            return _error(part, f"{type(e).__name__}: {e}", "throw")
        try:
            # Checked here, not at commit: an output no backend can store (U+0000, an
            # integer beyond ±(2**53 - 1), NaN) is the tool's error, and the run goes on.
            check_strict_json(output, path="output")
        except InvalidJson as e:
            return _error(part, f"the tool output cannot be stored: {e}", "throw")
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


class BoundToolHooks:
    """before_tool_call / after_tool_result bound to one step of this run."""

    def __init__(
        self,
        lifecycle: AgentLifecycle,
        *,
        phases: frozenset[str],
        base: Callable[[], dict[str, Any]],
        step: StepInfo,
    ) -> None:
        self._lifecycle = lifecycle
        self._phases = phases
        #: The fields every hook input of this episode carries.
        self._base = base
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
            **self._base(),
            "step": self._step,
            "tool": info,
            "tool_call_id": part.tool_call_id,
            "entry": entry,
            "suspend_history": list(history),
            "input": part.input,
        }

    async def before(self, part: ToolPart, tool: Tool, entry: ToolEntry, history: list[Any]) -> Any:
        """before_tool_call (TH-01)."""
        if "before_tool_call" not in self._phases:
            return None
        return await self._lifecycle.before_tool_call(
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
        if "after_tool_result" not in self._phases:
            return None
        return await self._lifecycle.after_tool_result(
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


def merge_outcomes(parts: list[MessagePart], outcomes: Sequence[ToolOutcome]) -> list[MessagePart]:
    """The step's parts with each decided tool call's part in place of the original."""
    replaced = {o.part.tool_call_id: o.part for o in outcomes}
    return [replaced.get(p.tool_call_id, p) if isinstance(p, ToolPart) else p for p in parts]
