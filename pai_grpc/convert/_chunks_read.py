"""Reading the step stream: ``pai.v1.StepStreamChunk`` -> the domain's chunks.

The conventions (unset fields, ``null`` values, defaults, required finish
reasons) are those of :mod:`._chunks`, which writes the same chunks.
"""

from __future__ import annotations

from pai.v1 import chunks_pb2
from pai_grpc.convert._chunks import finish_reason_from_proto, usage_from_proto
from pai_grpc.convert._json import (
    optional_struct_from_proto,
    optional_value_from_proto,
    require_oneof,
    unknown_oneof,
)
from pai_grpc.domain import (
    AbortChunk,
    DataChunk,
    DocumentSource,
    ErrorChunk,
    FileChunk,
    FinishChunk,
    FinishStepChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningFileChunk,
    ReasoningStartChunk,
    ResponseInfo,
    SourceChunk,
    StartChunk,
    StartStepChunk,
    StepStreamChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolApprovalRequestChunk,
    ToolCallChunk,
    ToolErrorChunk,
    ToolInputDeltaChunk,
    ToolInputEndChunk,
    ToolInputStartChunk,
    ToolOutputDeniedChunk,
    ToolResultChunk,
    UrlSource,
)


def _text_start_from_proto(pb: chunks_pb2.TextStartChunk) -> TextStartChunk:
    return TextStartChunk(
        id=pb.id, provider_metadata=optional_struct_from_proto(pb, "provider_metadata")
    )


def _text_delta_from_proto(pb: chunks_pb2.TextDeltaChunk) -> TextDeltaChunk:
    return TextDeltaChunk(
        id=pb.id,
        text=pb.text,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _text_end_from_proto(pb: chunks_pb2.TextEndChunk) -> TextEndChunk:
    return TextEndChunk(
        id=pb.id, provider_metadata=optional_struct_from_proto(pb, "provider_metadata")
    )


def _reasoning_start_from_proto(pb: chunks_pb2.ReasoningStartChunk) -> ReasoningStartChunk:
    return ReasoningStartChunk(
        id=pb.id, provider_metadata=optional_struct_from_proto(pb, "provider_metadata")
    )


def _reasoning_delta_from_proto(pb: chunks_pb2.ReasoningDeltaChunk) -> ReasoningDeltaChunk:
    return ReasoningDeltaChunk(
        id=pb.id,
        text=pb.text,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _reasoning_end_from_proto(pb: chunks_pb2.ReasoningEndChunk) -> ReasoningEndChunk:
    return ReasoningEndChunk(
        id=pb.id, provider_metadata=optional_struct_from_proto(pb, "provider_metadata")
    )


def _tool_input_start_from_proto(pb: chunks_pb2.ToolInputStartChunk) -> ToolInputStartChunk:
    return ToolInputStartChunk(
        id=pb.id,
        tool_name=pb.tool_name,
        provider_executed=pb.provider_executed,
        title=pb.title if pb.HasField("title") else None,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _tool_input_delta_from_proto(pb: chunks_pb2.ToolInputDeltaChunk) -> ToolInputDeltaChunk:
    return ToolInputDeltaChunk(
        id=pb.id,
        delta=pb.delta,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _tool_input_end_from_proto(pb: chunks_pb2.ToolInputEndChunk) -> ToolInputEndChunk:
    return ToolInputEndChunk(
        id=pb.id, provider_metadata=optional_struct_from_proto(pb, "provider_metadata")
    )


def _tool_call_from_proto(pb: chunks_pb2.ToolCallChunk) -> ToolCallChunk:
    return ToolCallChunk(
        tool_call_id=pb.tool_call_id,
        tool_name=pb.tool_name,
        input=optional_value_from_proto(pb, "input"),
        provider_executed=pb.provider_executed,
        invalid=pb.invalid,
        error_text=pb.error_text if pb.HasField("error_text") else None,
        title=pb.title if pb.HasField("title") else None,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _tool_result_from_proto(pb: chunks_pb2.ToolResultChunk) -> ToolResultChunk:
    return ToolResultChunk(
        tool_call_id=pb.tool_call_id,
        tool_name=pb.tool_name,
        input=optional_value_from_proto(pb, "input"),
        output=optional_value_from_proto(pb, "output"),
        provider_executed=pb.provider_executed,
        preliminary=pb.preliminary,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _tool_error_from_proto(pb: chunks_pb2.ToolErrorChunk) -> ToolErrorChunk:
    return ToolErrorChunk(
        tool_call_id=pb.tool_call_id,
        tool_name=pb.tool_name,
        input=optional_value_from_proto(pb, "input"),
        error_text=pb.error_text,
        provider_executed=pb.provider_executed,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _source_from_proto(pb: chunks_pb2.SourceChunk) -> SourceChunk:
    source: UrlSource | DocumentSource
    match arm := require_oneof(pb, "source"):
        case "url":
            url = pb.url
            source = UrlSource(url=url.url, title=url.title if url.HasField("title") else None)
        case "document":
            doc = pb.document
            source = DocumentSource(
                media_type=doc.media_type,
                title=doc.title,
                filename=doc.filename if doc.HasField("filename") else None,
            )
        case _:
            raise unknown_oneof(pb, "source", arm)
    return SourceChunk(
        id=pb.id,
        source=source,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _file_from_proto(pb: chunks_pb2.FileChunk) -> FileChunk:
    return FileChunk(
        media_type=pb.media_type,
        url=pb.url,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _reasoning_file_from_proto(pb: chunks_pb2.ReasoningFileChunk) -> ReasoningFileChunk:
    return ReasoningFileChunk(
        media_type=pb.media_type,
        url=pb.url,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
    )


def _data_from_proto(pb: chunks_pb2.DataChunk) -> DataChunk:
    return DataChunk(
        name=pb.name,
        id=pb.id if pb.HasField("id") else None,
        data=optional_value_from_proto(pb, "data"),
        transient=pb.transient,
    )


def _finish_step_from_proto(pb: chunks_pb2.FinishStepChunk) -> FinishStepChunk:
    response = (
        ResponseInfo(id=pb.response.id, model_id=pb.response.model_id)
        if pb.HasField("response")
        else None
    )
    return FinishStepChunk(
        usage=usage_from_proto(pb.usage),
        finish_reason=finish_reason_from_proto(
            pb.finish_reason, field="FinishStepChunk.finish_reason"
        ),
        raw_finish_reason=pb.raw_finish_reason if pb.HasField("raw_finish_reason") else None,
        provider_metadata=optional_struct_from_proto(pb, "provider_metadata"),
        response=response,
    )


def _finish_from_proto(pb: chunks_pb2.FinishChunk) -> FinishChunk:
    return FinishChunk(
        finish_reason=finish_reason_from_proto(pb.finish_reason, field="FinishChunk.finish_reason"),
        raw_finish_reason=pb.raw_finish_reason if pb.HasField("raw_finish_reason") else None,
        total_usage=usage_from_proto(pb.total_usage),
    )


def chunk_from_proto(pb: chunks_pb2.StepStreamChunk) -> StepStreamChunk:
    """Convert a ``pai.v1.StepStreamChunk`` to its domain chunk.

    Args:
        pb: The proto chunk.

    Returns:
        The domain chunk of the arm that is set.

    Raises:
        ValueError: No arm of ``StepStreamChunk.chunk`` (or of
            ``SourceChunk.source``) is set, a finish reason is UNSPECIFIED or
            unknown, or a JSON field is not strict JSON.
    """
    match arm := require_oneof(pb, "chunk"):
        case "start":
            return StartChunk()
        case "text_start":
            return _text_start_from_proto(pb.text_start)
        case "text_delta":
            return _text_delta_from_proto(pb.text_delta)
        case "text_end":
            return _text_end_from_proto(pb.text_end)
        case "reasoning_start":
            return _reasoning_start_from_proto(pb.reasoning_start)
        case "reasoning_delta":
            return _reasoning_delta_from_proto(pb.reasoning_delta)
        case "reasoning_end":
            return _reasoning_end_from_proto(pb.reasoning_end)
        case "tool_input_start":
            return _tool_input_start_from_proto(pb.tool_input_start)
        case "tool_input_delta":
            return _tool_input_delta_from_proto(pb.tool_input_delta)
        case "tool_input_end":
            return _tool_input_end_from_proto(pb.tool_input_end)
        case "tool_call":
            return _tool_call_from_proto(pb.tool_call)
        case "tool_result":
            return _tool_result_from_proto(pb.tool_result)
        case "tool_error":
            return _tool_error_from_proto(pb.tool_error)
        case "tool_approval_request":
            req = pb.tool_approval_request
            return ToolApprovalRequestChunk(
                approval_id=req.approval_id, tool_call_id=req.tool_call_id
            )
        case "tool_output_denied":
            return ToolOutputDeniedChunk(tool_call_id=pb.tool_output_denied.tool_call_id)
        case "source":
            return _source_from_proto(pb.source)
        case "file":
            return _file_from_proto(pb.file)
        case "reasoning_file":
            return _reasoning_file_from_proto(pb.reasoning_file)
        case "data":
            return _data_from_proto(pb.data)
        case "start_step":
            return StartStepChunk(warnings=list(pb.start_step.warnings))
        case "finish_step":
            return _finish_step_from_proto(pb.finish_step)
        case "finish":
            return _finish_from_proto(pb.finish)
        case "error":
            return ErrorChunk(reason=pb.error.reason, message=pb.error.message)
        case "abort":
            abort = pb.abort
            return AbortChunk(reason=abort.reason if abort.HasField("reason") else None)
        case _:
            raise unknown_oneof(pb, "chunk", arm)
