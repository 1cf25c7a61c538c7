"""The one-shot terminal chat and the health check (``pai-grpc chat MESSAGE`` / ``health``)."""

from __future__ import annotations

import sys
from typing import TextIO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai_grpc._wire import ClientTls, channel
from pai_grpc.client._client import PaiClient
from pai_grpc.client._errors import PaiClientError
from pai_grpc.client._retry import RetryPolicy
from pai_grpc.client._stream import is_recovery_abort
from pai_grpc.domain import ChunkEvent, ErrorChunk, StatusEvent, TextDeltaChunk

#: The terminal commands give up on an unreachable server within seconds.
CLI_RETRY = RetryPolicy(max_attempts=4, initial_backoff=0.2, max_backoff=1.0)


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
    status = "unknown"
    async with PaiClient(address, token=token, tls=tls, retry=CLI_RETRY) as client:
        try:
            if thread_id:
                thread = client.thread(thread_id)
            else:
                thread = await client.create_thread()
                print(f"thread {thread.id}", file=err)
            run = await thread.send(message)
            async for event in run.stream():
                payload = event.payload
                if isinstance(payload, ChunkEvent):
                    chunk = payload.chunk
                    if isinstance(chunk, TextDeltaChunk):
                        out.write(chunk.text)
                        out.flush()
                    elif isinstance(chunk, ErrorChunk):
                        print(f"\nerror: {chunk.message}", file=err)
                    elif is_recovery_abort(event):
                        out.write("\n[the server restarted; the reply starts again]\n")
                elif isinstance(payload, StatusEvent):
                    status = payload.status
            out.write("\n")
        except PaiClientError as e:
            print(f"error: {e.code.name}: {e.message}", file=err)
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
