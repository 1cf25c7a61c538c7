"""Remote backend tools: any process implementing ToolService, declared by address.

The runtime side (:class:`RemoteToolServer`) lists a server's tools at start-up
and calls ExecuteTool for each call; an error status is an exception (source
``throw``), a ``failure`` answer is ``ctx.fail``, a ``suspend`` answer waits
for a human. An answer the runtime cannot use (undecodable, no result, a
suspend kind other than approval or data) is a tool protocol error, treated
like an error status: the call gets an error result with source ``throw``,
never a silent default. :func:`serve_tools` hosts Python tools as a ToolService.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import grpc

from pai.v1 import model_pb2, runs_pb2, tool_service_pb2, tool_service_pb2_grpc, tools_pb2
from pai_grpc.convert import struct_from_proto, struct_to_proto, value_from_proto, value_to_proto
from pai_grpc.domain import JsonValue
from pai_grpc.tools._tool import (
    InitialEntry,
    ResumeEntry,
    SuspendKind,
    Tool,
    ToolContext,
    ToolFailed,
    ToolSuspended,
)
from pai_grpc.tools._validate import InvalidToolInput, parse_input

log = logging.getLogger("pai_grpc.tools")

_KINDS: dict[SuspendKind, runs_pb2.PendingActionKind] = {
    "approval": runs_pb2.PENDING_ACTION_KIND_APPROVAL,
    "data": runs_pb2.PENDING_ACTION_KIND_DATA,
}
_SUSPEND_KINDS: dict[int, SuspendKind] = {wire: kind for kind, wire in _KINDS.items()}


class RemoteToolError(Exception):
    """A remote tool server is unreachable or answered badly."""


class RemoteToolServer:
    """A ToolService at ``address`` whose tools join an agent's tool set."""

    def __init__(self, name: str, address: str, *, timeout: float = 30.0) -> None:
        self.name = name
        self.address = address
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None

    async def connect(self) -> list[Tool]:
        """Open the channel and list the server's tools (fails loudly at start-up)."""
        self._channel = grpc.aio.insecure_channel(self.address)
        self._stub = tool_service_pb2_grpc.ToolServiceStub(self._channel)
        try:
            listed = await self._stub.ListTools(tool_service_pb2.ListToolsRequest(), timeout=10)
        except grpc.aio.AioRpcError as e:
            await self.close()
            raise RemoteToolError(
                f"tool server {self.name!r} at {self.address}: {e.code().name}: {e.details()}"
            ) from e
        return [self._tool(entry) for entry in listed.tools]

    async def close(self) -> None:
        """Close the channel."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    def _tool(self, entry: model_pb2.ToolManifestEntry) -> Tool:
        async def execute(value: Any, ctx: ToolContext) -> JsonValue:
            return await self._execute(entry.name, value, ctx)

        return Tool(
            name=entry.name,
            description=entry.description,
            input_schema=struct_from_proto(entry.input_schema)
            if entry.HasField("input_schema")
            else {"type": "object"},
            execute=execute,
        )

    async def _execute(self, name: str, value: Any, ctx: ToolContext) -> JsonValue:
        request = tool_service_pb2.ExecuteToolRequest(
            tool_name=name,
            tool_call_id=ctx.tool_call_id,
            run_id=ctx.run_id,
            thread_id=ctx.thread_id,
            entry=_entry_to_proto(ctx),
            suspend_history=[value_to_proto(v) for v in ctx.suspend_history],
        )
        if value is not None:
            request.input.CopyFrom(value_to_proto(value))
        try:
            response = await self._stub.ExecuteTool(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            # An error status is the remote equivalent of an exception (source throw).
            raise RemoteToolError(f"{e.code().name}: {e.details()}") from e
        if response is None:
            # grpc.aio hands back None for bytes that do not parse as the reply.
            raise self._protocol_error(name, "the answer does not decode as ExecuteToolResponse")
        match response.WhichOneof("result"):
            case "output":
                return value_from_proto(response.output)
            case "failure":
                data = (
                    value_from_proto(response.failure.data)
                    if response.failure.HasField("data")
                    else None
                )
                raise ToolFailed(response.failure.message, data)
            case "suspend":
                kind = _SUSPEND_KINDS.get(response.suspend.kind)
                if kind is None:
                    raise self._protocol_error(
                        name,
                        f"unknown suspend kind {_kind_name(response.suspend.kind)} "
                        "(approval or data)",
                    )
                request_value = (
                    value_from_proto(response.suspend.request)
                    if response.suspend.HasField("request")
                    else None
                )
                raise ToolSuspended(response.suspend.name or kind, kind, request_value)
            case _:
                raise self._protocol_error(
                    name, "an answer with no result (output, failure or suspend)"
                )

    def _protocol_error(self, tool: str, detail: str) -> RemoteToolError:
        """An answer that breaks the ToolService contract (an exception, source throw)."""
        return RemoteToolError(f"tool server {self.name!r} ({tool}): protocol error: {detail}")


def _kind_name(value: int) -> str:
    try:
        return str(runs_pb2.PendingActionKind.Name(value))
    except ValueError:
        return str(value)


def _entry_to_proto(ctx: ToolContext) -> tools_pb2.ToolExecutionEntry:
    entry = ctx.entry
    if isinstance(entry, ResumeEntry):
        resume = tools_pb2.ResumeEntry(name=entry.name, action_id=entry.action_id)
        if entry.resume is not None:
            resume.resume.CopyFrom(value_to_proto(entry.resume))
        return tools_pb2.ToolExecutionEntry(resume=resume)
    return tools_pb2.ToolExecutionEntry(initial=tools_pb2.InitialEntry())


def _entry_from_proto(entry: tools_pb2.ToolExecutionEntry) -> InitialEntry | ResumeEntry:
    if entry.WhichOneof("entry") == "resume":
        r = entry.resume
        return ResumeEntry(
            name=r.name,
            resume=value_from_proto(r.resume) if r.HasField("resume") else None,
            action_id=r.action_id,
        )
    return InitialEntry()


class ToolServicer(tool_service_pb2_grpc.ToolServiceServicer):
    """Hosts Python :class:`Tool` objects as a ToolService."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self._tools = {t.name: t for t in tools}

    async def ListTools(
        self, request: tool_service_pb2.ListToolsRequest, context: Any
    ) -> tool_service_pb2.ListToolsResponse:
        """The hosted tools and their schemas."""
        return tool_service_pb2.ListToolsResponse(
            tools=[
                model_pb2.ToolManifestEntry(
                    name=t.name,
                    description=t.description,
                    input_schema=struct_to_proto(t.input_schema),
                    source=model_pb2.TOOL_SOURCE_BACKEND,
                )
                for t in self._tools.values()
            ]
        )

    async def ExecuteTool(
        self, request: tool_service_pb2.ExecuteToolRequest, context: Any
    ) -> tool_service_pb2.ExecuteToolResponse:
        """Run one call; failures and suspends are answers, exceptions are statuses."""
        tool_ = self._tools.get(request.tool_name)
        if tool_ is None or tool_.execute is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no tool {request.tool_name!r}")
            raise AssertionError("unreachable")
        value = value_from_proto(request.input) if request.HasField("input") else None
        ctx = ToolContext(
            run_id=request.run_id,
            thread_id=request.thread_id,
            tool_call_id=request.tool_call_id,
            tool_name=request.tool_name,
            entry=_entry_from_proto(request.entry),
            suspend_history=[value_from_proto(v) for v in request.suspend_history],
        )
        try:
            output = await tool_.execute(parse_input(tool_, value), ctx)
        except InvalidToolInput as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            raise AssertionError("unreachable") from e
        except ToolFailed as e:
            failure = tool_service_pb2.ToolFailure(message=e.message)
            if e.data is not None:
                failure.data.CopyFrom(value_to_proto(e.data))
            return tool_service_pb2.ExecuteToolResponse(failure=failure)
        except ToolSuspended as e:
            suspend = tool_service_pb2.ToolSuspend(name=e.name, kind=_KINDS[e.kind])
            if e.request is not None:
                suspend.request.CopyFrom(value_to_proto(e.request))
            return tool_service_pb2.ExecuteToolResponse(suspend=suspend)
        response = tool_service_pb2.ExecuteToolResponse()
        response.output.CopyFrom(value_to_proto(output))
        return response


async def serve_tools(
    tools: Sequence[Tool], address: str = "127.0.0.1:0"
) -> tuple[grpc.aio.Server, int]:
    """Start a ToolService hosting ``tools``; return the server and its port."""
    server = grpc.aio.server()
    tool_service_pb2_grpc.add_ToolServiceServicer_to_server(ToolServicer(tools), server)
    port = server.add_insecure_port(address)
    await server.start()
    return server, port
