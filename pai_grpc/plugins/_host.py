"""HookHostService: the thread facade for remote hooks, behind capability tokens (REM-02).

For each remote hook call the adapter grants a token bound to one thread,
the run's current lease (through the facade it wraps, whose writes are
fenced by that lease) and the phase's permissions (the resolver's facade has
no visibility updates; history reads exist only while resolving context).
The token dies when the hook call returns: later calls, or calls naming
another thread, are refused with PERMISSION_DENIED and change nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import secrets
from dataclasses import dataclass
from typing import Any, Literal

import grpc

from pai.v1 import hook_host_service_pb2 as pb
from pai.v1 import hook_host_service_pb2_grpc as pb_grpc
from pai_grpc._wire import Context, Keepalive, ServerTls, add_port, fill_unimplemented
from pai_grpc.convert import (
    lifecycle_message_to_proto,
    message_view_from_proto,
    model_messages_from_proto,
    model_messages_to_proto,
    part_from_proto,
    role_from_proto,
    sort_order_from_proto,
    struct_from_proto,
    struct_to_proto,
)
from pai_grpc.domain import JsonObject, LifecycleMessage, ModelMessage
from pai_grpc.errors import FailedPrecondition, InvalidArgument, PermissionDenied
from pai_grpc.lifecycle import (
    ContextNext,
    HistoryFacade,
    RunFacade,
    ThreadFacade,
    TransactionFacade,
)
from pai_grpc.runtime import LifecycleThread
from pai_grpc.server import guarded
from pai_grpc.telemetry import Telemetry, tracing

log = logging.getLogger("pai_grpc.plugins")

#: Page size when a request leaves it unset.
DEFAULT_PAGE = 50
MAX_PAGE = 1000


class ContextNextGrant:
    """next() / next(base) of one ResolveModelContextUnary call, asked through the host.

    ``downstream``: next()'s memoised result when it was prefetched (RMC-02);
    next() without a base evaluates it at most once. The inner layers run as
    part of the run, as on the stream: in the context of the task that made
    the grant (the run's report, telemetry and deadlines), in a task of the
    grant's that :meth:`close` cancels when the call ends. While the runtime
    evaluates an answer, the call's ``timeout`` is suspended: the phase's
    timeout counts the plugin's time, as on the stream, where it applies to
    each of the plugin's messages. When the inner layers fail, their error is
    kept in ``error`` (the adapter raises it as the runtime's own, whatever the
    plugin answers) and the unary ``call`` is cancelled.
    """

    def __init__(self, next: ContextNext, downstream: list[ModelMessage] | None) -> None:
        self._next = next
        self._context = contextvars.copy_context()
        self.downstream = downstream
        self.error: Exception | None = None
        #: The phase's timeout while the call is awaited (None before and after).
        self.timeout: asyncio.Timeout | None = None
        #: The plugin call in flight (cancelled when the inner layers fail).
        self.call: Any = None
        self._evaluating: set[asyncio.Task[list[ModelMessage]]] = set()
        self._left = 0.0
        self._memo_lock: asyncio.Lock | None = None

    async def __call__(self, base: list[ModelMessage] | None) -> list[ModelMessage]:
        """The runtime's answer to the plugin's next(base)."""
        if self.error is not None:
            raise _downstream_failed()
        task = asyncio.create_task(self._evaluate(base), context=self._context)
        self._suspend(task)
        try:
            return await task
        except Exception as e:
            if self.error is None:
                self.error = e
                if self.call is not None:
                    self.call.cancel()
            raise _downstream_failed() from e
        finally:
            self._resume(task)

    async def _evaluate(self, base: list[ModelMessage] | None) -> list[ModelMessage]:
        if base is not None:
            return await self._next(base)
        if self.downstream is None:
            self._memo_lock = self._memo_lock or asyncio.Lock()
            async with self._memo_lock:
                if self.downstream is None:
                    self.downstream = await self._next()
        return self.downstream

    def close(self) -> None:
        """The call ended: stop what the inner layers still evaluate for it."""
        for task in self._evaluating:
            task.cancel()

    def _suspend(self, task: asyncio.Task[list[ModelMessage]]) -> None:
        self._evaluating.add(task)
        timeout = self.timeout
        if (
            len(self._evaluating) == 1
            and timeout is not None
            and not timeout.expired()
            and timeout.when() is not None
        ):
            loop = asyncio.get_running_loop()
            self._left = max(0.0, timeout.when() - loop.time())  # type: ignore[operator]
            timeout.reschedule(None)

    def _resume(self, task: asyncio.Task[list[ModelMessage]]) -> None:
        self._evaluating.discard(task)
        timeout = self.timeout
        if not self._evaluating and timeout is not None and not timeout.expired():
            timeout.reschedule(asyncio.get_running_loop().time() + self._left)


def _downstream_failed() -> FailedPrecondition:
    return FailedPrecondition(
        "the runtime's inner context layers failed; the step fails with their error",
        reason="DOWNSTREAM_FAILED",
    )


@dataclass
class Grant:
    """What one hook call may do."""

    thread_id: str
    phase: str
    thread: ThreadFacade | None = None
    run: RunFacade | None = None
    history: HistoryFacade | None = None
    #: next() of a ResolveModelContextUnary call (None for every other call).
    context_next: ContextNextGrant | None = None


class HookHost:
    """Serves HookHostService for this process and keeps the live capability tokens."""

    def __init__(
        self,
        address: str = "127.0.0.1:0",
        *,
        advertise: str = "",
        tls: ServerTls | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._address = address
        #: TLS of the port (plugins then dial it with TLS, mutual with a client CA).
        self._tls = tls
        #: Traced processes continue a plugin's callbacks in the run's trace.
        self._telemetry = telemetry
        #: What plugins dial (default: the bound address); set it when they run elsewhere.
        self._advertise = advertise
        self._grants: dict[str, Grant] = {}
        self._server: grpc.aio.Server | None = None
        self.port = 0

    @property
    def target(self) -> str:
        """``host:port`` plugins call back."""
        if self._advertise:
            return self._advertise
        host = self._address.rsplit(":", 1)[0] or "127.0.0.1"
        if host in ("0.0.0.0", "[::]"):
            host = "127.0.0.1"
        return f"{host}:{self.port}"

    async def start(self) -> str:
        """Listen; return the target (idempotent)."""
        if self._server is not None:
            return self.target
        options = [("grpc.so_reuseport", 0), *Keepalive().server_options()]
        server = grpc.aio.server(
            options=options, interceptors=tracing.server_interceptors(self._telemetry)
        )
        pb_grpc.add_HookHostServiceServicer_to_server(HookHostServicer(self), server)
        self.port = add_port(server, self._address, self._tls)
        await server.start()
        self._server = server
        log.info("hook host on %s", self.target)
        return self.target

    async def close(self) -> None:
        """Stop serving; every token dies."""
        self._grants.clear()
        if self._server is not None:
            await self._server.stop(0.5)
            self._server = None

    def grant(self, grant: Grant) -> str:
        """Issue a token for one hook call."""
        token = secrets.token_urlsafe(24)
        self._grants[token] = grant
        return token

    def revoke(self, token: str) -> None:
        """The hook call returned: the token is dead."""
        self._grants.pop(token, None)

    def resolve(self, token: str, thread_id: str) -> Grant:
        """The live grant of ``token`` for ``thread_id`` (PERMISSION_DENIED otherwise)."""
        grant = self._grants.get(token)
        if grant is None:
            raise PermissionDenied(
                "the capability token is not valid; a token lives only while its hook call runs",
                reason="CAPABILITY_EXPIRED",
            )
        if not thread_id:
            raise InvalidArgument.field("thread_id", "name the thread the call is for")
        if thread_id != grant.thread_id:
            raise PermissionDenied(
                "the capability token is bound to another thread", reason="WRONG_THREAD"
            )
        return grant


def _thread(grant: Grant) -> LifecycleThread:
    # The host serves the runtime's own (in-process) facade: it reports what mutate() wrote.
    if not isinstance(grant.thread, LifecycleThread):
        raise FailedPrecondition(f"no thread facade in {grant.phase}", reason="NO_FACADE_IN_PHASE")
    return grant.thread


def _history(grant: Grant) -> HistoryFacade:
    if grant.history is None:
        raise FailedPrecondition(
            "history reads are available while resolving model context only",
            reason="NO_HISTORY_IN_PHASE",
        )
    return grant.history


def _page_size(value: int) -> int:
    if value < 0:
        raise InvalidArgument.field("page_size", "must not be negative")
    return min(value or DEFAULT_PAGE, MAX_PAGE)


def _messages(items: list[LifecycleMessage]) -> list[Any]:
    return [lifecycle_message_to_proto(m) for m in items]


def _struct(msg: Any, field: str) -> JsonObject | None:
    if not msg.HasField(field):
        return None
    try:
        return struct_from_proto(getattr(msg, field), path=field)
    except ValueError as e:
        raise InvalidArgument.field(field, str(e)) from e


def _visibility(msg: Any) -> dict[str, bool]:
    out: dict[str, bool] = {}
    if msg.HasField("transcript"):
        out["transcript"] = msg.transcript
    if msg.HasField("context"):
        out["context"] = msg.context
    return out


Bag = Literal["thread", "thread_private", "run", "run_private"]
_TARGETS: dict[int, Bag] = {
    pb.METADATA_TARGET_THREAD: "thread",
    pb.METADATA_TARGET_THREAD_PRIVATE: "thread_private",
    pb.METADATA_TARGET_RUN: "run",
    pb.METADATA_TARGET_RUN_PRIVATE: "run_private",
}


def _target(value: int) -> Bag:
    bag = _TARGETS.get(value)
    if bag is None:
        raise InvalidArgument.field("target", "choose THREAD, THREAD_PRIVATE, RUN or RUN_PRIVATE")
    return bag


async def _append(clients: Any, message: pb.AppendMessage) -> LifecycleMessage | None:
    try:
        role = role_from_proto(message.role, field="message.role")
        parts = [part_from_proto(p) for p in message.parts]
    except ValueError as e:
        raise InvalidArgument.field("message", str(e)) from e
    appended: LifecycleMessage | None = await clients.messages.append(
        role=role,
        parts=parts,
        visibility=_visibility(message),
        metadata=_struct(message, "metadata"),
        private_metadata=_struct(message, "private_metadata"),
    )
    return appended


class HookHostServicer(pb_grpc.HookHostServiceServicer):
    """HookHostService over the granted facades."""

    def __init__(self, host: HookHost) -> None:
        self._host = host

    def _grant(self, request: Any) -> Grant:
        return self._host.resolve(request.capability_token, request.thread_id)

    @guarded
    async def ListThreadMessages(
        self, request: pb.ListThreadMessagesRequest, context: Context
    ) -> pb.ListThreadMessagesResponse:
        """messages.list()."""
        thread = _thread(self._grant(request))
        try:
            view = message_view_from_proto(request.view, default="context", field="view")
            order = sort_order_from_proto(request.order, default="asc", field="order")
        except ValueError as e:
            raise InvalidArgument.field("view", str(e)) from e
        page = await thread.messages.list(
            view=view,
            order=order,
            before_message_id=request.before_message_id or None,
            after_message_id=request.after_message_id or None,
            limit=_page_size(request.page_size),
            page_token=request.page_token,
        )
        return pb.ListThreadMessagesResponse(
            messages=_messages(page.items), next_page_token=page.next_page_token
        )

    @guarded
    async def GetThreadMessage(
        self, request: pb.GetThreadMessageRequest, context: Context
    ) -> pb.GetThreadMessageResponse:
        """messages.get()."""
        found = await _thread(self._grant(request)).messages.get(request.message_id)
        if found is None:
            return pb.GetThreadMessageResponse()
        return pb.GetThreadMessageResponse(message=lifecycle_message_to_proto(found))

    @guarded
    async def BatchGetThreadMessages(
        self, request: pb.BatchGetThreadMessagesRequest, context: Context
    ) -> pb.BatchGetThreadMessagesResponse:
        """messages.get_many()."""
        found = await _thread(self._grant(request)).messages.get_many(list(request.message_ids))
        return pb.BatchGetThreadMessagesResponse(messages=_messages(found))

    @guarded
    async def AppendThreadMessage(
        self, request: pb.AppendThreadMessageRequest, context: Context
    ) -> pb.AppendThreadMessageResponse:
        """messages.append()."""
        appended = await _append(_thread(self._grant(request)), request.message)
        assert appended is not None
        return pb.AppendThreadMessageResponse(message=lifecycle_message_to_proto(appended))

    @guarded
    async def UpdateThreadMessageVisibility(
        self, request: pb.UpdateThreadMessageVisibilityRequest, context: Context
    ) -> pb.UpdateThreadMessageVisibilityResponse:
        """messages.update_visibility() (refused while resolving model context)."""
        thread = _thread(self._grant(request))
        update = request.update
        await thread.messages.update_visibility(
            list(update.message_ids),
            transcript=update.transcript if update.HasField("transcript") else None,
            context=update.context if update.HasField("context") else None,
        )
        return pb.UpdateThreadMessageVisibilityResponse()

    def _bag(self, grant: Grant, target: int) -> Any:
        bag = _target(target)
        if bag in ("run", "run_private"):
            if grant.run is None:
                raise FailedPrecondition(f"no run in {grant.phase}", reason="NO_RUN_IN_PHASE")
            return grant.run.metadata if bag == "run" else grant.run.private_metadata
        thread = _thread(grant)
        return thread.metadata if bag == "thread" else thread.private_metadata

    @guarded
    async def GetMetadata(
        self, request: pb.GetMetadataRequest, context: Context
    ) -> pb.GetMetadataResponse:
        """Metadata / private_metadata get() of the thread or the run."""
        value = await self._bag(self._grant(request), request.target).get()
        return pb.GetMetadataResponse(metadata=struct_to_proto(dict(value)))

    @guarded
    async def MergeMetadata(
        self, request: pb.MergeMetadataRequest, context: Context
    ) -> pb.MergeMetadataResponse:
        """merge(): a shallow top-level merge, validated whole."""
        bag = self._bag(self._grant(request), request.target)
        merged = await bag.merge(_struct(request, "patch") or {})
        if merged is None:
            merged = await bag.get()
        return pb.MergeMetadataResponse(metadata=struct_to_proto(dict(merged)))

    @guarded
    async def ReplaceMetadata(
        self, request: pb.ReplaceMetadataRequest, context: Context
    ) -> pb.ReplaceMetadataResponse:
        """replace() of a thread bag."""
        if _target(request.target) in ("run", "run_private"):
            raise InvalidArgument.field("target", "run metadata is merged, never replaced")
        bag = self._bag(self._grant(request), request.target)
        await bag.replace(_struct(request, "metadata") or {})
        return pb.ReplaceMetadataResponse()

    @guarded
    async def GetCurrentContext(
        self, request: pb.GetCurrentContextRequest, context: Context
    ) -> pb.GetCurrentContextResponse:
        """context.current(): durable messages and their model messages."""
        query = request.query
        current = await _thread(self._grant(request)).context.current(
            before_message_id=query.before_message_id or None,
            after_message_id=query.after_message_id or None,
            limit=min(query.page_size or MAX_PAGE, MAX_PAGE),
            page_token=query.page_token,
        )
        return pb.GetCurrentContextResponse(
            messages=_messages(current.messages),
            model_messages=model_messages_to_proto(current.model_messages),
            next_page_token=current.next_page_token,
        )

    @guarded
    async def ListContextMessages(
        self, request: pb.ListContextMessagesRequest, context: Context
    ) -> pb.ListContextMessagesResponse:
        """context.messages()."""
        query = request.query
        page = await _thread(self._grant(request)).context.messages(
            before_message_id=query.before_message_id or None,
            after_message_id=query.after_message_id or None,
            limit=_page_size(query.page_size),
            page_token=query.page_token,
        )
        return pb.ListContextMessagesResponse(
            messages=_messages(page.items), next_page_token=page.next_page_token
        )

    @staticmethod
    def _history_query(query: pb.HistoryQuery) -> dict[str, Any]:
        try:
            view = message_view_from_proto(query.view, default="context", field="query.view")
            order = sort_order_from_proto(query.order, default="asc", field="query.order")
        except ValueError as e:
            raise InvalidArgument.field("query", str(e)) from e
        return {
            "view": view,
            "order": order,
            "after_message_id": query.after_message_id or None,
        }

    @guarded
    async def CollectHistory(
        self, request: pb.CollectHistoryRequest, context: Context
    ) -> pb.CollectHistoryResponse:
        """history.collect()."""
        history = _history(self._grant(request))
        found = await history.collect(**self._history_query(request.query))
        return pb.CollectHistoryResponse(messages=_messages(found))

    @guarded
    async def ListHistoryBefore(
        self, request: pb.ListHistoryBeforeRequest, context: Context
    ) -> pb.ListHistoryBeforeResponse:
        """history.before()."""
        history = _history(self._grant(request))
        page = await history.before(
            **self._history_query(request.query),
            limit=_page_size(request.page_size),
            page_token=request.page_token,
        )
        return pb.ListHistoryBeforeResponse(
            messages=_messages(page.items), next_page_token=page.next_page_token
        )

    @guarded
    async def GetHistoryModelMessages(
        self, request: pb.GetHistoryModelMessagesRequest, context: Context
    ) -> pb.GetHistoryModelMessagesResponse:
        """history.model_messages()."""
        history = _history(self._grant(request))
        messages = await history.model_messages(**self._history_query(request.query))
        return pb.GetHistoryModelMessagesResponse(messages=model_messages_to_proto(messages))

    @guarded
    async def Mutate(self, request: pb.MutateRequest, context: Context) -> pb.MutateResponse:
        """mutate(): the staged operations commit atomically."""
        grant = self._grant(request)
        thread = _thread(grant)

        async def stage(tx: TransactionFacade) -> None:
            for i, op in enumerate(request.operations):
                match op.WhichOneof("operation"):
                    case "append_message":
                        await _append(tx, op.append_message)
                    case "update_visibility":
                        update = op.update_visibility
                        await tx.messages.update_visibility(
                            list(update.message_ids),
                            transcript=update.transcript if update.HasField("transcript") else None,
                            context=update.context if update.HasField("context") else None,
                        )
                    case "merge_metadata":
                        bag = _target(op.merge_metadata.target)
                        if bag in ("run", "run_private"):
                            raise InvalidArgument.field(
                                f"operations[{i}]", "run metadata is written outside mutate"
                            )
                        client = tx.metadata if bag == "thread" else tx.private_metadata
                        await client.merge(_struct(op.merge_metadata, "patch") or {})
                    case "replace_metadata":
                        bag = _target(op.replace_metadata.target)
                        if bag in ("run", "run_private"):
                            raise InvalidArgument.field(
                                f"operations[{i}]", "run metadata is merged, never replaced"
                            )
                        client = tx.metadata if bag == "thread" else tx.private_metadata
                        await client.replace(_struct(op.replace_metadata, "metadata") or {})
                    case _:
                        raise InvalidArgument.field(f"operations[{i}]", "set one operation")

        expected_private = _struct(request, "expected_private_metadata")
        await thread.mutate(
            stage,
            expected_version=request.expected_version
            if request.HasField("expected_version")
            else None,
            expected_private_metadata=expected_private,
        )
        messages, version = thread.last_mutation
        return pb.MutateResponse(messages=_messages(messages), version=version or 0)

    @guarded
    async def ResolveModelContextNext(
        self, request: pb.ResolveModelContextNextRequest, context: Context
    ) -> pb.ResolveModelContextNextResponse:
        """next() / next(base) of a ResolveModelContextUnary call."""
        grant = self._grant(request)
        if grant.context_next is None:
            raise FailedPrecondition(
                "next() through the host belongs to a ResolveModelContextUnary call; "
                f"this token's call ({grant.phase}) is not one",
                reason="NO_CONTEXT_NEXT_IN_CALL",
            )
        base = None
        if request.HasField("base"):
            try:
                base = model_messages_from_proto(request.base.messages)
            except (ValueError, TypeError) as e:
                raise InvalidArgument.field("base", str(e)) from e
        messages = await grant.context_next(base)
        return pb.ResolveModelContextNextResponse(messages=model_messages_to_proto(messages))


fill_unimplemented(HookHostServicer, "pai.v1.HookHostService")
