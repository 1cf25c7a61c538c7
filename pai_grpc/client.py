"""A small asynchronous client: the terminal chat and health checks."""

from __future__ import annotations

import sys
from typing import TextIO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai.v1 import parts_pb2, run_service_pb2, run_service_pb2_grpc, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc._wire import ClientTls, channel

_TERMINAL = {
    runs_pb2.RUN_STATUS_COMPLETED: "completed",
    runs_pb2.RUN_STATUS_FAILED: "failed",
    runs_pb2.RUN_STATUS_CANCELLED: "cancelled",
}


async def chat(
    address: str,
    message: str,
    *,
    thread_id: str | None = None,
    token: str | None = None,
    tls: ClientTls | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Send ``message`` and print the reply as it streams; return a process exit code.

    ``tls`` secures the channel (plaintext without).
    """
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    async with channel(address, tls) as api:
        threads = tgrpc.ThreadServiceStub(api)
        runs = run_service_pb2_grpc.RunServiceStub(api)
        try:
            if not thread_id:
                created = await threads.CreateThread(tpb.CreateThreadRequest(), metadata=metadata)
                thread_id = created.thread.id
                print(f"thread {thread_id}", file=err)
            sent = await threads.Send(
                tpb.SendRequest(
                    thread_id=thread_id,
                    parts=[parts_pb2.MessagePart(text=parts_pb2.TextPart(text=message))],
                ),
                metadata=metadata,
            )
            status = "unknown"
            stream = runs.StreamRun(
                run_service_pb2.StreamRunRequest(run_id=sent.run.run_id), metadata=metadata
            )
            async for response in stream:
                event = response.event
                kind = event.WhichOneof("event")
                if kind == "chunk" and event.chunk.WhichOneof("chunk") == "text_delta":
                    out.write(event.chunk.text_delta.text)
                    out.flush()
                elif kind == "chunk" and event.chunk.WhichOneof("chunk") == "error":
                    print(f"\nerror: {event.chunk.error.message}", file=err)
                elif kind == "status" and event.status.status in _TERMINAL:
                    status = _TERMINAL[event.status.status]
            out.write("\n")
        except grpc.aio.AioRpcError as e:
            print(f"error: {e.code().name}: {e.details()}", file=err)
            return 1
    if status != "completed":
        print(f"run {status}", file=err)
        return 1
    return 0


async def check_health(
    address: str, service: str = "", *, timeout: float = 3.0, tls: ClientTls | None = None
) -> bool:
    """Whether the server at ``address`` reports SERVING for ``service`` (over ``tls``, if set)."""
    async with channel(address, tls) as api:
        stub = health_pb2_grpc.HealthStub(api)
        try:
            response = await stub.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.aio.AioRpcError:
            return False
    return bool(response.status == health_pb2.HealthCheckResponse.SERVING)
