"""The runtime's client of a ToolService: remote backend tools declared by address.

:class:`RemoteToolServer` lists a server's tools at start-up and calls
ExecuteTool for each call; an error status is an exception (source
``throw``), a ``failure`` answer is ``ctx.fail``, a ``suspend`` answer waits
for a human. An answer the runtime cannot use (undecodable, no result, a
suspend kind other than approval or data) is a tool protocol error, treated
like an error status: the call gets an error result with source ``throw``,
never a silent default.
"""

from __future__ import annotations

from typing import Any

import grpc

from pai.v1 import model_pb2, tool_service_pb2, tool_service_pb2_grpc
from pai_grpc._wire import ClientTls, TlsError, channel
from pai_grpc.convert import (
    struct_from_proto,
    suspend_kind_from_proto,
    tool_entry_to_proto,
    value_from_proto,
    value_to_proto,
)
from pai_grpc.domain import JsonValue
from pai_grpc.telemetry import Telemetry, tracing
from pai_grpc.tools import Tool, ToolContext, ToolFailed, ToolSuspended


class RemoteToolError(Exception):
    """A remote tool server is unreachable or answered badly."""


class RemoteToolServer:
    """A ToolService at ``address`` whose tools join an agent's tool set."""

    def __init__(
        self,
        name: str,
        address: str,
        *,
        timeout: float = 30.0,
        tls: ClientTls | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.name = name
        #: Traced processes send ``traceparent`` with every tool call.
        self.telemetry = telemetry
        self.address = address
        self.timeout = timeout
        #: TLS of the channel (plaintext without).
        self.tls = tls
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None

    async def connect(self) -> list[Tool]:
        """Open the channel and list the server's tools (fails loudly at start-up)."""
        try:
            self._channel = channel(
                self.address, self.tls, interceptors=tracing.client_interceptors(self.telemetry)
            )
        except TlsError as e:
            raise RemoteToolError(f"tool server {self.name!r} at {self.address}: {e}") from e
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
            entry=tool_entry_to_proto(ctx.entry),
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
                try:
                    kind = suspend_kind_from_proto(response.suspend.kind)
                except ValueError as e:
                    raise self._protocol_error(name, str(e)) from e
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
