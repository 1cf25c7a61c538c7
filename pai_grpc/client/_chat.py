"""The one-shot terminal chat (``pai-grpc chat MESSAGE``)."""

from __future__ import annotations

import sys
from typing import TextIO

from pai_grpc._wire import ClientTls
from pai_grpc.client._client import PaiClient
from pai_grpc.client._errors import PaiClientError
from pai_grpc.client._retry import RetryPolicy
from pai_grpc.client._stream import is_recovery_abort
from pai_grpc.domain import (
    ChunkEvent,
    ErrorChunk,
    PendingActionEvent,
    StatusEvent,
    TextDeltaChunk,
)

#: The terminal commands give up on an unreachable server within seconds.
CLI_RETRY = RetryPolicy(max_attempts=4, initial_backoff=0.2, max_backoff=1.0)


async def chat(
    address: str,
    message: str,
    *,
    thread_id: str | None = None,
    agent: str = "",
    token: str | None = None,
    tls: ClientTls | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Send ``message`` and print the reply as it streams; return a process exit code.

    ``tls`` secures the channel (plaintext without). A run that waits for a
    pending action (an approval, a client tool) is left waiting: the command
    prints how to resolve it with ``pai-grpc actions resolve`` and exits 0.
    """
    status = "unknown"
    async with PaiClient(address, token=token, tls=tls, retry=CLI_RETRY) as client:
        try:
            if thread_id:
                thread = client.thread(thread_id)
            else:
                thread = await client.create_thread(agent=agent)
                print(f"thread {thread.id}", file=err)
            stream = await thread.send_and_stream(message)
            run = stream.run
            async for event in stream:
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
                elif isinstance(payload, PendingActionEvent):
                    action = payload.action
                    out.write("\n")
                    print(
                        f"run {run.id} waits for {action.kind} {action.id} ({action.tool_name}): "
                        f"pai-grpc actions resolve {run.id} {action.id} "
                        + (
                            "--approve|--deny"
                            if action.kind == "approval"
                            else "--tool-output JSON"
                        ),
                        file=err,
                    )
                    return 0
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
