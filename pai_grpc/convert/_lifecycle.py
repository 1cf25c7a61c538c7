"""Lifecycle inputs: phases, history rewrites, tool hooks and step summaries.

Covers the hook inputs of ``lifecycle.proto``, ``lifecycle_plugin_service.proto``
and ``tools.proto``; the hooks' answers are in :mod:`._decisions`.

Conventions beyond the package ones:

* ``HistoryRewrite.after_version`` 0 is ``None`` (not yet rewritten).
* A ``ToolExecutionEntry`` must set one arm (``initial`` or ``resume``).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from pai.v1 import chunks_pb2, lifecycle_pb2, tools_pb2
from pai.v1 import lifecycle_plugin_service_pb2 as plugin_pb2
from pai_grpc.convert._chunks import (
    FINISH_REASONS,
    chunk_to_proto,
    usage_from_proto,
    usage_to_proto,
)
from pai_grpc.convert._chunks_read import chunk_from_proto
from pai_grpc.convert._json import (
    EnumMap,
    optional_struct_from_proto,
    optional_struct_to_proto,
    optional_value_from_proto,
    optional_value_to_proto,
    require_field,
    require_oneof,
    unknown_oneof,
)
from pai_grpc.convert._model import convert_each, tool_source_from_proto, tool_source_to_proto
from pai_grpc.convert._threads import (
    lifecycle_message_from_proto,
    lifecycle_message_to_proto,
    visibility_from_proto,
    visibility_to_proto,
)
from pai_grpc.domain import InitialEntry, ResumeEntry, ToolCallChunk, ToolEntry
from pai_grpc.lifecycle import (
    HistoryRewrite,
    RegenerateRewrite,
    StepInfo,
    StepSummary,
    ToolInfo,
    ToolResult,
    VisibilityChange,
    VisibilityRewrite,
)

ToolResultStatus: TypeAlias = Literal["output-available", "output-error"]
ToolResultSource: TypeAlias = Literal[
    "execute", "skip", "resume", "client", "manual", "reject", "throw", "fail", "cancel", "recovery"
]

LIFECYCLE_PHASES: EnumMap[str, lifecycle_pb2.LifecyclePhase] = EnumMap(
    "LifecyclePhase",
    {
        "prepare_run": lifecycle_pb2.LIFECYCLE_PHASE_PREPARE_RUN,
        "resolve_model_context": lifecycle_pb2.LIFECYCLE_PHASE_RESOLVE_MODEL_CONTEXT,
        "prepare_history_rewrite": lifecycle_pb2.LIFECYCLE_PHASE_PREPARE_HISTORY_REWRITE,
        "history_rewritten": lifecycle_pb2.LIFECYCLE_PHASE_HISTORY_REWRITTEN,
        "prepare_model_step": lifecycle_pb2.LIFECYCLE_PHASE_PREPARE_MODEL_STEP,
        "around_model_call": lifecycle_pb2.LIFECYCLE_PHASE_AROUND_MODEL_CALL,
        "transform_step_stream": lifecycle_pb2.LIFECYCLE_PHASE_TRANSFORM_STEP_STREAM,
        "before_tool_call": lifecycle_pb2.LIFECYCLE_PHASE_BEFORE_TOOL_CALL,
        "after_tool_result": lifecycle_pb2.LIFECYCLE_PHASE_AFTER_TOOL_RESULT,
        "after_step": lifecycle_pb2.LIFECYCLE_PHASE_AFTER_STEP,
    },
)

TOOL_RESULT_STATUSES: EnumMap[ToolResultStatus, tools_pb2.ToolResultStatus] = EnumMap(
    "ToolResultStatus",
    {
        "output-available": tools_pb2.TOOL_RESULT_STATUS_OUTPUT_AVAILABLE,
        "output-error": tools_pb2.TOOL_RESULT_STATUS_OUTPUT_ERROR,
    },
)

TOOL_RESULT_SOURCES: EnumMap[ToolResultSource, tools_pb2.ToolResultSource] = EnumMap(
    "ToolResultSource",
    {
        "execute": tools_pb2.TOOL_RESULT_SOURCE_EXECUTE,
        "skip": tools_pb2.TOOL_RESULT_SOURCE_SKIP,
        "resume": tools_pb2.TOOL_RESULT_SOURCE_RESUME,
        "client": tools_pb2.TOOL_RESULT_SOURCE_CLIENT,
        "manual": tools_pb2.TOOL_RESULT_SOURCE_MANUAL,
        "reject": tools_pb2.TOOL_RESULT_SOURCE_REJECT,
        "throw": tools_pb2.TOOL_RESULT_SOURCE_THROW,
        "fail": tools_pb2.TOOL_RESULT_SOURCE_FAIL,
        "cancel": tools_pb2.TOOL_RESULT_SOURCE_CANCEL,
        "recovery": tools_pb2.TOOL_RESULT_SOURCE_RECOVERY,
    },
)


# ------------------------------------------------------------------------ enums


def phase_to_proto(phase: str) -> lifecycle_pb2.LifecyclePhase:
    """Map a phase name (one of :data:`pai_grpc.lifecycle.PHASES`) to the proto enum.

    Raises:
        ValueError: The name is not a lifecycle phase.
    """
    return LIFECYCLE_PHASES.to_proto(phase)


def phase_from_proto(value: int, *, field: str = "LifecyclePhase") -> str:
    """Map a proto lifecycle phase to its snake_case name.

    Raises:
        ValueError: The phase is UNSPECIFIED or unknown.
    """
    return LIFECYCLE_PHASES.from_proto(value, field)


def tool_result_status_to_proto(value: ToolResultStatus) -> tools_pb2.ToolResultStatus:
    """Map a final tool result status to the proto enum."""
    return TOOL_RESULT_STATUSES.to_proto(value)


def tool_result_status_from_proto(
    value: int, *, field: str = "ToolResultStatus"
) -> ToolResultStatus:
    """Map a proto tool result status.

    Raises:
        ValueError: The status is UNSPECIFIED or unknown.
    """
    return TOOL_RESULT_STATUSES.from_proto(value, field)


def tool_result_source_to_proto(value: ToolResultSource) -> tools_pb2.ToolResultSource:
    """Map where a final tool result came from to the proto enum."""
    return TOOL_RESULT_SOURCES.to_proto(value)


def tool_result_source_from_proto(
    value: int, *, field: str = "ToolResultSource"
) -> ToolResultSource:
    """Map a proto tool result source.

    Raises:
        ValueError: The source is UNSPECIFIED or unknown.
    """
    return TOOL_RESULT_SOURCES.from_proto(value, field)


# ------------------------------------------------------------ history rewrites


def _visibility_change_to_proto(change: VisibilityChange) -> lifecycle_pb2.VisibilityChange:
    return lifecycle_pb2.VisibilityChange(
        message_id=change.message_id,
        before=visibility_to_proto(change.before),
        after=visibility_to_proto(change.after),
    )


def _visibility_change_from_proto(pb: lifecycle_pb2.VisibilityChange) -> VisibilityChange:
    require_field(pb, "before")
    require_field(pb, "after")
    return VisibilityChange(
        message_id=pb.message_id,
        before=visibility_from_proto(pb.before),
        after=visibility_from_proto(pb.after),
    )


def history_rewrite_to_proto(rewrite: HistoryRewrite) -> lifecycle_pb2.HistoryRewrite:
    """Convert a history rewrite (``after_version=None`` is sent as 0).

    Raises:
        ValueError: The value is not a known rewrite, or a version does not
            fit an int64.
    """
    match rewrite:
        case RegenerateRewrite(after_version=after_version):
            return lifecycle_pb2.HistoryRewrite(
                regenerate=lifecycle_pb2.RegenerateRewrite(
                    target_message_id=rewrite.target_message_id,
                    retained_message_ids=list(rewrite.retained_message_ids),
                    removed_message_ids=list(rewrite.removed_message_ids),
                ),
                before_version=rewrite.before_version,
                after_version=after_version or 0,
            )
        case VisibilityRewrite(after_version=after_version):
            return lifecycle_pb2.HistoryRewrite(
                visibility=lifecycle_pb2.VisibilityRewrite(
                    changes=[_visibility_change_to_proto(c) for c in rewrite.changes]
                ),
                before_version=rewrite.before_version,
                after_version=after_version or 0,
            )
        case _:
            raise ValueError(f"HistoryRewrite: not a history rewrite: {rewrite!r}")


def history_rewrite_from_proto(pb: lifecycle_pb2.HistoryRewrite) -> HistoryRewrite:
    """Convert a ``pai.v1.HistoryRewrite`` (``after_version`` 0 gives ``None``).

    Raises:
        ValueError: No arm of ``HistoryRewrite.rewrite`` is set, or a
            visibility change lacks ``before``/``after``.
    """
    after = pb.after_version or None
    match arm := require_oneof(pb, "rewrite"):
        case "regenerate":
            regenerate = pb.regenerate
            return RegenerateRewrite(
                target_message_id=regenerate.target_message_id,
                retained_message_ids=tuple(regenerate.retained_message_ids),
                removed_message_ids=tuple(regenerate.removed_message_ids),
                before_version=pb.before_version,
                after_version=after,
            )
        case "visibility":
            changes = convert_each(
                "VisibilityRewrite.changes", pb.visibility.changes, _visibility_change_from_proto
            )
            return VisibilityRewrite(
                changes=tuple(changes), before_version=pb.before_version, after_version=after
            )
        case _:
            raise unknown_oneof(pb, "rewrite", arm)


# ------------------------------------------------------------------ tool hooks


def tool_info_to_proto(tool: ToolInfo) -> tools_pb2.ToolInfo:
    """Convert a tool as hooks see it.

    Raises:
        ValueError: The source is not a known tool source.
    """
    return tools_pb2.ToolInfo(
        name=tool.name, source=tool_source_to_proto(tool.source), description=tool.description
    )


def tool_info_from_proto(pb: tools_pb2.ToolInfo) -> ToolInfo:
    """Convert a ``pai.v1.ToolInfo``.

    Raises:
        ValueError: The source is UNSPECIFIED or unknown.
    """
    return ToolInfo(
        name=pb.name,
        source=tool_source_from_proto(pb.source, field="ToolInfo.source"),
        description=pb.description,
    )


def tool_result_to_proto(result: ToolResult) -> tools_pb2.ToolResult:
    """Convert a final tool result (JSON ``null`` output/error are sent unset).

    Raises:
        ValueError: A status or source is unknown, or JSON is not strict.
    """
    return tools_pb2.ToolResult(
        status=tool_result_status_to_proto(result.status),
        output=optional_value_to_proto(result.output, path="ToolResult.output"),
        error=optional_value_to_proto(result.error, path="ToolResult.error"),
        message=result.message,
        reason=result.reason,
        source=tool_result_source_to_proto(result.source),
    )


def tool_result_from_proto(pb: tools_pb2.ToolResult) -> ToolResult:
    """Convert a ``pai.v1.ToolResult``.

    Raises:
        ValueError: ``status`` or ``source`` is UNSPECIFIED or unknown, or
            JSON is not strict.
    """
    return ToolResult(
        status=tool_result_status_from_proto(pb.status, field="ToolResult.status"),
        output=optional_value_from_proto(pb, "output"),
        error=optional_value_from_proto(pb, "error"),
        message=pb.message if pb.HasField("message") else None,
        reason=pb.reason if pb.HasField("reason") else None,
        source=tool_result_source_from_proto(pb.source, field="ToolResult.source"),
    )


def tool_entry_to_proto(entry: ToolEntry) -> tools_pb2.ToolExecutionEntry:
    """Convert why a tool is executing (``InitialEntry`` / ``ResumeEntry``).

    Raises:
        ValueError: The value is not a tool entry, or the resume value is not
            strict JSON.
    """
    match entry:
        case InitialEntry():
            return tools_pb2.ToolExecutionEntry(initial=tools_pb2.InitialEntry())
        case ResumeEntry(name=name, resume=resume, action_id=action_id):
            return tools_pb2.ToolExecutionEntry(
                resume=tools_pb2.ResumeEntry(
                    name=name,
                    resume=optional_value_to_proto(resume, path="ResumeEntry.resume"),
                    action_id=action_id,
                )
            )
        case _:
            raise ValueError(f"ToolExecutionEntry: not a tool entry: {entry!r}")


def tool_entry_from_proto(pb: tools_pb2.ToolExecutionEntry) -> ToolEntry:
    """Convert a ``pai.v1.ToolExecutionEntry``.

    Raises:
        ValueError: No arm of ``ToolExecutionEntry.entry`` is set, or the
            resume value is not strict JSON.
    """
    match arm := require_oneof(pb, "entry"):
        case "initial":
            return InitialEntry()
        case "resume":
            resume = pb.resume
            return ResumeEntry(
                name=resume.name,
                resume=optional_value_from_proto(resume, "resume"),
                action_id=resume.action_id,
            )
        case _:
            raise unknown_oneof(pb, "entry", arm)


# --------------------------------------------------------------- steps


def step_info_to_proto(step: StepInfo) -> lifecycle_pb2.LifecycleStepInfo:
    """Convert the step a hook runs in."""
    return lifecycle_pb2.LifecycleStepInfo(step_id=step.step_id, index=step.index)


def step_info_from_proto(pb: lifecycle_pb2.LifecycleStepInfo) -> StepInfo:
    """Convert a ``pai.v1.LifecycleStepInfo``."""
    return StepInfo(step_id=pb.step_id, index=pb.index)


def _tool_call_to_proto(chunk: ToolCallChunk) -> chunks_pb2.ToolCallChunk:
    if not isinstance(chunk, ToolCallChunk):
        raise ValueError(f"not a ToolCallChunk: {chunk!r}")
    return chunk_to_proto(chunk).tool_call


def _tool_call_from_proto(pb: chunks_pb2.ToolCallChunk) -> ToolCallChunk:
    chunk = chunk_from_proto(chunks_pb2.StepStreamChunk(tool_call=pb))
    assert isinstance(chunk, ToolCallChunk)
    return chunk


def step_summary_to_proto(step: StepSummary) -> plugin_pb2.StepSummary:
    """Convert an assembled step as after_step sees it.

    ``finish_reason=None`` is UNSPECIFIED; ``usage=None`` is unset.

    Raises:
        ValueError: The message, a tool call or a JSON field is malformed.
    """
    return plugin_pb2.StepSummary(
        step_id=step.step_id,
        index=step.index,
        message=lifecycle_message_to_proto(step.message),
        finish_reason=FINISH_REASONS.optional_to_proto(step.finish_reason),
        provider_metadata=optional_struct_to_proto(
            step.provider_metadata, path="StepSummary.provider_metadata"
        ),
        usage=None if step.usage is None else usage_to_proto(step.usage),
        tool_calls=convert_each("StepSummary.tool_calls", step.tool_calls, _tool_call_to_proto),
    )


def step_summary_from_proto(pb: plugin_pb2.StepSummary) -> StepSummary:
    """Convert a ``pai.v1.StepSummary`` (finish reason UNSPECIFIED gives ``None``).

    Raises:
        ValueError: ``message`` is unset, the finish reason is unknown, or a
            field is malformed.
    """
    require_field(pb, "message")
    return StepSummary(
        step_id=pb.step_id,
        index=pb.index,
        message=lifecycle_message_from_proto(pb.message),
        finish_reason=FINISH_REASONS.optional_from_proto(
            pb.finish_reason, "StepSummary.finish_reason"
        ),
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
        usage=usage_from_proto(pb.usage) if pb.HasField("usage") else None,
        tool_calls=convert_each("StepSummary.tool_calls", pb.tool_calls, _tool_call_from_proto),
    )
