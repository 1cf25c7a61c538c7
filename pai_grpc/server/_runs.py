"""RunService: run records and their resumable event streams."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from google.protobuf.message import Message

from pai.v1 import run_service_pb2 as pb
from pai.v1 import run_service_pb2_grpc as pb_grpc
from pai_grpc.convert import pending_action_to_proto, resolution_from_proto, run_to_proto
from pai_grpc.domain import NotStrictJson, Resolution
from pai_grpc.errors import InvalidArgument
from pai_grpc.runtime import Runtime
from pai_grpc.server._errors import Context, fill_unimplemented, guarded
from pai_grpc.server._scope import ScopeResolver


def event_framer(response: type[Message]) -> Callable[[bytes], bytes]:
    """Frames a stored ``RunEvent`` body as a ``response`` message whose ``event`` field holds it.

    A ``response`` with nothing else set is the field's key, the body's
    length, the body: its wire form is built around the stored bytes, with
    no decoding or encoding of the event per reader.
    """
    field = response.DESCRIPTOR.fields_by_name["event"]
    # A one-byte key (length-delimited) for field numbers up to 15.
    assert field.number < 16, f"{response.__name__}.event needs a varint key"
    key = bytes([field.number << 3 | 2])

    def frame(body: bytes) -> bytes:
        size = len(body)
        length = bytearray()
        while size > 0x7F:
            length.append(size & 0x7F | 0x80)
            size >>= 7
        length.append(size)
        return key + length + body

    return frame


#: ``StreamRunResponse(event=RunEvent.FromString(body))`` in wire form, built by framing.
stream_run_response = event_framer(pb.StreamRunResponse)


class RunService(pb_grpc.RunServiceServicer):
    """Runs and their event streams."""

    def __init__(self, runtime: Runtime, scopes: ScopeResolver) -> None:
        self._runtime = runtime
        self._scopes = scopes

    @guarded
    async def GetRun(self, request: pb.GetRunRequest, context: Context) -> pb.GetRunResponse:
        """Read a run and its open pending actions."""
        scope = self._scopes.resolve(context)
        run, pending = await self._runtime.get_run(scope, request.run_id)
        return pb.GetRunResponse(
            run=run_to_proto(run), pending_actions=[pending_action_to_proto(p) for p in pending]
        )

    @guarded
    async def StreamRun(
        self, request: pb.StreamRunRequest, context: Context
    ) -> AsyncIterator[bytes]:
        """Replay the run's events after ``after_seq``, then follow live until terminal.

        Responses are pre-encoded ``StreamRunResponse`` bytes around each event's
        stored body (registered with a pass-through serializer, see
        :func:`pai_grpc.server._decode.add_guarded`): no event is decoded or
        encoded again per reader.
        """
        scope = self._scopes.resolve(context)
        events = await self._runtime.stream_run(scope, request.run_id, after_seq=request.after_seq)
        async for event in events:
            yield stream_run_response(event.body)

    @guarded
    async def ListRuns(self, request: pb.ListRunsRequest, context: Context) -> pb.ListRunsResponse:
        """List a thread's runs, newest first."""
        scope = self._scopes.resolve(context)
        runs, token = await self._runtime.list_runs(
            scope, request.thread_id, page_size_=request.page_size, page_token=request.page_token
        )
        return pb.ListRunsResponse(runs=[run_to_proto(r) for r in runs], next_page_token=token)

    @guarded
    async def CancelRun(
        self, request: pb.CancelRunRequest, context: Context
    ) -> pb.CancelRunResponse:
        """Cancel a queued, running or waiting run."""
        scope = self._scopes.resolve(context)
        run = await self._runtime.cancel_run(
            scope, request.run_id, reason=request.reason if request.HasField("reason") else None
        )
        return pb.CancelRunResponse(run=run_to_proto(run))

    @guarded
    async def ResolvePendingAction(
        self, request: pb.ResolvePendingActionRequest, context: Context
    ) -> pb.ResolvePendingActionResponse:
        """Answer a pending action (client tool result, approval decision or data)."""
        scope = self._scopes.resolve(context)
        run = await self._runtime.resolve_pending_action(
            scope,
            request.run_id,
            request.action_id,
            _resolution(request),
            request_id=request.request_id,
        )
        return pb.ResolvePendingActionResponse(run=run_to_proto(run))


def _resolution(request: pb.ResolvePendingActionRequest) -> Resolution:
    """The domain resolution of a request, INVALID_ARGUMENT naming the bad field."""
    if request.WhichOneof("resolution") is None:
        raise InvalidArgument.field(
            "resolution", "set one of tool_result, approval or data", reason="MISSING_RESOLUTION"
        )
    try:
        return resolution_from_proto(request)
    except ValueError as e:
        if isinstance(e.__cause__, NotStrictJson):  # name the offending value, not the oneof
            raise InvalidArgument.field(e.__cause__.path, e.__cause__.detail) from e
        raise InvalidArgument.field("resolution", str(e)) from e


fill_unimplemented(RunService, "pai.v1.RunService")
