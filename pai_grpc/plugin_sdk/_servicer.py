"""The plugin servicer: each RPC builds the phase input and runs the hook.

Hooks run exactly as they would in process (through ``compose_lifecycle``,
so decisions are validated the same way). Errors a hook raises travel back
as rich statuses (unary phases) or ``HookFailed`` messages (streaming
phases) and fail the run with the same reason as in process.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import grpc
from opentelemetry.trace import TracerProvider

from pai.v1 import hook_host_service_pb2_grpc, lifecycle_pb2, model_pb2
from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai.v1 import lifecycle_plugin_service_pb2_grpc as pb_grpc
from pai_grpc._wire import (
    ClientTls,
    Context,
    channel,
    fill_unimplemented,
    guard,
    pai_error_of,
    status_of,
)
from pai_grpc.convert import (
    after_step_result_to_proto,
    after_tool_result_result_to_proto,
    before_tool_call_result_to_proto,
    chunk_from_proto,
    chunk_to_proto,
    history_rewrite_from_proto,
    history_rewrite_patch_to_proto,
    hook_context_from_proto,
    lifecycle_message_from_proto,
    model_call_patch_to_proto,
    model_messages_from_proto,
    model_messages_to_proto,
    model_step_request_from_proto,
    phase_to_proto,
    prepare_model_step_result_to_proto,
    prepare_run_result_to_proto,
    step_abort_to_proto,
    step_summary_from_proto,
    struct_from_proto,
    tool_entry_from_proto,
    tool_info_from_proto,
    tool_result_from_proto,
    value_from_proto,
)
from pai_grpc.domain import DataChunk, JsonObject, ModelMessage, StepStreamChunk
from pai_grpc.errors import Conflict, InvalidArgument, ModelError, PaiError
from pai_grpc.lifecycle import (
    AbortSignal,
    AbortStep,
    AfterStepInput,
    AfterToolResultInput,
    AgentLifecycle,
    BeforeToolCallInput,
    HistoryRewrittenInput,
    InvalidDecision,
    ModelCallPatch,
    ModelStepRequest,
    ModelStepStreamResult,
    PrepareHistoryRewriteInput,
    PrepareModelStepInput,
    PrepareRunInput,
    ResolveModelContextInput,
    StepAbort,
    StepInfo,
    TransformStepStreamInput,
    UiDataWriter,
    VersionConflict,
    compose_lifecycle,
)
from pai_grpc.lifecycle.internal import (
    PHASES,
    ComposedLifecycle,
    Effective,
    coerce_patch,
    missing_text_id,
)
from pai_grpc.models import ModelCall, model_name, parse_model_name
from pai_grpc.plugin_sdk._remote import (
    RemoteHistory,
    RemoteRun,
    RemoteRunMetadata,
    RemoteThread,
    _Host,
)
from pai_grpc.plugin_sdk._session import _AttemptStream, _batch_chunks, _Session
from pai_grpc.telemetry import tracing

log = logging.getLogger("pai_grpc.plugin_sdk")

T = TypeVar("T")
_Tool = TypeVar("_Tool", bound=BeforeToolCallInput)


@dataclass(frozen=True)
class ModelRef:
    """A model named across the wire (``provider:model_id``); the runtime resolves it."""

    provider: str
    model_id: str

    @classmethod
    def parse(cls, name: str) -> ModelRef:
        """``provider:model_id`` as a reference."""
        provider, model_id = parse_model_name(name)
        if not provider or not model_id:
            raise ValueError(f"a model is named provider:model_id, not {name!r}")
        return cls(provider, model_id)

    async def stream(self, call: ModelCall) -> AsyncIterator[StepStreamChunk]:
        """Plugins route to models by patch; they never call the runtime's models."""
        raise NotImplementedError("a plugin cannot call the runtime's model directly")


def _to_status(exc: BaseException) -> grpc.Status:
    """A hook's error as a rich status (a facade version conflict as the runtime maps it)."""
    if isinstance(exc, VersionConflict):
        exc = Conflict("the thread changed; read it again and retry", reason="VERSION_CONFLICT")
    return status_of(pai_error_of(exc))


guarded = guard(_to_status, expected=(PaiError, VersionConflict, ValueError), log=log)


@dataclass(frozen=True)
class _Call:
    """One hook call: its remote facade and what its HookContext says."""

    host: _Host
    run: RemoteRun
    thread: RemoteThread
    step: StepInfo | None
    runtime_context: JsonObject | None


class PluginServicer(pb_grpc.LifecyclePluginServiceServicer):
    """Hosts an AgentLifecycle: each RPC builds the phase input and runs the hook.

    ``host_tls`` secures the channel the hooks' facades call HookHostService on.
    """

    def __init__(
        self,
        lifecycle: AgentLifecycle,
        *,
        name: str | None = None,
        host_tls: ClientTls | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self._hooks = compose_lifecycle(lifecycle)
        self._host_tls = host_tls
        #: Callbacks to the hook host carry the hook call's trace (None: the global provider).
        self._tracer_provider = tracer_provider
        self._phases = lifecycle.phases()
        self._prefetch = _prefetches(lifecycle)
        self._name = name or lifecycle.name or type(lifecycle).__name__
        #: host target -> its channel and stub (a stub per call cost ~14 callables to build).
        self._channels: dict[str, tuple[grpc.aio.Channel, Any]] = {}

    async def close(self) -> None:
        """Close the channels to hook hosts."""
        for open_channel, _ in self._channels.values():
            await open_channel.close()
        self._channels.clear()

    def _host(self, ctx: lifecycle_pb2.HookContext) -> _Host:
        opened = self._channels.get(ctx.host_target)
        if opened is None:
            host_channel = channel(
                ctx.host_target,
                self._host_tls,
                interceptors=tracing.client_interceptors(tracer_provider=self._tracer_provider),
            )
            opened = (host_channel, hook_host_service_pb2_grpc.HookHostServiceStub(host_channel))
            self._channels[ctx.host_target] = opened
        return _Host(opened[1], ctx.capability_token, ctx.thread_id)

    def _call(self, ctx: lifecycle_pb2.HookContext) -> _Call:
        """A hook call's context, with the remote facade bound to its capability token."""
        call = hook_context_from_proto(ctx)
        host = self._host(ctx)
        if call.run is None:
            raise InvalidArgument.field("context.run", "a hook call with a facade names its run")
        run = RemoteRun(
            run_id=call.run.run_id,
            thread_id=call.run.thread_id,
            initiator=call.run.initiator,
            started_at=call.run.started_at,
            execution=call.run.execution,
            metadata=RemoteRunMetadata(host, private=False),
            private_metadata=RemoteRunMetadata(host, private=True),
        )
        return _Call(host, run, RemoteThread(host), call.step, call.runtime_context)

    def _encode(self, phase: str, fn: Callable[[Any], T], value: Any) -> T:
        """A hook's answer on the wire; one that cannot be encoded is an invalid decision."""
        try:
            return fn(value)
        except (ValueError, TypeError, AttributeError) as e:
            raise InvalidDecision(self._name, phase, str(e)) from e

    def _require(self, phase: str) -> None:
        if phase not in self._phases:
            raise PaiError(f"this plugin does not implement {phase}", reason="UNIMPLEMENTED")

    # ---- Describe and unary phases ------------------------------------------

    async def Describe(self, request: pb.DescribeRequest, context: Context) -> pb.DescribeResponse:
        """The plugin's name, phases and options (chunk batches, context prefetch)."""
        return pb.DescribeResponse(
            name=self._name,
            phases=[phase_to_proto(p) for p in PHASES if p in self._phases],
            version="1",
            accepts_chunk_batches=True,
            prefetch_model_context=self._prefetch,
            # With the prefetch, a unary call answers the common case in one round
            # trip; without it, next() would cost a call back to the host anyway.
            unary_model_context=self._prefetch,
        )

    @guarded
    async def PrepareRun(
        self, request: pb.PrepareRunRequest, context: Context
    ) -> pb.PrepareRunResponse:
        """prepare_run."""
        self._require("prepare_run")
        latest = (
            lifecycle_message_from_proto(request.latest_user_message)
            if request.HasField("latest_user_message")
            else None
        )
        c = self._call(request.context)
        decision = await self._hooks.prepare_run(
            PrepareRunInput(
                run=c.run,
                thread=c.thread,
                runtime_context=c.runtime_context,
                signal=AbortSignal(),
                latest_user_message=latest,
                input=value_from_proto(request.input) if request.HasField("input") else None,
            )
        )
        return self._encode("prepare_run", prepare_run_result_to_proto, decision)

    @guarded
    async def PrepareModelStep(
        self, request: pb.PrepareModelStepRequest, context: Context
    ) -> pb.PrepareModelStepResponse:
        """prepare_model_step."""
        self._require("prepare_model_step")
        c = self._call(request.context)
        decision = await self._hooks.prepare_model_step(
            PrepareModelStepInput(
                run=c.run,
                thread=c.thread,
                runtime_context=c.runtime_context,
                signal=AbortSignal(),
                step=c.step,
                input=_request(request.input, c.runtime_context),
            )
        )
        return self._encode("prepare_model_step", prepare_model_step_result_to_proto, decision)

    def _tool_input(
        self, kind: type[_Tool], request: pb.BeforeToolCallRequest | pb.AfterToolResultRequest
    ) -> _Tool:
        """The input of a tool phase (after_tool_result adds the result)."""
        c = self._call(request.context)
        return kind(
            run=c.run,
            thread=c.thread,
            runtime_context=c.runtime_context,
            signal=AbortSignal(),
            step=c.step,
            tool=tool_info_from_proto(request.tool),
            tool_call_id=request.tool_call_id,
            entry=tool_entry_from_proto(request.entry),
            suspend_history=[value_from_proto(v) for v in request.suspend_history],
            input=value_from_proto(request.input) if request.HasField("input") else None,
        )

    @guarded
    async def BeforeToolCall(
        self, request: pb.BeforeToolCallRequest, context: Context
    ) -> pb.BeforeToolCallResponse:
        """before_tool_call."""
        self._require("before_tool_call")
        decision = await self._hooks.before_tool_call(
            self._tool_input(BeforeToolCallInput, request)
        )
        return self._encode("before_tool_call", before_tool_call_result_to_proto, decision)

    @guarded
    async def AfterToolResult(
        self, request: pb.AfterToolResultRequest, context: Context
    ) -> pb.AfterToolResultResponse:
        """after_tool_result."""
        self._require("after_tool_result")
        decision = await self._hooks.after_tool_result(
            replace(
                self._tool_input(AfterToolResultInput, request),
                result=tool_result_from_proto(request.result),
            )
        )
        return self._encode("after_tool_result", after_tool_result_result_to_proto, decision)

    @guarded
    async def AfterStep(
        self, request: pb.AfterStepRequest, context: Context
    ) -> pb.AfterStepResponse:
        """after_step."""
        self._require("after_step")
        c = self._call(request.context)
        decision = await self._hooks.after_step(
            AfterStepInput(
                run=c.run,
                thread=c.thread,
                runtime_context=c.runtime_context,
                signal=AbortSignal(),
                step=step_summary_from_proto(request.step),
                request=_request(request.request, c.runtime_context),
            )
        )
        return self._encode("after_step", after_step_result_to_proto, decision)

    @guarded
    async def PrepareHistoryRewrite(
        self, request: pb.PrepareHistoryRewriteRequest, context: Context
    ) -> pb.PrepareHistoryRewriteResponse:
        """prepare_history_rewrite."""
        self._require("prepare_history_rewrite")
        rewrite = history_rewrite_from_proto(request.rewrite)
        call = hook_context_from_proto(request.context)
        patch = await self._hooks.prepare_history_rewrite(
            PrepareHistoryRewriteInput(
                thread_id=call.thread_id,
                rewrite=rewrite,
                metadata=struct_from_proto(request.metadata),
                private_metadata=struct_from_proto(request.private_metadata),
                runtime_context=call.runtime_context,
            )
        )
        return self._encode("prepare_history_rewrite", history_rewrite_patch_to_proto, patch)

    @guarded
    async def HistoryRewritten(
        self, request: pb.HistoryRewrittenRequest, context: Context
    ) -> pb.HistoryRewrittenResponse:
        """history_rewritten."""
        self._require("history_rewritten")
        rewrite = history_rewrite_from_proto(request.rewrite)
        call = hook_context_from_proto(request.context)
        try:
            await self._hooks.history_rewritten(
                HistoryRewrittenInput(
                    thread_id=call.thread_id, rewrite=rewrite, runtime_context=call.runtime_context
                )
            )
        except BaseExceptionGroup as group:
            # Every part ran; report their failures together, as in process.
            message = "; ".join(str(e) for e in group.exceptions)
            raise PaiError(message, reason="HOOK_FAILED") from group
        return pb.HistoryRewrittenResponse()

    # ---- streaming phases -------------------------------------------------------

    @guarded
    async def ResolveModelContext(
        self, requests: AsyncIterator[pb.ResolveModelContextRequest], context: Context
    ) -> AsyncIterator[pb.ResolveModelContextResponse]:
        """resolve_model_context: next()/next(base) cross the wire as messages.

        A prefetched ``start.downstream`` is next()'s memoised result, so the
        hook's first next() resolves without asking the runtime.
        """
        self._require("resolve_model_context")
        session = _Session(requests, pb.ResolveModelContextResponse)
        start = await session.first("start")

        async def ask(base: list[ModelMessage] | None) -> list[ModelMessage]:
            next_ = pb.ContextNext()
            if base is not None:
                next_.base.messages.extend(model_messages_to_proto(base))
            session.send(pb.ResolveModelContextResponse(next=next_))
            reply = await session.expect("next_result")
            return model_messages_from_proto(reply.messages)

        async def run() -> None:
            encoded = await self._resolve_context(start, self._call(start.context), ask)
            session.send(pb.ResolveModelContextResponse(result=pb.ContextResult(messages=encoded)))
            session.finish()

        async for reply in session.run(run()):
            yield reply

    @guarded
    async def ResolveModelContextUnary(
        self, request: pb.ResolveModelContextUnaryRequest, context: Context
    ) -> pb.ResolveModelContextUnaryResponse:
        """resolve_model_context in one call: next() is the prefetched ``downstream``.

        A next() the request does not answer (next(base), or next() when
        nothing was prefetched) is asked of the runtime through its hook host
        (``ResolveModelContextNext``), so the hook runs once whatever it asks.
        """
        self._require("resolve_model_context")
        start = request.start
        c = self._call(start.context)

        async def ask(base: list[ModelMessage] | None) -> list[ModelMessage]:
            fields: dict[str, Any] = {}
            if base is not None:
                fields["base"] = model_pb2.ModelMessageList(messages=model_messages_to_proto(base))
            reply = await c.host.call("ResolveModelContextNext", **fields)
            return model_messages_from_proto(reply.messages)

        encoded = await self._resolve_context(start, c, ask)
        return pb.ResolveModelContextUnaryResponse(messages=encoded)

    async def _resolve_context(
        self,
        start: pb.ResolveModelContextStart,
        c: _Call,
        ask: Callable[[list[ModelMessage] | None], Awaitable[list[ModelMessage]]],
    ) -> list[model_pb2.ModelMessage]:
        """Run the resolver; ``ask`` gets next() / next(base) from the runtime.

        next() is memoised (RMC-02): a prefetched ``start.downstream`` is its
        result, so the hook's first next() resolves without asking.
        """
        through = lifecycle_message_from_proto(start.through) if start.HasField("through") else None
        memo: list[list[ModelMessage]] = []
        if start.HasField("downstream"):
            memo.append(model_messages_from_proto(start.downstream.messages))

        async def next_(base: list[ModelMessage] | None = None) -> list[ModelMessage]:
            if base is None and memo:
                return list(memo[0])
            result = await ask(base)
            if base is None:
                memo.append(result)
            return list(result)

        resolved = await self._hooks.resolve_model_context(
            ResolveModelContextInput(
                run=c.run,
                thread=c.thread,
                runtime_context=c.runtime_context,
                signal=AbortSignal(),
                step=c.step,
                history=RemoteHistory(c.host, through),
            ),
            next_,
        )
        return self._encode("resolve_model_context", model_messages_to_proto, resolved)

    @guarded
    async def AroundModelCall(
        self, requests: AsyncIterator[pb.AroundModelCallRequest], context: Context
    ) -> AsyncIterator[pb.AroundModelCallResponse]:
        """around_model_call: next(patch), then pass-through, transform or an own answer."""
        self._require("around_model_call")
        session = _Session(requests, pb.AroundModelCallResponse)
        start = await session.first("start")
        request = _request(start.request, hook_context_from_proto(start.context).runtime_context)
        attempts: list[_AttemptStream] = []

        async def next_(patch: Any = None) -> ModelStepStreamResult:
            ask = pb.ModelCallNext(mode=pb.STREAM_MODE_UNSPECIFIED)
            if isinstance(patch, Effective):
                if len(patch.request.attempt_signals) > len(request.attempt_signals):
                    # Dropping it would leave the attempt without the deadline the
                    # hook asked for: refuse, as a raw ModelCallPatch(signal=...) is.
                    raise InvalidDecision(
                        self._name,
                        "around_model_call",
                        "ModelCallPatch.signal: an AbortSignal cannot cross the wire; "
                        "use ModelCallPatch.timeout",
                    )
                # The composed chain's complete request: send what it changed.
                patch = _diff_patch(request, patch.request)
            elif patch is not None and not isinstance(patch, ModelCallPatch):
                patch = coerce_patch(patch, ModelCallPatch, where="around_model_call")
            if patch is not None:
                ask.patch.CopyFrom(model_call_patch_to_proto(patch))
            session.send(pb.AroundModelCallResponse(next=ask))
            kind, reply = await session.expect_any("next_started", "next_failed")
            if kind == "next_failed":
                raise ModelError(reply.message, reason=reply.reason)
            attempt = _AttemptStream(session, len(attempts))
            attempts.append(attempt)
            return ModelStepStreamResult(stream=attempt)

        async def run() -> None:
            result = await self._hooks.around_model_call(request, next_)
            stream = result.stream
            if isinstance(stream, _AttemptStream) and stream in attempts and not stream.started:
                # An attempt returned unchanged, named by its index: the runtime then
                # knows its source request (the effective request, the tool authority).
                passed = pb.PassThrough(attempt=stream.index)
                session.send(pb.AroundModelCallResponse(pass_through=passed))
                session.finish()
                return
            async for chunk in stream:
                wire = self._encode("around_model_call", chunk_to_proto, chunk)
                session.send(pb.AroundModelCallResponse(chunk=wire))
            session.send(pb.AroundModelCallResponse(end=pb.StreamEnd()))
            session.finish()

        async for reply in session.run(run()):
            yield reply

    @guarded
    async def TransformStepStream(
        self, requests: AsyncIterator[pb.TransformStepStreamRequest], context: Context
    ) -> AsyncIterator[pb.TransformStepStreamResponse]:
        """transform_step_stream: chunks in, chunks out; ui data and abort as messages."""
        self._require("transform_step_stream")
        session = _Session(requests, pb.TransformStepStreamResponse, combine=_batch_chunks)
        start = await session.first("start")

        async def upstream() -> AsyncIterator[StepStreamChunk]:
            while True:
                kind, reply = await session.expect_any("chunk", "batch", "end")
                if kind == "end":
                    return
                if kind == "batch":
                    for chunk in reply.chunks:
                        yield chunk_from_proto(chunk)
                else:
                    yield chunk_from_proto(reply)

        def write(chunk: DataChunk) -> None:
            if not isinstance(chunk, DataChunk):
                raise InvalidDecision(
                    "ui_data", "transform_step_stream", "ui_data.write() takes data chunks"
                )
            wire = self._encode("transform_step_stream", chunk_to_proto, chunk)
            session.send(pb.TransformStepStreamResponse(ui_data=wire.data))

        async def abort(decision: StepAbort) -> Any:
            if not isinstance(decision, StepAbort):
                raise InvalidDecision(
                    self._name, "transform_step_stream", "abort() takes a StepAbort"
                )
            wire = self._encode("transform_step_stream", step_abort_to_proto, decision)
            session.send(pb.TransformStepStreamResponse(abort=wire))
            raise AbortStep(decision)

        async def run() -> None:
            c = self._call(start.context)
            transformed = self._hooks.transform_step_stream(
                TransformStepStreamInput(
                    run=c.run,
                    thread=c.thread,
                    runtime_context=c.runtime_context,
                    signal=AbortSignal(),
                    step=c.step,
                    stream=upstream(),
                    input=_request(start.input, c.runtime_context)
                    if start.HasField("input")
                    else None,
                    ui_data=UiDataWriter(write),
                    abort=abort,
                )
            )
            try:
                async for chunk in transformed:
                    _check_text_id(self._name, chunk)
                    wire = self._encode("transform_step_stream", chunk_to_proto, chunk)
                    session.send(pb.TransformStepStreamResponse(chunk=wire))
            except AbortStep:
                session.finish()  # the abort message is the answer
                return
            session.send(pb.TransformStepStreamResponse(end=pb.StreamEnd()))
            session.finish()

        async for reply in session.run(run()):
            yield reply


fill_unimplemented(PluginServicer, "pai.v1.LifecyclePluginService")


def _prefetches(lifecycle: AgentLifecycle) -> bool:
    """Whether the served resolve_model_context always begins with the runtime's next().

    A composition does when every part with a resolver declares
    ``prefetch_model_context``: each one's first next() runs the next resolver,
    and the innermost one's reaches the runtime.
    """
    parts = lifecycle.parts if isinstance(lifecycle, ComposedLifecycle) else [lifecycle]
    resolvers = [p for p in parts if "resolve_model_context" in p.phases()]
    return bool(resolvers) and all(p.prefetch_model_context for p in resolvers)


def _request(wire: Any, runtime_context: JsonObject | None) -> ModelStepRequest:
    """A model-step request from the wire, with the runtime context of the hook call."""
    # The plugin's own signal for this hook call (the runtime's cannot cross the wire).
    return model_step_request_from_proto(
        wire, ModelRef.parse, runtime_context=runtime_context, signal=AbortSignal()
    )


def _check_text_id(plugin: str, chunk: Any) -> None:
    """Text ids are required on every text boundary (TSS-05), checked before encoding."""
    if problem := missing_text_id(chunk):
        raise InvalidDecision(plugin, "transform_step_stream", problem)


#: The fields a sparse model-call patch can change (the route's are re-sent with a new model).
_FIELDS = ("instructions", "messages", "tools", *ModelStepRequest.ROUTE_FIELDS, "timeout")


def _diff_patch(original: ModelStepRequest, effective: ModelStepRequest) -> ModelCallPatch | None:
    """The sparse patch that turns ``original`` into ``effective`` on the runtime side.

    Patches only ever merge settings and provider options (never remove
    keys), so sending the effective values reproduces them exactly. A changed
    model is sent with every route field, since the runtime starts a fresh
    route for it.
    """
    changes: dict[str, Any] = {}
    if model_name(original.model) != model_name(effective.model):
        changes["model"] = effective.model
        changes.update({f: getattr(effective, f) for f in ModelStepRequest.ROUTE_FIELDS})
    for name in _FIELDS:
        if name not in changes and getattr(original, name) != getattr(effective, name):
            changes[name] = getattr(effective, name)
    return ModelCallPatch(**changes) if changes else None
