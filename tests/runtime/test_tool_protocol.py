"""Remote tool servers that break the ToolService contract.

An answer the runtime cannot use is a tool protocol error. Like an error
status, it is the remote equivalent of an exception: the call gets a
model-visible error result with source ``throw`` (TH-04), and no pending
action is created for an answer that is not a valid suspend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest

from pai.v1 import model_pb2, runs_pb2, tool_service_pb2, tool_service_pb2_grpc
from pai_grpc.convert import struct_to_proto
from pai_grpc.domain import ErrorTextOutput
from pai_grpc.lifecycle import AfterToolResultInput, lifecycle
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import serve_in_process
from pai_grpc.toolservice import RemoteToolServer
from tests.runtime.support import new_thread, send, wait_run
from tests.runtime.test_tools import scripted_tools, tool_results

#: Field 1 claims 5 bytes and 2 follow: never parses as an ExecuteToolResponse.
GARBAGE = b"\x0a\x05ab"


class OddToolServer(tool_service_pb2_grpc.ToolServiceServicer):
    """One tool, ``book``, whose ExecuteTool answers with ``answer``."""

    def __init__(self, answer: tool_service_pb2.ExecuteToolResponse | bytes) -> None:
        self.answer = answer

    async def ListTools(
        self, request: tool_service_pb2.ListToolsRequest, context: Any
    ) -> tool_service_pb2.ListToolsResponse:
        return tool_service_pb2.ListToolsResponse(
            tools=[
                model_pb2.ToolManifestEntry(
                    name="book",
                    description="Books a table.",
                    input_schema=struct_to_proto({"type": "object"}),
                    source=model_pb2.TOOL_SOURCE_BACKEND,
                )
            ]
        )

    async def ExecuteTool(
        self, request: tool_service_pb2.ExecuteToolRequest, context: Any
    ) -> tool_service_pb2.ExecuteToolResponse | bytes:
        return self.answer


def _wire(message: Any) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


@asynccontextmanager
async def odd_tool_server(
    answer: tool_service_pb2.ExecuteToolResponse | bytes,
) -> AsyncIterator[str]:
    """A ToolService on loopback whose replies go out through an identity serializer."""
    servicer = OddToolServer(answer)
    handlers = {
        "ListTools": grpc.unary_unary_rpc_method_handler(
            servicer.ListTools,
            request_deserializer=tool_service_pb2.ListToolsRequest.FromString,
            response_serializer=_wire,
        ),
        "ExecuteTool": grpc.unary_unary_rpc_method_handler(
            servicer.ExecuteTool,
            request_deserializer=tool_service_pb2.ExecuteToolRequest.FromString,
            response_serializer=_wire,
        ),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("pai.v1.ToolService", handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


def suspend(kind: int) -> tool_service_pb2.ExecuteToolResponse:
    return tool_service_pb2.ExecuteToolResponse(
        suspend=tool_service_pb2.ToolSuspend(name="confirm", kind=kind)
    )


BAD_ANSWERS = {
    "suspend-unspecified": (suspend(runs_pb2.PENDING_ACTION_KIND_UNSPECIFIED), "suspend kind"),
    "suspend-client-tool": (suspend(runs_pb2.PENDING_ACTION_KIND_CLIENT_TOOL), "suspend kind"),
    "suspend-unknown-number": (suspend(99), "suspend kind"),
    "no-result": (tool_service_pb2.ExecuteToolResponse(), "no result"),
    "undecodable": (GARBAGE, "does not decode"),
}


@pytest.mark.rule("TH-04")
@pytest.mark.parametrize("case", list(BAD_ANSWERS))
async def test_an_unusable_tool_server_answer_is_a_tool_protocol_error(
    database_url: str, case: str
) -> None:
    answer, says = BAD_ANSWERS[case]
    async with odd_tool_server(answer) as address:
        remote = RemoteToolServer("booking-svc", address)
        try:
            tools = await remote.connect()
            model = scripted_tools(("c1", "book", {}))
            sources: list[str | None] = []

            def seen(input: AfterToolResultInput) -> None:
                assert input.result is not None
                sources.append(input.result.source)

            agent = Agent(
                name=DEFAULT_AGENT,
                model=model,
                tools=tools,
                lifecycle=lifecycle("seen", after_tool_result=seen),
            )
            async with serve_in_process(database_url, agents=AgentRegistry([agent])) as srv:
                thread_id = await new_thread(srv)
                handle = await send(srv, thread_id, "go")
                run = await wait_run(srv, handle.run_id)
                # Not silently an approval: nothing waits for a human.
                assert run.status == runs_pb2.RUN_STATUS_COMPLETED
                assert await srv.store.list_pending_actions("default", handle.run_id) == []
                result = tool_results(model.calls[1])["c1"]
                assert isinstance(result, ErrorTextOutput)
                assert "booking-svc" in result.value
                assert says in result.value
                assert sources == ["throw"]  # like an error status: an exception
        finally:
            await remote.close()
