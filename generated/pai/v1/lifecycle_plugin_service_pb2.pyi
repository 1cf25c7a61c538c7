from google.protobuf import struct_pb2 as _struct_pb2
from pai.v1 import chunks_pb2 as _chunks_pb2
from pai.v1 import lifecycle_pb2 as _lifecycle_pb2
from pai.v1 import model_pb2 as _model_pb2
from pai.v1 import threads_pb2 as _threads_pb2
from pai.v1 import tools_pb2 as _tools_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StreamMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STREAM_MODE_UNSPECIFIED: _ClassVar[StreamMode]
    STREAM_MODE_PASS_THROUGH: _ClassVar[StreamMode]
    STREAM_MODE_TRANSFORM: _ClassVar[StreamMode]
STREAM_MODE_UNSPECIFIED: StreamMode
STREAM_MODE_PASS_THROUGH: StreamMode
STREAM_MODE_TRANSFORM: StreamMode

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ("name", "phases", "version", "accepts_chunk_batches", "prefetch_model_context", "unary_model_context")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_CHUNK_BATCHES_FIELD_NUMBER: _ClassVar[int]
    PREFETCH_MODEL_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    UNARY_MODEL_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    name: str
    phases: _containers.RepeatedScalarFieldContainer[_lifecycle_pb2.LifecyclePhase]
    version: str
    accepts_chunk_batches: bool
    prefetch_model_context: bool
    unary_model_context: bool
    def __init__(self, name: _Optional[str] = ..., phases: _Optional[_Iterable[_Union[_lifecycle_pb2.LifecyclePhase, str]]] = ..., version: _Optional[str] = ..., accepts_chunk_batches: _Optional[bool] = ..., prefetch_model_context: _Optional[bool] = ..., unary_model_context: _Optional[bool] = ...) -> None: ...

class ChunkBatch(_message.Message):
    __slots__ = ("chunks",)
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[_chunks_pb2.StepStreamChunk]
    def __init__(self, chunks: _Optional[_Iterable[_Union[_chunks_pb2.StepStreamChunk, _Mapping]]] = ...) -> None: ...

class HookFailed(_message.Message):
    __slots__ = ("reason", "message")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    message: str
    def __init__(self, reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class PrepareRunRequest(_message.Message):
    __slots__ = ("context", "latest_user_message", "input")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    LATEST_USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    context: _lifecycle_pb2.HookContext
    latest_user_message: _threads_pb2.LifecycleMessage
    input: _struct_pb2.Value
    def __init__(self, context: _Optional[_Union[_lifecycle_pb2.HookContext, _Mapping]] = ..., latest_user_message: _Optional[_Union[_threads_pb2.LifecycleMessage, _Mapping]] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class RunContinue(_message.Message):
    __slots__ = ("patch",)
    PATCH_FIELD_NUMBER: _ClassVar[int]
    patch: _model_pb2.RunPatch
    def __init__(self, patch: _Optional[_Union[_model_pb2.RunPatch, _Mapping]] = ...) -> None: ...

class PrepareRunResponse(_message.Message):
    __slots__ = ("continue_run", "respond", "complete", "fail")
    CONTINUE_RUN_FIELD_NUMBER: _ClassVar[int]
    RESPOND_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    FAIL_FIELD_NUMBER: _ClassVar[int]
    continue_run: RunContinue
    respond: _lifecycle_pb2.RespondDecision
    complete: _lifecycle_pb2.CompleteDecision
    fail: _lifecycle_pb2.FailDecision
    def __init__(self, continue_run: _Optional[_Union[RunContinue, _Mapping]] = ..., respond: _Optional[_Union[_lifecycle_pb2.RespondDecision, _Mapping]] = ..., complete: _Optional[_Union[_lifecycle_pb2.CompleteDecision, _Mapping]] = ..., fail: _Optional[_Union[_lifecycle_pb2.FailDecision, _Mapping]] = ...) -> None: ...

class ResolveModelContextStart(_message.Message):
    __slots__ = ("context", "through", "downstream")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    THROUGH_FIELD_NUMBER: _ClassVar[int]
    DOWNSTREAM_FIELD_NUMBER: _ClassVar[int]
    context: _lifecycle_pb2.HookContext
    through: _threads_pb2.LifecycleMessage
    downstream: ContextNextResult
    def __init__(self, context: _Optional[_Union[_lifecycle_pb2.HookContext, _Mapping]] = ..., through: _Optional[_Union[_threads_pb2.LifecycleMessage, _Mapping]] = ..., downstream: _Optional[_Union[ContextNextResult, _Mapping]] = ...) -> None: ...

class ContextNextResult(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_model_pb2.ModelMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[_model_pb2.ModelMessage, _Mapping]]] = ...) -> None: ...

class ResolveModelContextRequest(_message.Message):
    __slots__ = ("start", "next_result")
    START_FIELD_NUMBER: _ClassVar[int]
    NEXT_RESULT_FIELD_NUMBER: _ClassVar[int]
    start: ResolveModelContextStart
    next_result: ContextNextResult
    def __init__(self, start: _Optional[_Union[ResolveModelContextStart, _Mapping]] = ..., next_result: _Optional[_Union[ContextNextResult, _Mapping]] = ...) -> None: ...

class ContextNext(_message.Message):
    __slots__ = ("base",)
    BASE_FIELD_NUMBER: _ClassVar[int]
    base: _model_pb2.ModelMessageList
    def __init__(self, base: _Optional[_Union[_model_pb2.ModelMessageList, _Mapping]] = ...) -> None: ...

class ContextResult(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_model_pb2.ModelMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[_model_pb2.ModelMessage, _Mapping]]] = ...) -> None: ...

class ResolveModelContextResponse(_message.Message):
    __slots__ = ("next", "result", "failed")
    NEXT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    next: ContextNext
    result: ContextResult
    failed: HookFailed
    def __init__(self, next: _Optional[_Union[ContextNext, _Mapping]] = ..., result: _Optional[_Union[ContextResult, _Mapping]] = ..., failed: _Optional[_Union[HookFailed, _Mapping]] = ...) -> None: ...

class ResolveModelContextUnaryRequest(_message.Message):
    __slots__ = ("start",)
    START_FIELD_NUMBER: _ClassVar[int]
    start: ResolveModelContextStart
    def __init__(self, start: _Optional[_Union[ResolveModelContextStart, _Mapping]] = ...) -> None: ...

class ResolveModelContextUnaryResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_model_pb2.ModelMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[_model_pb2.ModelMessage, _Mapping]]] = ...) -> None: ...

class PrepareHistoryRewriteRequest(_message.Message):
    __slots__ = ("context", "rewrite", "metadata", "private_metadata")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    REWRITE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_METADATA_FIELD_NUMBER: _ClassVar[int]
    context: _lifecycle_pb2.HookContext
    rewrite: _lifecycle_pb2.HistoryRewrite
    metadata: _struct_pb2.Struct
    private_metadata: _struct_pb2.Struct
    def __init__(self, context: _Optional[_Union[_lifecycle_pb2.HookContext, _Mapping]] = ..., rewrite: _Optional[_Union[_lifecycle_pb2.HistoryRewrite, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., private_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class PrepareHistoryRewriteResponse(_message.Message):
    __slots__ = ("metadata_patch", "private_metadata_patch")
    METADATA_PATCH_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_METADATA_PATCH_FIELD_NUMBER: _ClassVar[int]
    metadata_patch: _struct_pb2.Struct
    private_metadata_patch: _struct_pb2.Struct
    def __init__(self, metadata_patch: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., private_metadata_patch: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class HistoryRewrittenRequest(_message.Message):
    __slots__ = ("context", "rewrite")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    REWRITE_FIELD_NUMBER: _ClassVar[int]
    context: _lifecycle_pb2.HookContext
    rewrite: _lifecycle_pb2.HistoryRewrite
    def __init__(self, context: _Optional[_Union[_lifecycle_pb2.HookContext, _Mapping]] = ..., rewrite: _Optional[_Union[_lifecycle_pb2.HistoryRewrite, _Mapping]] = ...) -> None: ...

class HistoryRewrittenResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PrepareModelStepRequest(_message.Message):
    __slots__ = ("context", "input")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    context: _lifecycle_pb2.HookContext
    input: _model_pb2.ModelStepRequest
    def __init__(self, context: _Optional[_Union[_lifecycle_pb2.HookContext, _Mapping]] = ..., input: _Optional[_Union[_model_pb2.ModelStepRequest, _Mapping]] = ...) -> None: ...

class StepContinue(_message.Message):
    __slots__ = ("patch",)
    PATCH_FIELD_NUMBER: _ClassVar[int]
    patch: _model_pb2.ModelStepPatch
    def __init__(self, patch: _Optional[_Union[_model_pb2.ModelStepPatch, _Mapping]] = ...) -> None: ...

class PrepareModelStepResponse(_message.Message):
    __slots__ = ("continue_step", "respond", "block")
    CONTINUE_STEP_FIELD_NUMBER: _ClassVar[int]
    RESPOND_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    continue_step: StepContinue
    respond: _lifecycle_pb2.RespondDecision
    block: _lifecycle_pb2.BlockDecision
    def __init__(self, continue_step: _Optional[_Union[StepContinue, _Mapping]] = ..., respond: _Optional[_Union[_lifecycle_pb2.RespondDecision, _Mapping]] = ..., block: _Optional[_Union[_lifecycle_pb2.BlockDecision, _Mapping]] = ...) -> None: ...

class AroundModelCallStart(_message.Message):
    __slots__ = ("context", "request")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    context: _lifecycle_pb2.HookContext
    request: _model_pb2.ModelStepRequest
    def __init__(self, context: _Optional[_Union[_lifecycle_pb2.HookContext, _Mapping]] = ..., request: _Optional[_Union[_model_pb2.ModelStepRequest, _Mapping]] = ...) -> None: ...

class ModelCallStarted(_message.Message):
    __slots__ = ("request",)
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: _model_pb2.ModelStepRequest
    def __init__(self, request: _Optional[_Union[_model_pb2.ModelStepRequest, _Mapping]] = ...) -> None: ...

class ModelCallFailed(_message.Message):
    __slots__ = ("reason", "message")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    message: str
    def __init__(self, reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class StreamEnd(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AroundModelCallRequest(_message.Message):
    __slots__ = ("start", "next_started", "next_failed", "chunk", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    NEXT_STARTED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FAILED_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: AroundModelCallStart
    next_started: ModelCallStarted
    next_failed: ModelCallFailed
    chunk: _chunks_pb2.StepStreamChunk
    end: StreamEnd
    def __init__(self, start: _Optional[_Union[AroundModelCallStart, _Mapping]] = ..., next_started: _Optional[_Union[ModelCallStarted, _Mapping]] = ..., next_failed: _Optional[_Union[ModelCallFailed, _Mapping]] = ..., chunk: _Optional[_Union[_chunks_pb2.StepStreamChunk, _Mapping]] = ..., end: _Optional[_Union[StreamEnd, _Mapping]] = ...) -> None: ...

class ModelCallNext(_message.Message):
    __slots__ = ("patch", "mode")
    PATCH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    patch: _model_pb2.ModelCallPatch
    mode: StreamMode
    def __init__(self, patch: _Optional[_Union[_model_pb2.ModelCallPatch, _Mapping]] = ..., mode: _Optional[_Union[StreamMode, str]] = ...) -> None: ...

class PassThrough(_message.Message):
    __slots__ = ("attempt",)
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    def __init__(self, attempt: _Optional[int] = ...) -> None: ...

class StreamSubscribe(_message.Message):
    __slots__ = ("attempt",)
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    def __init__(self, attempt: _Optional[int] = ...) -> None: ...

class AroundModelCallResponse(_message.Message):
    __slots__ = ("next", "pass_through", "chunk", "end", "subscribe", "failed")
    NEXT_FIELD_NUMBER: _ClassVar[int]
    PASS_THROUGH_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    next: ModelCallNext
    pass_through: PassThrough
    chunk: _chunks_pb2.StepStreamChunk
    end: StreamEnd
    subscribe: StreamSubscribe
    failed: HookFailed
    def __init__(self, next: _Optional[_Union[ModelCallNext, _Mapping]] = ..., pass_through: _Optional[_Union[PassThrough, _Mapping]] = ..., chunk: _Optional[_Union[_chunks_pb2.StepStreamChunk, _Mapping]] = ..., end: _Optional[_Union[StreamEnd, _Mapping]] = ..., subscribe: _Optional[_Union[StreamSubscribe, _Mapping]] = ..., failed: _Optional[_Union[HookFailed, _Mapping]] = ...) -> None: ...

class TransformStepStreamStart(_message.Message):
    __slots__ = ("context", "input")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    context: _lifecycle_pb2.HookContext
    input: _model_pb2.ModelStepRequest
    def __init__(self, context: _Optional[_Union[_lifecycle_pb2.HookContext, _Mapping]] = ..., input: _Optional[_Union[_model_pb2.ModelStepRequest, _Mapping]] = ...) -> None: ...

class TransformStepStreamRequest(_message.Message):
    __slots__ = ("start", "chunk", "end", "batch")
    START_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    start: TransformStepStreamStart
    chunk: _chunks_pb2.StepStreamChunk
    end: StreamEnd
    batch: ChunkBatch
    def __init__(self, start: _Optional[_Union[TransformStepStreamStart, _Mapping]] = ..., chunk: _Optional[_Union[_chunks_pb2.StepStreamChunk, _Mapping]] = ..., end: _Optional[_Union[StreamEnd, _Mapping]] = ..., batch: _Optional[_Union[ChunkBatch, _Mapping]] = ...) -> None: ...

class TransformStepStreamResponse(_message.Message):
    __slots__ = ("chunk", "ui_data", "abort", "end", "failed", "batch")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    UI_DATA_FIELD_NUMBER: _ClassVar[int]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    chunk: _chunks_pb2.StepStreamChunk
    ui_data: _chunks_pb2.DataChunk
    abort: _lifecycle_pb2.StepAbort
    end: StreamEnd
    failed: HookFailed
    batch: ChunkBatch
    def __init__(self, chunk: _Optional[_Union[_chunks_pb2.StepStreamChunk, _Mapping]] = ..., ui_data: _Optional[_Union[_chunks_pb2.DataChunk, _Mapping]] = ..., abort: _Optional[_Union[_lifecycle_pb2.StepAbort, _Mapping]] = ..., end: _Optional[_Union[StreamEnd, _Mapping]] = ..., failed: _Optional[_Union[HookFailed, _Mapping]] = ..., batch: _Optional[_Union[ChunkBatch, _Mapping]] = ...) -> None: ...

class BeforeToolCallRequest(_message.Message):
    __slots__ = ("context", "tool", "tool_call_id", "entry", "suspend_history", "input")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_HISTORY_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    context: _lifecycle_pb2.HookContext
    tool: _tools_pb2.ToolInfo
    tool_call_id: str
    entry: _tools_pb2.ToolExecutionEntry
    suspend_history: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    input: _struct_pb2.Value
    def __init__(self, context: _Optional[_Union[_lifecycle_pb2.HookContext, _Mapping]] = ..., tool: _Optional[_Union[_tools_pb2.ToolInfo, _Mapping]] = ..., tool_call_id: _Optional[str] = ..., entry: _Optional[_Union[_tools_pb2.ToolExecutionEntry, _Mapping]] = ..., suspend_history: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ReplaceInput(_message.Message):
    __slots__ = ("input",)
    INPUT_FIELD_NUMBER: _ClassVar[int]
    input: _struct_pb2.Value
    def __init__(self, input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class SkipToolCall(_message.Message):
    __slots__ = ("output",)
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    output: _struct_pb2.Value
    def __init__(self, output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class RejectToolCall(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class BeforeToolCallResponse(_message.Message):
    __slots__ = ("continue_call", "replace_input", "skip", "reject")
    CONTINUE_CALL_FIELD_NUMBER: _ClassVar[int]
    REPLACE_INPUT_FIELD_NUMBER: _ClassVar[int]
    SKIP_FIELD_NUMBER: _ClassVar[int]
    REJECT_FIELD_NUMBER: _ClassVar[int]
    continue_call: _lifecycle_pb2.ContinueDecision
    replace_input: ReplaceInput
    skip: SkipToolCall
    reject: RejectToolCall
    def __init__(self, continue_call: _Optional[_Union[_lifecycle_pb2.ContinueDecision, _Mapping]] = ..., replace_input: _Optional[_Union[ReplaceInput, _Mapping]] = ..., skip: _Optional[_Union[SkipToolCall, _Mapping]] = ..., reject: _Optional[_Union[RejectToolCall, _Mapping]] = ...) -> None: ...

class AfterToolResultRequest(_message.Message):
    __slots__ = ("context", "tool", "tool_call_id", "entry", "suspend_history", "input", "result")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_HISTORY_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    context: _lifecycle_pb2.HookContext
    tool: _tools_pb2.ToolInfo
    tool_call_id: str
    entry: _tools_pb2.ToolExecutionEntry
    suspend_history: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    input: _struct_pb2.Value
    result: _tools_pb2.ToolResult
    def __init__(self, context: _Optional[_Union[_lifecycle_pb2.HookContext, _Mapping]] = ..., tool: _Optional[_Union[_tools_pb2.ToolInfo, _Mapping]] = ..., tool_call_id: _Optional[str] = ..., entry: _Optional[_Union[_tools_pb2.ToolExecutionEntry, _Mapping]] = ..., suspend_history: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., result: _Optional[_Union[_tools_pb2.ToolResult, _Mapping]] = ...) -> None: ...

class ReplaceOutput(_message.Message):
    __slots__ = ("output",)
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    output: _struct_pb2.Value
    def __init__(self, output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class ReplaceMessage(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class AfterToolResultResponse(_message.Message):
    __slots__ = ("continue_result", "replace_output", "replace_message")
    CONTINUE_RESULT_FIELD_NUMBER: _ClassVar[int]
    REPLACE_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    REPLACE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    continue_result: _lifecycle_pb2.ContinueDecision
    replace_output: ReplaceOutput
    replace_message: ReplaceMessage
    def __init__(self, continue_result: _Optional[_Union[_lifecycle_pb2.ContinueDecision, _Mapping]] = ..., replace_output: _Optional[_Union[ReplaceOutput, _Mapping]] = ..., replace_message: _Optional[_Union[ReplaceMessage, _Mapping]] = ...) -> None: ...

class StepSummary(_message.Message):
    __slots__ = ("step_id", "index", "message", "finish_reason", "provider_metadata", "usage", "tool_calls")
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_METADATA_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    step_id: str
    index: int
    message: _threads_pb2.LifecycleMessage
    finish_reason: _chunks_pb2.FinishReason
    provider_metadata: _struct_pb2.Struct
    usage: _chunks_pb2.Usage
    tool_calls: _containers.RepeatedCompositeFieldContainer[_chunks_pb2.ToolCallChunk]
    def __init__(self, step_id: _Optional[str] = ..., index: _Optional[int] = ..., message: _Optional[_Union[_threads_pb2.LifecycleMessage, _Mapping]] = ..., finish_reason: _Optional[_Union[_chunks_pb2.FinishReason, str]] = ..., provider_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., usage: _Optional[_Union[_chunks_pb2.Usage, _Mapping]] = ..., tool_calls: _Optional[_Iterable[_Union[_chunks_pb2.ToolCallChunk, _Mapping]]] = ...) -> None: ...

class AfterStepRequest(_message.Message):
    __slots__ = ("context", "step", "request")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    context: _lifecycle_pb2.HookContext
    step: StepSummary
    request: _model_pb2.ModelStepRequest
    def __init__(self, context: _Optional[_Union[_lifecycle_pb2.HookContext, _Mapping]] = ..., step: _Optional[_Union[StepSummary, _Mapping]] = ..., request: _Optional[_Union[_model_pb2.ModelStepRequest, _Mapping]] = ...) -> None: ...

class NextStepDecision(_message.Message):
    __slots__ = ("append_model_messages", "replace_model_messages")
    APPEND_MODEL_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REPLACE_MODEL_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    append_model_messages: _model_pb2.ModelMessageList
    replace_model_messages: _model_pb2.ModelMessageList
    def __init__(self, append_model_messages: _Optional[_Union[_model_pb2.ModelMessageList, _Mapping]] = ..., replace_model_messages: _Optional[_Union[_model_pb2.ModelMessageList, _Mapping]] = ...) -> None: ...

class AfterStepResponse(_message.Message):
    __slots__ = ("next_step", "complete")
    NEXT_STEP_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    next_step: NextStepDecision
    complete: _lifecycle_pb2.CompleteDecision
    def __init__(self, next_step: _Optional[_Union[NextStepDecision, _Mapping]] = ..., complete: _Optional[_Union[_lifecycle_pb2.CompleteDecision, _Mapping]] = ...) -> None: ...
