"""ThreadService: converts protobuf at the edge and calls the runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pai.v1 import thread_service_pb2 as pb
from pai.v1 import thread_service_pb2_grpc as pb_grpc
from pai_grpc.convert import (
    delivery_from_proto,
    part_from_proto,
    run_handle_to_proto,
    sort_order_from_proto,
    struct_from_proto,
    thread_change_to_proto,
    thread_to_proto,
    value_from_proto,
)
from pai_grpc.convert import message_to_proto as message_pb
from pai_grpc.domain import MessagePart
from pai_grpc.errors import FieldViolation, InvalidArgument
from pai_grpc.runtime import RegenerateInput, Runtime, SendInput, TriggerInput
from pai_grpc.server._errors import Context, fill_unimplemented, guarded
from pai_grpc.server._runs import event_framer
from pai_grpc.server._scope import ScopeResolver


def convert_parts(parts: Any, field: str = "parts") -> list[MessagePart]:
    """Convert request parts, naming every bad one in a single error."""
    out: list[MessagePart] = []
    violations: list[FieldViolation] = []
    for i, part in enumerate(parts):
        try:
            out.append(part_from_proto(part))
        except ValueError as e:
            violations.append(FieldViolation(f"{field}[{i}]", str(e)))
    if violations:
        raise InvalidArgument("the message parts are invalid", violations)
    return out


def convert_struct(pb_struct: Any, present: bool, field: str) -> dict[str, Any]:
    """A request Struct as a JSON object ({} when absent), with a field-named error."""
    if not present:
        return {}
    try:
        return struct_from_proto(pb_struct)
    except ValueError as e:
        raise InvalidArgument.field(field, str(e)) from e


def _send_input(request: pb.SendRequest) -> SendInput:
    """The runtime's input for a Send (INVALID_ARGUMENT naming the bad field)."""
    try:
        delivery = delivery_from_proto(request.delivery)
    except ValueError as e:
        raise InvalidArgument.field("delivery", f"unknown delivery {request.delivery}") from e
    return SendInput(
        thread_id=request.thread_id,
        parts=convert_parts(request.parts),
        metadata=convert_struct(request.metadata, request.HasField("metadata"), "metadata"),
        request_id=request.request_id,
        delivery=delivery,
        run_metadata=convert_struct(request.run_metadata, True, "run_metadata")
        if request.HasField("run_metadata")
        else None,
    )


#: ``SendAndStreamResponse(event=RunEvent.FromString(body))`` in wire form, built by framing.
_send_and_stream_event = event_framer(pb.SendAndStreamResponse)


class ThreadService(pb_grpc.ThreadServiceServicer):
    """Threads and the operations that start runs."""

    def __init__(self, runtime: Runtime, scopes: ScopeResolver) -> None:
        self._runtime = runtime
        self._scopes = scopes

    @guarded
    async def CreateThread(
        self, request: pb.CreateThreadRequest, context: Context
    ) -> pb.CreateThreadResponse:
        """Create a thread."""
        scope = self._scopes.resolve(context)
        thread = await self._runtime.create_thread(
            scope,
            agent=request.agent,
            metadata=convert_struct(request.metadata, request.HasField("metadata"), "metadata"),
            request_id=request.request_id,
        )
        return pb.CreateThreadResponse(thread=thread_to_proto(thread))

    @guarded
    async def GetThread(
        self, request: pb.GetThreadRequest, context: Context
    ) -> pb.GetThreadResponse:
        """Read a thread head."""
        scope = self._scopes.resolve(context)
        thread = await self._runtime.get_thread(scope, request.thread_id)
        return pb.GetThreadResponse(thread=thread_to_proto(thread))

    @guarded
    async def ListMessages(
        self, request: pb.ListMessagesRequest, context: Context
    ) -> pb.ListMessagesResponse:
        """List transcript messages."""
        scope = self._scopes.resolve(context)
        messages, token = await self._runtime.list_messages(
            scope,
            request.thread_id,
            page_size_=request.page_size,
            page_token=request.page_token,
            order=sort_order_from_proto(request.order, default="asc", field="order"),
            after_message_id=request.after_message_id,
            before_message_id=request.before_message_id,
        )
        return pb.ListMessagesResponse(
            messages=[message_pb(m) for m in messages], next_page_token=token
        )

    @guarded
    async def Send(self, request: pb.SendRequest, context: Context) -> pb.SendResponse:
        """Commit or queue a user message; return the run handle at once."""
        scope = self._scopes.resolve(context)
        handle = await self._runtime.send(scope, _send_input(request))
        return pb.SendResponse(run=run_handle_to_proto(handle))

    @guarded
    async def SendAndStream(
        self, request: pb.SendAndStreamRequest, context: Context
    ) -> AsyncIterator[bytes | pb.SendAndStreamResponse]:
        """Send, then stream the run that answers the message, on this call.

        The run's stream is opened before the handle is written, so a run that
        starts at once is already followed from its live channel while the
        handle is on the wire. Events are framed around their stored bodies, as
        StreamRun's are (pre-encoded responses, see :data:`PRE_ENCODED`).
        """
        scope = self._scopes.resolve(context)
        try:
            handle = await self._runtime.send(scope, _send_input(request.send))
        except InvalidArgument as e:
            raise e.under("send") from e
        events = await self._runtime.stream_run(scope, handle.run_id)
        yield pb.SendAndStreamResponse(run=run_handle_to_proto(handle))
        async for event in events:
            yield _send_and_stream_event(event.body)

    @guarded
    async def ListThreads(
        self, request: pb.ListThreadsRequest, context: Context
    ) -> pb.ListThreadsResponse:
        """List the caller's threads, newest first."""
        scope = self._scopes.resolve(context)
        threads, token = await self._runtime.list_threads(
            scope, page_size_=request.page_size, page_token=request.page_token
        )
        return pb.ListThreadsResponse(
            threads=[thread_to_proto(t) for t in threads], next_page_token=token
        )

    @guarded
    async def DeleteThread(
        self, request: pb.DeleteThreadRequest, context: Context
    ) -> pb.DeleteThreadResponse:
        """Delete an idle thread."""
        scope = self._scopes.resolve(context)
        await self._runtime.delete_thread(scope, request.thread_id, etag=request.etag)
        return pb.DeleteThreadResponse()

    @guarded
    async def UpdateThreadMetadata(
        self, request: pb.UpdateThreadMetadataRequest, context: Context
    ) -> pb.UpdateThreadMetadataResponse:
        """Merge or replace public metadata."""
        scope = self._scopes.resolve(context)
        thread = await self._runtime.update_thread_metadata(
            scope,
            request.thread_id,
            convert_struct(request.metadata, request.HasField("metadata"), "metadata"),
            replace=request.replace,
            etag=request.etag,
        )
        return pb.UpdateThreadMetadataResponse(thread=thread_to_proto(thread))

    @guarded
    async def Trigger(self, request: pb.TriggerRequest, context: Context) -> pb.TriggerResponse:
        """Start (or queue) a run with an operation input and no user message."""
        scope = self._scopes.resolve(context)
        try:
            value = value_from_proto(request.input) if request.HasField("input") else None
        except ValueError as e:
            raise InvalidArgument.field("input", str(e)) from e
        handle = await self._runtime.trigger(
            scope,
            TriggerInput(
                thread_id=request.thread_id,
                input=value,
                request_id=request.request_id,
                run_metadata=convert_struct(request.run_metadata, True, "run_metadata")
                if request.HasField("run_metadata")
                else None,
            ),
        )
        return pb.TriggerResponse(run=run_handle_to_proto(handle))

    @guarded
    async def Regenerate(
        self, request: pb.RegenerateRequest, context: Context
    ) -> pb.RegenerateResponse:
        """Re-answer from a target assistant message."""
        scope = self._scopes.resolve(context)
        result = await self._runtime.regenerate(
            scope,
            RegenerateInput(
                thread_id=request.thread_id,
                message_id=request.message_id,
                request_id=request.request_id,
                etag=request.etag,
                run_metadata=convert_struct(request.run_metadata, True, "run_metadata")
                if request.HasField("run_metadata")
                else None,
            ),
        )
        return pb.RegenerateResponse(
            run=run_handle_to_proto(result.run),
            removed_message_ids=result.removed_message_ids,
            retained_message_ids=result.retained_message_ids,
        )

    @guarded
    async def WatchThread(
        self, request: pb.WatchThreadRequest, context: Context
    ) -> AsyncIterator[pb.WatchThreadResponse]:
        """Stream head events: a snapshot, then status, message and metadata changes."""
        scope = self._scopes.resolve(context)
        changes = await self._runtime.watch_thread(
            scope, request.thread_id, after_version=request.after_version
        )
        async for change in changes:
            yield pb.WatchThreadResponse(
                thread=thread_to_proto(change.thread),
                change=thread_change_to_proto(change.change),
                message_ids=change.message_ids,
            )


fill_unimplemented(ThreadService, "pai.v1.ThreadService")
