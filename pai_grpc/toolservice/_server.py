"""Hosting Python tools as a ToolService (what a remote tool server runs).

:func:`serve_tools` starts a gRPC server whose :class:`ToolServicer` lists the
tools and runs each ExecuteTool call: a ``ctx.fail`` is a ``failure`` answer,
a ``ctx.suspend`` a ``suspend`` answer, and an exception an error status.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from pai.v1 import tool_service_pb2, tool_service_pb2_grpc
from pai_grpc._wire import Keepalive, ServerTls, add_port
from pai_grpc.convert import (
    suspend_kind_to_proto,
    tool_entry_from_proto,
    tool_manifest_entry_to_proto,
    value_from_proto,
    value_to_proto,
)
from pai_grpc.domain import InitialEntry
from pai_grpc.telemetry import Telemetry, tracing
from pai_grpc.tools import (
    InvalidToolInput,
    Tool,
    ToolContext,
    ToolFailed,
    ToolSuspended,
    parse_input,
)


class ToolServicer(tool_service_pb2_grpc.ToolServiceServicer):
    """Hosts Python :class:`Tool` objects as a ToolService."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self._tools = {t.name: t for t in tools}

    async def ListTools(
        self, request: tool_service_pb2.ListToolsRequest, context: Any
    ) -> tool_service_pb2.ListToolsResponse:
        """The hosted tools and their schemas."""
        return tool_service_pb2.ListToolsResponse(
            # Whatever runs behind a ToolService is a backend tool to its caller.
            tools=[
                tool_manifest_entry_to_proto(t.manifest().model_copy(update={"source": "backend"}))
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
        try:
            value = value_from_proto(request.input) if request.HasField("input") else None
            # An absent entry is a first execution; a present one must name its arm.
            entry = (
                tool_entry_from_proto(request.entry)
                if request.HasField("entry")
                else InitialEntry()
            )
            history = [value_from_proto(v) for v in request.suspend_history]
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            raise AssertionError("unreachable") from e
        ctx = ToolContext(
            run_id=request.run_id,
            thread_id=request.thread_id,
            tool_call_id=request.tool_call_id,
            tool_name=request.tool_name,
            entry=entry,
            suspend_history=history,
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
            suspend = tool_service_pb2.ToolSuspend(name=e.name, kind=suspend_kind_to_proto(e.kind))
            if e.request is not None:
                suspend.request.CopyFrom(value_to_proto(e.request))
            return tool_service_pb2.ExecuteToolResponse(suspend=suspend)
        response = tool_service_pb2.ExecuteToolResponse()
        response.output.CopyFrom(value_to_proto(output))
        return response


#: Environment prefix of a tool server's TLS (``CERT``, ``KEY``, ``CLIENT_CA``).
TOOL_SERVER_TLS_ENV = "PAI_TOOL_SERVER_TLS_"


async def serve_tools(
    tools: Sequence[Tool],
    address: str = "127.0.0.1:0",
    *,
    tls: ServerTls | None = None,
    telemetry: Telemetry | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Start a ToolService hosting ``tools``; return the server and its port.

    ``tls`` secures the listener (default: ``PAI_TOOL_SERVER_TLS_CERT`` / ``KEY``
    / ``CLIENT_CA`` from the environment, else plaintext); with a client CA the
    runtime must present a certificate (mutual TLS). With a traced
    ``telemetry`` each call is a server span continuing the runtime's
    ``traceparent``.
    """
    tls = tls if tls is not None else ServerTls.from_env(TOOL_SERVER_TLS_ENV)
    server = grpc.aio.server(
        options=Keepalive().server_options(), interceptors=tracing.server_interceptors(telemetry)
    )
    tool_service_pb2_grpc.add_ToolServiceServicer_to_server(ToolServicer(tools), server)
    port = add_port(server, address, tls)
    await server.start()
    return server, port
