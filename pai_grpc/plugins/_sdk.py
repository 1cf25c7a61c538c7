"""The Python plugin SDK: host any AgentLifecycle as a LifecyclePluginService.

::

    server = await serve_plugin(MyGuard(), "0.0.0.0:7070")
    await server.wait()

Hooks run exactly as they would in process (through ``compose_lifecycle``,
so decisions are validated the same way); their ``thread``, ``run`` and
``history`` are proxies calling the runtime's HookHostService with the
capability token of the current hook call. Errors a hook raises travel back
as rich statuses and fail the run with the same reason as in process.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from pai.v1 import hook_host_service_pb2, hook_host_service_pb2_grpc, lifecycle_pb2
from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai.v1 import lifecycle_plugin_service_pb2_grpc as pb_grpc
from pai_grpc.convert import (
    after_step_result_to_proto,
    after_tool_result_result_to_proto,
    before_tool_call_result_to_proto,
    chunk_from_proto,
    chunk_to_proto,
    history_rewrite_from_proto,
    history_rewrite_patch_to_proto,
    lifecycle_message_from_proto,
    message_view_to_proto,
    model_call_patch_to_proto,
    model_messages_from_proto,
    model_messages_to_proto,
    model_step_request_from_proto,
    optional_timestamp_from_proto,
    part_to_proto,
    phase_to_proto,
    prepare_model_step_result_to_proto,
    prepare_run_result_to_proto,
    role_to_proto,
    run_initiator_from_proto,
    run_operation_from_proto,
    sort_order_to_proto,
    step_abort_to_proto,
    step_summary_from_proto,
    struct_from_proto,
    struct_to_proto,
    tool_entry_from_proto,
    tool_info_from_proto,
    tool_result_from_proto,
    value_from_proto,
)
from pai_grpc.domain import (
    DataChunk,
    JsonObject,
    LifecycleMessage,
    MessagePart,
    ModelMessage,
    StepStreamChunk,
    Visibility,
)
from pai_grpc.domain import (
    MessageView as View,
)
from pai_grpc.errors import (
    FailedPrecondition,
    InvalidArgument,
    ModelError,
    NotFoundError,
    PaiError,
    PermissionDenied,
)
from pai_grpc.lifecycle import (
    PHASES,
    AbortSignal,
    AbortStep,
    AfterStepInput,
    AfterToolResultInput,
    AgentLifecycle,
    BeforeToolCallInput,
    ContextProjection,
    Execution,
    FacadeClosed,
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
    coerce_patch,
    compose_lifecycle,
    missing_text_id,
)
from pai_grpc.lifecycle._compose import Effective
from pai_grpc.lifecycle._contract import ContractViolation
from pai_grpc.models import ModelCall, model_name, parse_model_name, to_model_messages
from pai_grpc.plugins._errors import error_info
from pai_grpc.server._errors import Context, fill_unimplemented, guarded
from storage import Page, VersionConflict

log = logging.getLogger("pai_grpc.plugins.sdk")

T = TypeVar("T")
#: How long a finished streaming hook waits for the runtime to half-close.
DRAIN_SECONDS = 5.0


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


# ---- the facade, over HookHostService ---------------------------------------------------


def _hook_host_error(err: grpc.aio.AioRpcError, thread_id: str) -> Exception:
    """The exception a HookHostService failure raises inside the hook (as in process)."""
    info = error_info(err)
    reason, message = info or (err.code().name, err.details() or "")
    if reason == "VERSION_CONFLICT":
        return VersionConflict(thread_id, "the expected state", "a newer state")
    if reason in ("FACADE_CLOSED", "LEASE_LOST", "VISIBILITY_NOT_ALLOWED", "THREAD_GONE"):
        return FacadeClosed(message, reason=reason)
    match err.code():
        case grpc.StatusCode.PERMISSION_DENIED:
            return PermissionDenied(message, reason=reason)
        case grpc.StatusCode.INVALID_ARGUMENT if reason == "CONTRACT_VIOLATION":
            return ContractViolation(message, reason=reason)
        case grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidArgument(message, reason=reason)
        case grpc.StatusCode.FAILED_PRECONDITION:
            return FailedPrecondition(message, reason=reason)
        case grpc.StatusCode.NOT_FOUND:
            return NotFoundError("resource", message)
    return PaiError(message, reason=reason)


class _Host:
    """One hook call's HookHostService client (token and thread bound)."""

    def __init__(
        self, stub: hook_host_service_pb2_grpc.HookHostServiceStub, token: str, thread_id: str
    ) -> None:
        self.stub = stub
        self.token = token
        self.thread_id = thread_id

    async def call(self, method: str, **fields: Any) -> Any:
        request_type = getattr(hook_host_service_pb2, f"{method}Request")
        request = request_type(capability_token=self.token, thread_id=self.thread_id, **fields)
        try:
            return await getattr(self.stub, method)(request)
        except grpc.aio.AioRpcError as e:
            raise _hook_host_error(e, self.thread_id) from None


def _lifecycle_messages(items: Sequence[Any]) -> list[LifecycleMessage]:
    return [lifecycle_message_from_proto(m) for m in items]


_TARGET = {
    ("thread", False): hook_host_service_pb2.METADATA_TARGET_THREAD,
    ("thread", True): hook_host_service_pb2.METADATA_TARGET_THREAD_PRIVATE,
    ("run", False): hook_host_service_pb2.METADATA_TARGET_RUN,
    ("run", True): hook_host_service_pb2.METADATA_TARGET_RUN_PRIVATE,
}


def _append_message(
    role: str,
    parts: Sequence[MessagePart],
    visibility: Visibility | dict[str, bool] | None,
    metadata: JsonObject | None,
    private_metadata: JsonObject | None,
) -> hook_host_service_pb2.AppendMessage:
    vis = visibility.model_dump() if isinstance(visibility, Visibility) else dict(visibility or {})
    try:
        message = hook_host_service_pb2.AppendMessage(
            role=role_to_proto(role),  # type: ignore[arg-type]
            parts=[part_to_proto(p) for p in parts],
            **vis,
        )
    except (ValueError, TypeError, AttributeError) as e:
        # The same answer the in-process facade gives for a bad message.
        raise InvalidArgument.field("message", str(e)) from e
    if metadata is not None:
        message.metadata.CopyFrom(struct_to_proto(metadata))
    if private_metadata is not None:
        message.private_metadata.CopyFrom(struct_to_proto(private_metadata))
    return message


class RemoteMessages:
    """messages: append, update_visibility, list, get, get_many (over the wire)."""

    def __init__(self, host: _Host, staged: list[Any] | None = None) -> None:
        self._host = host
        self._staged = staged

    async def append(
        self,
        *,
        role: str,
        parts: Sequence[MessagePart],
        visibility: Visibility | dict[str, bool] | None = None,
        metadata: JsonObject | None = None,
        private_metadata: JsonObject | None = None,
    ) -> LifecycleMessage | None:
        """Append a message (staged inside mutate: returns None)."""
        message = _append_message(role, parts, visibility, metadata, private_metadata)
        if self._staged is not None:
            self._staged.append(hook_host_service_pb2.MutationOperation(append_message=message))
            return None
        reply = await self._host.call("AppendThreadMessage", message=message)
        return lifecycle_message_from_proto(reply.message)

    async def update_visibility(
        self,
        message_ids: Sequence[str],
        *,
        transcript: bool | None = None,
        context: bool | None = None,
    ) -> None:
        """Change where messages are visible."""
        fields: dict[str, Any] = {"message_ids": list(message_ids)}
        if transcript is not None:
            fields["transcript"] = transcript
        if context is not None:
            fields["context"] = context
        update = hook_host_service_pb2.VisibilityUpdate(**fields)
        if self._staged is not None:
            self._staged.append(hook_host_service_pb2.MutationOperation(update_visibility=update))
            return
        await self._host.call("UpdateThreadMessageVisibility", update=update)

    async def list(
        self,
        *,
        view: View = "context",
        order: Literal["asc", "desc"] = "asc",
        before_message_id: str | None = None,
        after_message_id: str | None = None,
        limit: int = 50,
        page_token: str = "",
    ) -> Page[LifecycleMessage]:
        """A page of this thread's messages."""
        reply = await self._host.call(
            "ListThreadMessages",
            view=message_view_to_proto(view),
            order=sort_order_to_proto(order),
            before_message_id=before_message_id or "",
            after_message_id=after_message_id or "",
            page_size=limit,
            page_token=page_token,
        )
        return Page(_lifecycle_messages(reply.messages), reply.next_page_token)

    async def get(self, message_id: str) -> LifecycleMessage | None:
        """One message of this thread (None when absent)."""
        reply = await self._host.call("GetThreadMessage", message_id=message_id)
        return lifecycle_message_from_proto(reply.message) if reply.HasField("message") else None

    async def get_many(self, message_ids: Sequence[str]) -> builtins.list[LifecycleMessage]:
        """The named messages of this thread that exist."""
        reply = await self._host.call("BatchGetThreadMessages", message_ids=list(message_ids))
        return _lifecycle_messages(reply.messages)


class RemoteMetadata:
    """A metadata bag: get, merge, replace (thread) or get, merge (run)."""

    def __init__(
        self, host: _Host, owner: str, *, private: bool, staged: list[Any] | None = None
    ) -> None:
        self._host = host
        self._target = _TARGET[(owner, private)]
        self._staged = staged

    async def get(self) -> JsonObject:
        """The persisted bag."""
        reply = await self._host.call("GetMetadata", target=self._target)
        return struct_from_proto(reply.metadata)

    async def merge(self, patch: JsonObject) -> JsonObject | None:
        """A shallow top-level merge (validated whole by the runtime)."""
        if self._staged is not None:
            self._staged.append(
                hook_host_service_pb2.MutationOperation(
                    merge_metadata=hook_host_service_pb2.MutationOperation.MetadataMerge(
                        target=self._target, patch=struct_to_proto(patch)
                    )
                )
            )
            return None
        reply = await self._host.call(
            "MergeMetadata", target=self._target, patch=struct_to_proto(patch)
        )
        return struct_from_proto(reply.metadata)

    async def replace(self, value: JsonObject) -> None:
        """Replace the whole bag."""
        if self._staged is not None:
            self._staged.append(
                hook_host_service_pb2.MutationOperation(
                    replace_metadata=hook_host_service_pb2.MutationOperation.MetadataReplace(
                        target=self._target, metadata=struct_to_proto(value)
                    )
                )
            )
            return
        await self._host.call(
            "ReplaceMetadata", target=self._target, metadata=struct_to_proto(value)
        )


class RemoteContext:
    """context: current() and messages()."""

    def __init__(self, host: _Host) -> None:
        self._host = host

    def _query(self, **kw: Any) -> hook_host_service_pb2.ContextQuery:
        return hook_host_service_pb2.ContextQuery(
            before_message_id=kw.get("before_message_id") or "",
            after_message_id=kw.get("after_message_id") or "",
            page_size=kw.get("limit", 0),
            page_token=kw.get("page_token", ""),
        )

    async def messages(self, **kw: Any) -> Page[LifecycleMessage]:
        """A page of context-visible messages."""
        reply = await self._host.call("ListContextMessages", query=self._query(**kw))
        return Page(_lifecycle_messages(reply.messages), reply.next_page_token)

    async def current(self, **kw: Any) -> ContextProjection:
        """Context messages and their model messages."""
        kw.setdefault("limit", 1000)
        reply = await self._host.call("GetCurrentContext", query=self._query(**kw))
        return ContextProjection(
            messages=_lifecycle_messages(reply.messages),
            model_messages=model_messages_from_proto(reply.model_messages),
            next_page_token=reply.next_page_token,
        )


class RemoteTransaction:
    """The clients inside mutate(): writes are staged, reads see persisted state."""

    def __init__(self, host: _Host) -> None:
        self.operations: list[Any] = []
        self.messages = RemoteMessages(host, self.operations)
        self.metadata = RemoteMetadata(host, "thread", private=False, staged=self.operations)
        self.private_metadata = RemoteMetadata(host, "thread", private=True, staged=self.operations)
        self.context = RemoteContext(host)


class RemoteThread:
    """The thread facade of a remote hook (same API as the in-process LifecycleThread)."""

    def __init__(self, host: _Host) -> None:
        self._host = host
        self.thread_id = host.thread_id
        self.messages = RemoteMessages(host)
        self.metadata = RemoteMetadata(host, "thread", private=False)
        self.private_metadata = RemoteMetadata(host, "thread", private=True)
        self.context = RemoteContext(host)

    async def mutate(
        self,
        fn: Callable[[RemoteTransaction], Any],
        *,
        expected_version: int | None = None,
        expected_private_metadata: JsonObject | None = None,
    ) -> Any:
        """Stage writes in ``fn``; they commit atomically when it returns."""
        tx = RemoteTransaction(self._host)
        result = fn(tx)
        if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
            result = await result
        if tx.operations:
            fields: dict[str, Any] = {"operations": tx.operations}
            if expected_version is not None:
                fields["expected_version"] = expected_version
            if expected_private_metadata is not None:
                fields["expected_private_metadata"] = struct_to_proto(expected_private_metadata)
            await self._host.call("Mutate", **fields)
        return result


@dataclass
class RemoteRun:
    """Stable run identity and fenced run metadata clients of a remote hook."""

    run_id: str
    thread_id: str
    initiator: str
    started_at: Any
    execution: Execution
    metadata: RemoteMetadata
    private_metadata: RemoteMetadata


@dataclass
class RemoteHistory:
    """history of resolve_model_context, capped at the step-start anchor."""

    host: _Host
    through: LifecycleMessage | None

    def _query(self, view: View, order: str, after_message_id: str | None) -> Any:
        return hook_host_service_pb2.HistoryQuery(
            view=message_view_to_proto(view),
            order=sort_order_to_proto(order),  # type: ignore[arg-type]
            after_message_id=after_message_id or "",
        )

    async def before(
        self,
        *,
        view: View = "context",
        order: Literal["asc", "desc"] = "asc",
        after_message_id: str | None = None,
        limit: int = 100,
        page_token: str = "",
    ) -> Page[LifecycleMessage]:
        """A page strictly below the anchor."""
        reply = await self.host.call(
            "ListHistoryBefore",
            query=self._query(view, order, after_message_id),
            page_size=limit,
            page_token=page_token,
        )
        return Page(_lifecycle_messages(reply.messages), reply.next_page_token)

    async def collect(
        self,
        *,
        view: View = "context",
        order: Literal["asc", "desc"] = "asc",
        after_message_id: str | None = None,
    ) -> list[LifecycleMessage]:
        """Every page, including ``through`` when it matches."""
        reply = await self.host.call(
            "CollectHistory", query=self._query(view, order, after_message_id)
        )
        return _lifecycle_messages(reply.messages)

    async def model_messages(
        self,
        *,
        view: View = "context",
        order: Literal["asc", "desc"] = "asc",
        after_message_id: str | None = None,
    ) -> list[ModelMessage]:
        """The collected history as model messages."""
        reply = await self.host.call(
            "GetHistoryModelMessages", query=self._query(view, order, after_message_id)
        )
        return model_messages_from_proto(reply.messages)

    def convert(self, messages: Sequence[LifecycleMessage]) -> list[ModelMessage]:
        """Model messages of durable messages (the same conversion the runtime uses)."""
        return to_model_messages(m.message for m in messages)


# ---- the servicer -----------------------------------------------------------------------


class PluginServicer(pb_grpc.LifecyclePluginServiceServicer):
    """Hosts an AgentLifecycle: each RPC builds the phase input and runs the hook."""

    def __init__(self, lifecycle: AgentLifecycle, *, name: str | None = None) -> None:
        self._hooks = compose_lifecycle(lifecycle)
        self._phases = lifecycle.phases()
        self._name = name or lifecycle.name or type(lifecycle).__name__
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def close(self) -> None:
        """Close the channels to hook hosts."""
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    def _host(self, ctx: lifecycle_pb2.HookContext) -> _Host:
        channel = self._channels.get(ctx.host_target)
        if channel is None:
            channel = grpc.aio.insecure_channel(ctx.host_target)
            self._channels[ctx.host_target] = channel
        stub = hook_host_service_pb2_grpc.HookHostServiceStub(channel)
        return _Host(stub, ctx.capability_token, ctx.thread_id)

    def _base(self, ctx: lifecycle_pb2.HookContext) -> dict[str, Any]:
        host = self._host(ctx)
        run = ctx.run
        runtime_context = (
            struct_from_proto(ctx.runtime_context) if ctx.HasField("runtime_context") else None
        )
        return {
            "run": RemoteRun(
                run_id=run.run_id,
                thread_id=run.thread_id,
                initiator=run_initiator_from_proto(run.initiator),
                started_at=optional_timestamp_from_proto(run, "start_time"),
                execution=Execution(
                    operation=run_operation_from_proto(run.execution.operation),
                    started_at=optional_timestamp_from_proto(run.execution, "start_time"),
                ),
                metadata=RemoteMetadata(host, "run", private=False),
                private_metadata=RemoteMetadata(host, "run", private=True),
            ),
            "thread": RemoteThread(host),
            "runtime_context": runtime_context,
            "signal": AbortSignal(),
        }

    @staticmethod
    def _step(ctx: lifecycle_pb2.HookContext) -> StepInfo | None:
        return StepInfo(ctx.step.step_id, ctx.step.index) if ctx.HasField("step") else None

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
        """The plugin's name and phases."""
        return pb.DescribeResponse(
            name=self._name,
            phases=[phase_to_proto(p) for p in PHASES if p in self._phases],
            version="1",
            accepts_chunk_batches=True,
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
        decision = await self._hooks.prepare_run(
            PrepareRunInput(
                **self._base(request.context),
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
        decision = await self._hooks.prepare_model_step(
            PrepareModelStepInput(
                **self._base(request.context),
                step=self._step(request.context),
                input=_request(request.input, request.context),
            )
        )
        return self._encode("prepare_model_step", prepare_model_step_result_to_proto, decision)

    def _tool_input(self, request: Any) -> dict[str, Any]:
        return {
            **self._base(request.context),
            "step": self._step(request.context),
            "tool": tool_info_from_proto(request.tool),
            "tool_call_id": request.tool_call_id,
            "entry": tool_entry_from_proto(request.entry),
            "suspend_history": [value_from_proto(v) for v in request.suspend_history],
            "input": value_from_proto(request.input) if request.HasField("input") else None,
        }

    @guarded
    async def BeforeToolCall(
        self, request: pb.BeforeToolCallRequest, context: Context
    ) -> pb.BeforeToolCallResponse:
        """before_tool_call."""
        self._require("before_tool_call")
        decision = await self._hooks.before_tool_call(
            BeforeToolCallInput(**self._tool_input(request))
        )
        return self._encode("before_tool_call", before_tool_call_result_to_proto, decision)

    @guarded
    async def AfterToolResult(
        self, request: pb.AfterToolResultRequest, context: Context
    ) -> pb.AfterToolResultResponse:
        """after_tool_result."""
        self._require("after_tool_result")
        decision = await self._hooks.after_tool_result(
            AfterToolResultInput(
                **self._tool_input(request), result=tool_result_from_proto(request.result)
            )
        )
        return self._encode("after_tool_result", after_tool_result_result_to_proto, decision)

    @guarded
    async def AfterStep(
        self, request: pb.AfterStepRequest, context: Context
    ) -> pb.AfterStepResponse:
        """after_step."""
        self._require("after_step")
        decision = await self._hooks.after_step(
            AfterStepInput(
                **self._base(request.context),
                step=step_summary_from_proto(request.step),
                request=_request(request.request, request.context),
            )
        )
        return self._encode("after_step", after_step_result_to_proto, decision)

    @guarded
    async def PrepareHistoryRewrite(
        self, request: pb.PrepareHistoryRewriteRequest, context: Context
    ) -> pb.PrepareHistoryRewriteResponse:
        """prepare_history_rewrite."""
        self._require("prepare_history_rewrite")
        ctx = request.context
        patch = await self._hooks.prepare_history_rewrite(
            PrepareHistoryRewriteInput(
                thread_id=ctx.thread_id,
                rewrite=history_rewrite_from_proto(request.rewrite),
                metadata=struct_from_proto(request.metadata),
                private_metadata=struct_from_proto(request.private_metadata),
                runtime_context=struct_from_proto(ctx.runtime_context)
                if ctx.HasField("runtime_context")
                else None,
            )
        )
        return self._encode("prepare_history_rewrite", history_rewrite_patch_to_proto, patch)

    @guarded
    async def HistoryRewritten(
        self, request: pb.HistoryRewrittenRequest, context: Context
    ) -> pb.HistoryRewrittenResponse:
        """history_rewritten."""
        self._require("history_rewritten")
        ctx = request.context
        try:
            await self._hooks.history_rewritten(
                HistoryRewrittenInput(
                    thread_id=ctx.thread_id,
                    rewrite=history_rewrite_from_proto(request.rewrite),
                    runtime_context=struct_from_proto(ctx.runtime_context)
                    if ctx.HasField("runtime_context")
                    else None,
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
        """resolve_model_context: next()/next(base) cross the wire as messages."""
        self._require("resolve_model_context")
        session = _Session(requests, pb.ResolveModelContextResponse)
        start = await session.first("start")
        host = self._host(start.context)
        through = lifecycle_message_from_proto(start.through) if start.HasField("through") else None
        memo: list[list[ModelMessage]] = []

        async def next_(base: list[ModelMessage] | None = None) -> list[ModelMessage]:
            if base is None and memo:
                return list(memo[0])
            ask = pb.ContextNext()
            if base is not None:
                ask.base.messages.extend(model_messages_to_proto(base))
            session.send(pb.ResolveModelContextResponse(next=ask))
            reply = await session.expect("next_result")
            result = model_messages_from_proto(reply.messages)
            if base is None:
                memo.append(result)
            return list(result)

        async def run() -> None:
            resolved = await self._hooks.resolve_model_context(
                ResolveModelContextInput(
                    **self._base(start.context),
                    step=self._step(start.context),
                    history=RemoteHistory(host, through),  # type: ignore[arg-type]
                ),
                next_,
            )
            encoded = self._encode("resolve_model_context", model_messages_to_proto, resolved)
            session.send(pb.ResolveModelContextResponse(result=pb.ContextResult(messages=encoded)))
            session.finish()

        async for reply in session.run(run()):
            yield reply

    @guarded
    async def AroundModelCall(
        self, requests: AsyncIterator[pb.AroundModelCallRequest], context: Context
    ) -> AsyncIterator[pb.AroundModelCallResponse]:
        """around_model_call: next(patch), then pass-through, transform or an own answer."""
        self._require("around_model_call")
        session = _Session(requests, pb.AroundModelCallResponse)
        start = await session.first("start")
        request = _request(start.request, start.context)
        attempts: list[_AttemptStream] = []

        async def next_(patch: Any = None) -> ModelStepStreamResult:
            ask = pb.ModelCallNext(mode=pb.STREAM_MODE_UNSPECIFIED)
            if isinstance(patch, Effective):
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
            transformed = self._hooks.transform_step_stream(
                TransformStepStreamInput(
                    **self._base(start.context),
                    step=self._step(start.context),
                    stream=upstream(),
                    input=_request(start.input, start.context) if start.HasField("input") else None,
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


def _request(wire: Any, ctx: lifecycle_pb2.HookContext) -> ModelStepRequest:
    """A model-step request from the wire, with the runtime context of the hook call."""
    # The plugin's own signal for this hook call (the runtime's cannot cross the wire).
    request = replace(model_step_request_from_proto(wire, ModelRef.parse), signal=AbortSignal())
    if ctx.HasField("runtime_context"):
        request = replace(request, runtime_context=struct_from_proto(ctx.runtime_context))
    return request


def _check_text_id(plugin: str, chunk: Any) -> None:
    """Text ids are required on every text boundary (TSS-05), checked before encoding."""
    if problem := missing_text_id(chunk):
        raise InvalidDecision(plugin, "transform_step_stream", problem)


#: Fields a model route carries (a new model clears them, so they are re-sent with it).
_ROUTE = ("model_settings", "provider_options", "provider_tools", "tool_choice")
_FIELDS = ("instructions", "messages", "tools", *_ROUTE, "timeout")


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
        changes.update({f: getattr(effective, f) for f in _ROUTE})
    for name in _FIELDS:
        if name not in changes and getattr(original, name) != getattr(effective, name):
            changes[name] = getattr(effective, name)
    return ModelCallPatch(**changes) if changes else None


class _Session:
    """One bidirectional hook call: a reader of runtime messages and a queue of replies."""

    def _failed(self, error: BaseException) -> Any:
        if isinstance(error, PaiError):
            reason, message = error.reason, error.message
        else:
            log.error("plugin hook failed", exc_info=error)
            reason, message = "HOOK_FAILED", f"{type(error).__name__}: {error}"
        return self._reply(failed=pb.HookFailed(reason=reason, message=message))

    def __init__(
        self,
        requests: AsyncIterator[Any],
        reply: Any,
        *,
        combine: Callable[[list[Any]], list[Any]] | None = None,
    ) -> None:
        self._requests = requests
        self._reply = reply
        #: Merges replies that are ready together (e.g. chunks into one batch).
        self._combine = combine
        self._outbox: asyncio.Queue[Any] = asyncio.Queue()
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._done = object()

    async def first(self, kind: str) -> Any:
        """The opening message (it must be ``kind``)."""
        try:
            message = await anext(self._requests)
        except StopAsyncIteration:
            raise InvalidArgument.field("message", f"the stream must open with {kind}") from None
        if message.WhichOneof("message") != kind:
            raise InvalidArgument.field("message", f"the stream must open with {kind}")
        self._reader = asyncio.create_task(self._read())
        return getattr(message, kind)

    async def _read(self) -> None:
        try:
            async for message in self._requests:
                await self._inbox.put(message)
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass  # the runtime cancelled the call: it has what it needs
        finally:
            self._inbox.put_nowait(None)

    async def expect_any(self, *kinds: str) -> tuple[str, Any]:
        """The runtime's next message, which must be one of ``kinds``."""
        message = await self._inbox.get()
        if message is None:
            raise FacadeClosed("the runtime closed the hook call", reason="HOOK_CALL_CLOSED")
        kind = message.WhichOneof("message")
        if kind not in kinds:
            raise InvalidArgument.field("message", f"expected {' or '.join(kinds)}, got {kind}")
        return kind, getattr(message, kind)

    async def expect(self, kind: str) -> Any:
        """The runtime's next message, which must be ``kind``."""
        return (await self.expect_any(kind))[1]

    def send(self, message: Any) -> None:
        """Queue a reply."""
        self._outbox.put_nowait(message)

    def finish(self) -> None:
        """No more replies."""
        self._outbox.put_nowait(self._done)

    async def run(self, work: Awaitable[None]) -> AsyncIterator[Any]:
        """Run the hook while yielding its replies; its errors end the call.

        After the last reply the call stays open until the runtime half-closes
        or cancels it (the contract's rule: ending a stream the peer still
        writes to races in gRPC stacks, grpc/grpc#36066).
        """
        async for item in self._replies(work):
            yield item
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), DRAIN_SECONDS)

    async def _replies(self, work: Awaitable[None]) -> AsyncIterator[Any]:
        task = asyncio.ensure_future(work)
        try:
            while True:
                getter = asyncio.ensure_future(self._outbox.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    ready = [getter.result()]
                    while not self._outbox.empty():
                        ready.append(self._outbox.get_nowait())
                    finished = self._done in ready
                    ready = [r for r in ready if r is not self._done]
                    for item in self._combine(ready) if self._combine else ready:
                        yield item
                    if finished:
                        break
                    continue
                getter.cancel()
                failure = task.exception()
                # The hook finished: flush what it queued (then its failure, if any).
                ready = []
                while not self._outbox.empty():
                    item = self._outbox.get_nowait()
                    if item is not self._done:
                        ready.append(item)
                for item in self._combine(ready) if self._combine else ready:
                    yield item
                if failure is not None:
                    yield self._failed(failure)
                return
            await task
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def _batch_chunks(replies: list[Any]) -> list[Any]:
    """Consecutive chunk replies as one ChunkBatch (the runtime accepts batches)."""
    out: list[Any] = []
    run: list[Any] = []
    for reply in [*replies, None]:
        if reply is not None and reply.WhichOneof("message") == "chunk":
            run.append(reply.chunk)
            continue
        if len(run) == 1:
            out.append(pb.TransformStepStreamResponse(chunk=run[0]))
        elif run:
            out.append(pb.TransformStepStreamResponse(batch=pb.ChunkBatch(chunks=run)))
        run = []
        if reply is not None:
            out.append(reply)
    return out


class _AttemptStream:
    """The downstream stream of one next() inside a remote around_model_call.

    Returned untouched it is passed through (its chunks never cross the wire);
    iterated, it subscribes and the runtime forwards the chunks.
    """

    def __init__(self, session: _Session, index: int) -> None:
        self._session = session
        #: The attempt's index among the next() calls that started.
        self.index = index
        self.started = False

    def __aiter__(self) -> _AttemptStream:
        return self

    async def __anext__(self) -> StepStreamChunk:
        if not self.started:
            self.started = True
            subscribe = pb.StreamSubscribe(attempt=self.index)
            self._session.send(pb.AroundModelCallResponse(subscribe=subscribe))
        kind, reply = await self._session.expect_any("chunk", "end")
        if kind == "end":
            raise StopAsyncIteration
        return chunk_from_proto(reply)


# ---- serving ------------------------------------------------------------------------------


@dataclass
class PluginServer:
    """A running plugin service."""

    server: grpc.aio.Server
    servicer: PluginServicer
    health: health.aio.HealthServicer
    port: int
    host: str = "127.0.0.1"

    @property
    def address(self) -> str:
        """``host:port`` to configure in the runtime."""
        return f"{self.host}:{self.port}"

    async def stop(self, grace: float = 1.0) -> None:
        """Report NOT_SERVING, finish in-flight hook calls (up to ``grace``), stop."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        await self.servicer.close()

    async def wait(self) -> None:
        """Serve until terminated."""
        await self.server.wait_for_termination()


async def serve_plugin(
    lifecycle: AgentLifecycle, address: str = "127.0.0.1:0", *, name: str | None = None
) -> PluginServer:
    """Host ``lifecycle`` as a LifecyclePluginService on ``address``."""
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    servicer = PluginServicer(lifecycle, name=name)
    pb_grpc.add_LifecyclePluginServiceServicer_to_server(servicer, server)
    checker = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    await checker.set("", health_pb2.HealthCheckResponse.SERVING)
    host = address.rsplit(":", 1)[0]
    if host in ("0.0.0.0", "[::]", ""):
        host = "127.0.0.1"
    log.info("lifecycle plugin %s on %s:%d", servicer._name, host, port)
    return PluginServer(server=server, servicer=servicer, health=checker, port=port, host=host)


__all__ = ["ModelRef", "PluginServer", "PluginServicer", "serve_plugin"]
