"""The step stream: :data:`pai_grpc.domain.StepStreamChunk` <-> ``pai.v1.StepStreamChunk``.

Also :class:`~pai_grpc.domain.Usage` <-> ``pai.v1.Usage`` and the
``FinishReason`` enum. Optional domain fields map to unset proto fields; a
JSON ``null`` in a ``Value`` field is sent unset and reads back as ``None``.
Domain fields with a default object (``FinishStepChunk.usage``,
``FinishChunk.total_usage``) are always sent, and read back as the default
when unset. ``finish_reason`` is required on the wire: UNSPECIFIED is an
error rather than the domain default ``"stop"``.
"""

from __future__ import annotations

from typing import assert_never

from pai.v1 import chunks_pb2
from pai_grpc.convert._json import (
    EnumMap,
    optional_struct_from_proto,
    optional_struct_to_proto,
    optional_value_from_proto,
    optional_value_to_proto,
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
    FinishReason,
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
    Usage,
)

FINISH_REASONS: EnumMap[FinishReason, chunks_pb2.FinishReason] = EnumMap(
    "FinishReason",
    {
        "stop": chunks_pb2.FINISH_REASON_STOP,
        "length": chunks_pb2.FINISH_REASON_LENGTH,
        "content-filter": chunks_pb2.FINISH_REASON_CONTENT_FILTER,
        "tool-calls": chunks_pb2.FINISH_REASON_TOOL_CALLS,
        "error": chunks_pb2.FINISH_REASON_ERROR,
        "other": chunks_pb2.FINISH_REASON_OTHER,
    },
)


def finish_reason_to_proto(value: FinishReason) -> chunks_pb2.FinishReason:
    """Map a domain finish reason to the proto enum."""
    return FINISH_REASONS.to_proto(value)


def finish_reason_from_proto(value: int, *, field: str = "FinishReason") -> FinishReason:
    """Map a proto finish reason.

    Raises:
        ValueError: The reason is UNSPECIFIED or unknown.
    """
    return FINISH_REASONS.from_proto(value, field)


def usage_to_proto(usage: Usage) -> chunks_pb2.Usage:
    """Convert token usage; ``None`` figures stay unset.

    Raises:
        ValueError: A figure does not fit an int64.
    """
    return chunks_pb2.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )


def usage_from_proto(pb: chunks_pb2.Usage) -> Usage:
    """Convert proto token usage; unset figures become ``None``."""
    return Usage(
        input_tokens=pb.input_tokens if pb.HasField("input_tokens") else None,
        output_tokens=pb.output_tokens if pb.HasField("output_tokens") else None,
        total_tokens=pb.total_tokens if pb.HasField("total_tokens") else None,
        reasoning_tokens=pb.reasoning_tokens if pb.HasField("reasoning_tokens") else None,
        cache_read_tokens=pb.cache_read_tokens if pb.HasField("cache_read_tokens") else None,
        cache_write_tokens=pb.cache_write_tokens if pb.HasField("cache_write_tokens") else None,
    )


# ---------------------------------------------------------------------- to proto


def _text_start_to_proto(c: TextStartChunk) -> chunks_pb2.TextStartChunk:
    return chunks_pb2.TextStartChunk(
        id=c.id,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="TextStartChunk.provider_metadata"
        ),
    )


def _text_delta_to_proto(c: TextDeltaChunk) -> chunks_pb2.TextDeltaChunk:
    return chunks_pb2.TextDeltaChunk(
        id=c.id,
        text=c.text,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="TextDeltaChunk.provider_metadata"
        ),
    )


def _text_end_to_proto(c: TextEndChunk) -> chunks_pb2.TextEndChunk:
    return chunks_pb2.TextEndChunk(
        id=c.id,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="TextEndChunk.provider_metadata"
        ),
    )


def _reasoning_start_to_proto(c: ReasoningStartChunk) -> chunks_pb2.ReasoningStartChunk:
    return chunks_pb2.ReasoningStartChunk(
        id=c.id,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="ReasoningStartChunk.provider_metadata"
        ),
    )


def _reasoning_delta_to_proto(c: ReasoningDeltaChunk) -> chunks_pb2.ReasoningDeltaChunk:
    return chunks_pb2.ReasoningDeltaChunk(
        id=c.id,
        text=c.text,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="ReasoningDeltaChunk.provider_metadata"
        ),
    )


def _reasoning_end_to_proto(c: ReasoningEndChunk) -> chunks_pb2.ReasoningEndChunk:
    return chunks_pb2.ReasoningEndChunk(
        id=c.id,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="ReasoningEndChunk.provider_metadata"
        ),
    )


def _tool_input_start_to_proto(c: ToolInputStartChunk) -> chunks_pb2.ToolInputStartChunk:
    return chunks_pb2.ToolInputStartChunk(
        id=c.id,
        tool_name=c.tool_name,
        provider_executed=c.provider_executed,
        title=c.title,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="ToolInputStartChunk.provider_metadata"
        ),
    )


def _tool_input_delta_to_proto(c: ToolInputDeltaChunk) -> chunks_pb2.ToolInputDeltaChunk:
    return chunks_pb2.ToolInputDeltaChunk(
        id=c.id,
        delta=c.delta,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="ToolInputDeltaChunk.provider_metadata"
        ),
    )


def _tool_input_end_to_proto(c: ToolInputEndChunk) -> chunks_pb2.ToolInputEndChunk:
    return chunks_pb2.ToolInputEndChunk(
        id=c.id,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="ToolInputEndChunk.provider_metadata"
        ),
    )


def _tool_call_to_proto(c: ToolCallChunk) -> chunks_pb2.ToolCallChunk:
    return chunks_pb2.ToolCallChunk(
        tool_call_id=c.tool_call_id,
        tool_name=c.tool_name,
        input=optional_value_to_proto(c.input, path="ToolCallChunk.input"),
        provider_executed=c.provider_executed,
        invalid=c.invalid,
        error_text=c.error_text,
        title=c.title,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="ToolCallChunk.provider_metadata"
        ),
    )


def _tool_result_to_proto(c: ToolResultChunk) -> chunks_pb2.ToolResultChunk:
    return chunks_pb2.ToolResultChunk(
        tool_call_id=c.tool_call_id,
        tool_name=c.tool_name,
        input=optional_value_to_proto(c.input, path="ToolResultChunk.input"),
        output=optional_value_to_proto(c.output, path="ToolResultChunk.output"),
        provider_executed=c.provider_executed,
        preliminary=c.preliminary,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="ToolResultChunk.provider_metadata"
        ),
    )


def _tool_error_to_proto(c: ToolErrorChunk) -> chunks_pb2.ToolErrorChunk:
    return chunks_pb2.ToolErrorChunk(
        tool_call_id=c.tool_call_id,
        tool_name=c.tool_name,
        input=optional_value_to_proto(c.input, path="ToolErrorChunk.input"),
        error_text=c.error_text,
        provider_executed=c.provider_executed,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="ToolErrorChunk.provider_metadata"
        ),
    )


def _source_to_proto(c: SourceChunk) -> chunks_pb2.SourceChunk:
    meta = optional_struct_to_proto(c.provider_metadata, path="SourceChunk.provider_metadata")
    match c.source:
        case UrlSource(url=url, title=title):
            url_source = chunks_pb2.UrlSource(url=url, title=title)
            return chunks_pb2.SourceChunk(id=c.id, url=url_source, provider_metadata=meta)
        case DocumentSource(media_type=media_type, title=title, filename=filename):
            document = chunks_pb2.DocumentSource(
                media_type=media_type, title=title, filename=filename
            )
            return chunks_pb2.SourceChunk(id=c.id, document=document, provider_metadata=meta)
        case _:
            assert_never(c.source)


def _file_to_proto(c: FileChunk) -> chunks_pb2.FileChunk:
    return chunks_pb2.FileChunk(
        media_type=c.media_type,
        url=c.url,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="FileChunk.provider_metadata"
        ),
    )


def _reasoning_file_to_proto(c: ReasoningFileChunk) -> chunks_pb2.ReasoningFileChunk:
    return chunks_pb2.ReasoningFileChunk(
        media_type=c.media_type,
        url=c.url,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="ReasoningFileChunk.provider_metadata"
        ),
    )


def _data_to_proto(c: DataChunk) -> chunks_pb2.DataChunk:
    return chunks_pb2.DataChunk(
        name=c.name,
        id=c.id,
        data=optional_value_to_proto(c.data, path="DataChunk.data"),
        transient=c.transient,
    )


def _response_to_proto(response: ResponseInfo | None) -> chunks_pb2.ResponseInfo | None:
    if response is None:
        return None
    return chunks_pb2.ResponseInfo(id=response.id, model_id=response.model_id)


def _finish_step_to_proto(c: FinishStepChunk) -> chunks_pb2.FinishStepChunk:
    return chunks_pb2.FinishStepChunk(
        usage=usage_to_proto(c.usage),
        finish_reason=finish_reason_to_proto(c.finish_reason),
        raw_finish_reason=c.raw_finish_reason,
        provider_metadata=optional_struct_to_proto(
            c.provider_metadata, path="FinishStepChunk.provider_metadata"
        ),
        response=_response_to_proto(c.response),
    )


def _finish_to_proto(c: FinishChunk) -> chunks_pb2.FinishChunk:
    return chunks_pb2.FinishChunk(
        finish_reason=finish_reason_to_proto(c.finish_reason),
        raw_finish_reason=c.raw_finish_reason,
        total_usage=usage_to_proto(c.total_usage),
    )


def chunk_to_proto(chunk: StepStreamChunk) -> chunks_pb2.StepStreamChunk:
    """Convert a domain stream chunk to ``pai.v1.StepStreamChunk``.

    Args:
        chunk: Any arm of the :data:`~pai_grpc.domain.StepStreamChunk` union.

    Returns:
        The proto chunk with the matching oneof arm set.

    Raises:
        ValueError: A JSON field is not strict JSON, or an integer does not
            fit its proto field.
    """
    pb = chunks_pb2.StepStreamChunk
    match chunk:
        case StartChunk():
            return pb(start=chunks_pb2.StartChunk())
        case TextStartChunk():
            return pb(text_start=_text_start_to_proto(chunk))
        case TextDeltaChunk():
            return pb(text_delta=_text_delta_to_proto(chunk))
        case TextEndChunk():
            return pb(text_end=_text_end_to_proto(chunk))
        case ReasoningStartChunk():
            return pb(reasoning_start=_reasoning_start_to_proto(chunk))
        case ReasoningDeltaChunk():
            return pb(reasoning_delta=_reasoning_delta_to_proto(chunk))
        case ReasoningEndChunk():
            return pb(reasoning_end=_reasoning_end_to_proto(chunk))
        case ToolInputStartChunk():
            return pb(tool_input_start=_tool_input_start_to_proto(chunk))
        case ToolInputDeltaChunk():
            return pb(tool_input_delta=_tool_input_delta_to_proto(chunk))
        case ToolInputEndChunk():
            return pb(tool_input_end=_tool_input_end_to_proto(chunk))
        case ToolCallChunk():
            return pb(tool_call=_tool_call_to_proto(chunk))
        case ToolResultChunk():
            return pb(tool_result=_tool_result_to_proto(chunk))
        case ToolErrorChunk():
            return pb(tool_error=_tool_error_to_proto(chunk))
        case ToolApprovalRequestChunk(approval_id=approval_id, tool_call_id=tool_call_id):
            return pb(
                tool_approval_request=chunks_pb2.ToolApprovalRequestChunk(
                    approval_id=approval_id, tool_call_id=tool_call_id
                )
            )
        case ToolOutputDeniedChunk(tool_call_id=tool_call_id):
            return pb(
                tool_output_denied=chunks_pb2.ToolOutputDeniedChunk(tool_call_id=tool_call_id)
            )
        case SourceChunk():
            return pb(source=_source_to_proto(chunk))
        case FileChunk():
            return pb(file=_file_to_proto(chunk))
        case ReasoningFileChunk():
            return pb(reasoning_file=_reasoning_file_to_proto(chunk))
        case DataChunk():
            return pb(data=_data_to_proto(chunk))
        case StartStepChunk(warnings=warnings):
            return pb(start_step=chunks_pb2.StartStepChunk(warnings=warnings))
        case FinishStepChunk():
            return pb(finish_step=_finish_step_to_proto(chunk))
        case FinishChunk():
            return pb(finish=_finish_to_proto(chunk))
        case ErrorChunk(reason=reason, message=message):
            return pb(error=chunks_pb2.ErrorChunk(reason=reason, message=message))
        case AbortChunk(reason=reason):
            return pb(abort=chunks_pb2.AbortChunk(reason=reason))
        case _:
            assert_never(chunk)


# -------------------------------------------------------------------- from proto


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
