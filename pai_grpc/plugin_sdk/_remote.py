"""The facade of a remote hook: proxies that call the runtime's HookHostService.

Each hook call gets a capability token (in its HookContext); ``thread``,
``run`` and ``history`` are proxies bound to it, with the same API as the
in-process facade (they satisfy :class:`pai_grpc.lifecycle.ThreadFacade` and
friends). Errors the runtime answers with are raised as the in-process facade
raises them.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import grpc

from pai.v1 import hook_host_service_pb2, hook_host_service_pb2_grpc
from pai_grpc._wire import error_info
from pai_grpc.convert import (
    lifecycle_message_from_proto,
    message_view_to_proto,
    model_messages_from_proto,
    part_to_proto,
    role_to_proto,
    sort_order_to_proto,
    struct_from_proto,
    struct_to_proto,
)
from pai_grpc.domain import (
    JsonObject,
    LifecycleMessage,
    MessagePart,
    ModelMessage,
    RunInitiator,
    Visibility,
)
from pai_grpc.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFoundError,
    PaiError,
    PermissionDenied,
)
from pai_grpc.lifecycle import (
    ContextProjection,
    ContractViolation,
    Execution,
    FacadeClosed,
    HistoryFacade,
    Page,
    RunFacade,
    ThreadFacade,
    TransactionFacade,
    VersionConflict,
    View,
)
from pai_grpc.models import to_model_messages


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


class RemoteRunMetadata:
    """A run's metadata bag: get, merge (never staged: run metadata is written directly)."""

    def __init__(self, host: _Host, *, private: bool) -> None:
        self._bag = RemoteMetadata(host, "run", private=private)

    async def get(self) -> JsonObject:
        """The persisted bag."""
        return await self._bag.get()

    async def merge(self, patch: JsonObject) -> JsonObject:
        """Shallow-merge into the run's bag; return the merged bag."""
        merged = await self._bag.merge(patch)
        assert merged is not None  # only staged writes return nothing
        return merged


class RemoteContext:
    """context: current() and messages()."""

    def __init__(self, host: _Host) -> None:
        self._host = host

    @staticmethod
    def _query(
        before_message_id: str | None, after_message_id: str | None, limit: int, page_token: str
    ) -> hook_host_service_pb2.ContextQuery:
        return hook_host_service_pb2.ContextQuery(
            before_message_id=before_message_id or "",
            after_message_id=after_message_id or "",
            page_size=limit,
            page_token=page_token,
        )

    async def messages(
        self,
        *,
        before_message_id: str | None = None,
        after_message_id: str | None = None,
        limit: int = 50,
        page_token: str = "",
    ) -> Page[LifecycleMessage]:
        """A page of context-visible messages."""
        query = self._query(before_message_id, after_message_id, limit, page_token)
        reply = await self._host.call("ListContextMessages", query=query)
        return Page(_lifecycle_messages(reply.messages), reply.next_page_token)

    async def current(
        self,
        *,
        before_message_id: str | None = None,
        after_message_id: str | None = None,
        limit: int = 1000,
        page_token: str = "",
    ) -> ContextProjection:
        """Context messages and their model messages."""
        query = self._query(before_message_id, after_message_id, limit, page_token)
        reply = await self._host.call("GetCurrentContext", query=query)
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
    initiator: RunInitiator
    started_at: datetime | None
    execution: Execution
    metadata: RemoteRunMetadata
    private_metadata: RemoteRunMetadata


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


def _facades(
    thread: RemoteThread, run: RemoteRun, history: RemoteHistory, tx: RemoteTransaction
) -> tuple[ThreadFacade, RunFacade, HistoryFacade, TransactionFacade]:
    """The remote facade satisfies the facade Protocols (checked by mypy, never called)."""
    as_thread: ThreadFacade = thread
    as_run: RunFacade = run
    as_history: HistoryFacade = history
    as_tx: TransactionFacade = tx
    return as_thread, as_run, as_history, as_tx
