"""Benchmark load generator, run in its own process so it does not share the server's core.

``python -m pai_grpc.bench._client ADDRESS MODE CLIENTS SECONDS [WORDS]`` prints
one JSON line: ``{"rate": ..., "ttfc": [...], "messages": ...}``. ``WORDS``: the
stream mode sends that many words (an echoing model streams one delta per
word) instead of the word ``stream``. The ``runs`` and ``ttfc`` modes send
with ``Send`` and then read ``StreamRun``; ``runs-one`` and ``ttfc-one`` do
both on one ``SendAndStream`` call.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai.v1 import parts_pb2, run_service_pb2, run_service_pb2_grpc
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc

#: StreamRun messages of the last run :func:`one_run` streamed (the wire pattern of a run).
last_messages = 0


async def send_and_stream(
    threads: tgrpc.ThreadServiceStub, runs: run_service_pb2_grpc.RunServiceStub, thread_id: str
) -> tuple[float, int, int, float]:
    """Send "hi" and stream the run to its terminal status.

    Returns seconds to the first text delta, the text deltas, the messages
    streamed, and seconds in all.
    """
    start = time.perf_counter()
    first = 0.0
    deltas = 0
    messages = 0
    part = parts_pb2.MessagePart(text=parts_pb2.TextPart(text="hi"))
    handle = (await threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[part]))).run
    async for response in runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=handle.run_id)):
        messages += 1
        if response.event.chunk.WhichOneof("chunk") == "text_delta":
            deltas += 1
            if not first:
                first = time.perf_counter() - start
    return first, deltas, messages, time.perf_counter() - start


async def one_call(threads: tgrpc.ThreadServiceStub, thread_id: str) -> tuple[float, int]:
    """SendAndStream "hi" to the run's terminal status.

    Returns seconds to the first text delta and the events streamed (the
    handle, the first response, is not an event).
    """
    start = time.perf_counter()
    first = 0.0
    messages = 0
    part = parts_pb2.MessagePart(text=parts_pb2.TextPart(text="hi"))
    request = tpb.SendAndStreamRequest(send=tpb.SendRequest(thread_id=thread_id, parts=[part]))
    async for response in threads.SendAndStream(request):
        if response.WhichOneof("response") != "event":
            continue
        messages += 1
        if not first and response.event.chunk.WhichOneof("chunk") == "text_delta":
            first = time.perf_counter() - start
    return first, messages


async def one_run(
    threads: tgrpc.ThreadServiceStub,
    runs: run_service_pb2_grpc.RunServiceStub,
    thread_id: str,
    one: bool = False,
) -> float:
    """Send and stream one run to its terminal status; return seconds to the first text delta.

    ``one``: on one SendAndStream call instead of Send and then StreamRun.
    """
    global last_messages
    if one:
        first, last_messages = await one_call(threads, thread_id)
    else:
        first, _, last_messages, _ = await send_and_stream(threads, runs, thread_id)
    return first


async def main(
    address: str, mode: str, clients: int, seconds: float, words: int = 0
) -> dict[str, object]:
    """Drive the server at ``address``."""
    async with grpc.aio.insecure_channel(address) as channel:
        threads = tgrpc.ThreadServiceStub(channel)
        runs = run_service_pb2_grpc.RunServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        stop = time.perf_counter() + seconds
        count = 0
        if mode == "unary":

            async def unary_client() -> None:
                nonlocal count
                while time.perf_counter() < stop:
                    await health.Check(health_pb2.HealthCheckRequest())
                    count += 1

            start = time.perf_counter()
            await asyncio.gather(*(unary_client() for _ in range(clients)))
            return {"rate": count / (time.perf_counter() - start)}
        ids = [
            (await threads.CreateThread(tpb.CreateThreadRequest())).thread.id
            for _ in range(clients)
        ]
        if mode == "stream":
            rates = []
            for _ in range(int(seconds)):
                text = " ".join(["x"] * words) if words else "stream"
                part = parts_pb2.MessagePart(text=parts_pb2.TextPart(text=text))
                handle = (await threads.Send(tpb.SendRequest(thread_id=ids[0], parts=[part]))).run
                deltas = 0
                start = time.perf_counter()
                async for response in runs.StreamRun(
                    run_service_pb2.StreamRunRequest(run_id=handle.run_id)
                ):
                    if response.event.chunk.WhichOneof("chunk") == "text_delta":
                        deltas += 1
                rates.append(deltas / (time.perf_counter() - start))
            return {"rate": sorted(rates)[len(rates) // 2]}
        one = mode.endswith("-one")
        if mode.startswith("ttfc"):
            for _ in range(5):
                await one_run(threads, runs, ids[0], one)
            samples = [await one_run(threads, runs, ids[0], one) for _ in range(int(seconds))]
            return {"ttfc": samples, "messages": last_messages}
        for thread_id in ids:
            await one_run(threads, runs, thread_id, one)  # warm up

        async def run_client(thread_id: str) -> None:
            nonlocal count
            while time.perf_counter() < stop:
                await one_run(threads, runs, thread_id, one)
                count += 1

        stop = time.perf_counter() + seconds
        start = time.perf_counter()
        await asyncio.gather(*(run_client(t) for t in ids))
        return {"rate": count / (time.perf_counter() - start), "runs": count}


if __name__ == "__main__":
    address, mode, clients, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    words = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    print(json.dumps(asyncio.run(main(address, mode, clients, seconds, words))))
