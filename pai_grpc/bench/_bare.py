"""The bare baseline server: plain grpc.aio answering the same message pattern as a run.

``python -m pai_grpc.bench._bare PORT EXTRA`` serves CreateThread, Send,
StreamRun and SendAndStream with no storage, no runtime and no interceptors. Send answers a
canned run handle; StreamRun yields one text-delta event per word the Send
carried plus ``EXTRA`` more, so a run of the offline model and its bare
counterpart put the same number of messages on the wire. The benchmark drives
both with the same load generator and reports the server's figures as ratios
to these. It runs on the event loop ``pai-grpc serve`` runs on by default
(uvloop where installed), so the ratios do not credit the loop to the runtime.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from pai.v1 import run_service_pb2, run_service_pb2_grpc, runs_pb2, threads_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc.cli import loop_runner


def text_deltas(count: int) -> Iterator[runs_pb2.RunEvent]:
    """``count`` text-delta events, each built as the runtime would."""
    for seq in range(count):
        event = runs_pb2.RunEvent(seq=seq + 1)
        event.time.GetCurrentTime()
        event.chunk.text_delta.id = "t0"
        event.chunk.text_delta.text = "word "
        yield event


class BareThreads(tgrpc.ThreadServiceServicer):
    """CreateThread, Send and SendAndStream with canned answers.

    Send remembers each run's word count for StreamRun; SendAndStream answers
    the handle and then the same events StreamRun would.
    """

    def __init__(self, words: dict[str, int], extra: int) -> None:
        self._words = words
        self._extra = extra
        self._next = 0

    async def CreateThread(self, request: Any, context: Any) -> tpb.CreateThreadResponse:
        """A thread id and nothing else."""
        self._next += 1
        return tpb.CreateThreadResponse(thread=threads_pb2.Thread(id=f"thr_{self._next}"))

    async def Send(self, request: Any, context: Any) -> tpb.SendResponse:
        """A run handle whose stream will carry one delta per word sent."""
        self._next += 1
        run_id = f"run_{self._next:026d}"
        self._words[run_id] = sum(len(p.text.text.split()) for p in request.parts)
        return tpb.SendResponse(run=runs_pb2.RunHandle(run_id=run_id, thread_id=request.thread_id))

    async def SendAndStream(
        self, request: Any, context: Any
    ) -> AsyncIterator[tpb.SendAndStreamResponse]:
        """The handle, then one delta per word sent plus the extra ones."""
        self._next += 1
        send = request.send
        run_id = f"run_{self._next:026d}"
        yield tpb.SendAndStreamResponse(
            run=runs_pb2.RunHandle(run_id=run_id, thread_id=send.thread_id)
        )
        words = sum(len(p.text.text.split()) for p in send.parts)
        for event in text_deltas(words + self._extra):
            yield tpb.SendAndStreamResponse(event=event)


class BareRuns(run_service_pb2_grpc.RunServiceServicer):
    """StreamRun as a plain server stream of text-delta events."""

    def __init__(self, words: dict[str, int], extra: int) -> None:
        self._words = words
        self._extra = extra

    async def StreamRun(
        self, request: Any, context: Any
    ) -> AsyncIterator[run_service_pb2.StreamRunResponse]:
        """``words + extra`` text-delta events, each built as the runtime would."""
        for event in text_deltas(self._words.pop(request.run_id, 0) + self._extra):
            yield run_service_pb2.StreamRunResponse(event=event)


async def serve(port: int, extra: int) -> None:
    """Serve until killed."""
    server = grpc.aio.server()
    words: dict[str, int] = {}
    tgrpc.add_ThreadServiceServicer_to_server(BareThreads(words, extra), server)
    run_service_pb2_grpc.add_RunServiceServicer_to_server(BareRuns(words, extra), server)
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    loop_runner("auto")(serve(int(sys.argv[1]), int(sys.argv[2])))
