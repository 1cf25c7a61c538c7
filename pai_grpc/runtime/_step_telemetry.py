"""What one step records for operators: model-call span attributes, token and tool-call counts.

Kept apart from the executor so its episode loop stays the table of contents;
labels are bounded here (a tool name the model invented is never a label).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pai_grpc.runtime._agents import Agent
from pai_grpc.runtime._pipeline import StepResult
from pai_grpc.runtime._tool_phase import ToolOutcome
from pai_grpc.telemetry import Metrics, tracing

#: A decided tool part's state, as a tool call outcome (waiting states: ``waiting``).
_TOOL_OUTCOMES = {"output-available": "ok", "output-error": "error", "output-denied": "denied"}


def trace_model_call(span: Any, result: StepResult) -> None:
    """The model call's GenAI attributes: the model that answered, usage, finish reason."""
    reducer = result.reducer
    tracing.model_result(
        span,
        model_id=result.request.model.model_id,
        input_tokens=reducer.usage.input_tokens,
        output_tokens=reducer.usage.output_tokens,
        finish_reasons=[reducer.finish_reason] if reducer.finish_reason else [],
        error=reducer.error.reason if reducer.error is not None else None,
    )


def record_model_call(metrics: Metrics, result: StepResult) -> None:
    """Count the step's tokens by model and direction."""
    usage = result.reducer.usage
    model = result.request.model.model_id
    for direction, tokens in (
        ("input", usage.input_tokens),
        ("output", usage.output_tokens),
        ("cache_read", usage.cache_read_tokens),
        ("cache_write", usage.cache_write_tokens),
    ):
        if tokens:
            metrics.model_tokens.add(tokens, {"model": model, "direction": direction})


def count_tool_calls(metrics: Metrics, agent: Agent, outcomes: Iterable[ToolOutcome]) -> None:
    """Count decided tool calls by tool and outcome."""
    known = agent.tool_map()
    for outcome in outcomes:
        # A name the model invented is not a label value: it could be anything.
        name = outcome.part.tool_name
        metrics.tool_calls.add(
            1,
            {
                "tool": name if name in known else "_unknown",
                "outcome": _TOOL_OUTCOMES.get(outcome.part.state, "waiting"),
            },
        )
