"""Provider adapter overhead: chunks/s and time to first chunk against the fake Messages API.

Three readings of the same scripted reply, in the same run: the bare SDK
(baseline), the AnthropicModel adapter, and the whole runtime (Send ->
StreamRun through gRPC).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import anthropic
import grpc

from pai.v1 import parts_pb2, run_service_pb2, run_service_pb2_grpc
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc.bench._common import Report, Result
from pai_grpc.fakes import FakeAnthropic, reply, text_block
from pai_grpc.models import ModelCall
from pai_grpc.models.anthropic import AnthropicModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import serve_in_process

KEY = "sk-bench"
MODEL = "claude-sonnet-5-5"
DELTAS = 2000
ROUNDS = 5


def _turn(deltas: int) -> object:  # a StreamTurn
    return reply(text_block("x" * deltas, chunks=["x"] * deltas))


async def _bare(client: anthropic.AsyncAnthropic) -> tuple[float, float]:
    start = time.perf_counter()
    first = 0.0
    count = 0
    stream = await client.messages.create(
        model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    async for event in stream:
        if event.type == "content_block_delta":
            count += 1
            if not first:
                first = time.perf_counter() - start
    return count / (time.perf_counter() - start), first


async def _adapter(model: AnthropicModel) -> tuple[float, float]:
    from pai_grpc.domain import ModelTextPart, UserModelMessage

    start = time.perf_counter()
    first = 0.0
    count = 0
    stream = await model.stream(
        ModelCall(messages=[UserModelMessage(content=[ModelTextPart(text="hi")])])
    )
    async for chunk in stream:
        if chunk.type == "text-delta":
            count += 1
            if not first:
                first = time.perf_counter() - start
    return count / (time.perf_counter() - start), first


async def _runtime(address: str, thread_id: str) -> tuple[float, float]:
    async with grpc.aio.insecure_channel(address) as channel:
        threads = tgrpc.ThreadServiceStub(channel)
        runs = run_service_pb2_grpc.RunServiceStub(channel)
        start = time.perf_counter()
        first = 0.0
        count = 0
        part = parts_pb2.MessagePart(text=parts_pb2.TextPart(text="hi"))
        handle = (await threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[part]))).run
        async for response in runs.StreamRun(
            run_service_pb2.StreamRunRequest(run_id=handle.run_id)
        ):
            if response.event.chunk.WhichOneof("chunk") == "text_delta":
                count += 1
                if not first:
                    first = time.perf_counter() - start
        return count / (time.perf_counter() - start), first


def _medians(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


async def _measure(
    fake: FakeAnthropic,
    client: anthropic.AsyncAnthropic,
    model: AnthropicModel,
    address: str,
    thread_id: str,
    deltas: int,
) -> list[tuple[float, float]]:
    """Medians of (chunks/s, seconds to first delta) for bare SDK, adapter, runtime."""
    fake.script(_turn(deltas))  # type: ignore[arg-type]
    await _bare(client)
    return [
        _medians([await _bare(client) for _ in range(ROUNDS)]),
        _medians([await _adapter(model) for _ in range(ROUNDS)]),
        _medians([await _runtime(address, thread_id) for _ in range(ROUNDS)]),
    ]


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Measure the adapter; the runtime reading uses the embedded store."""
    if backend != "sqlite":
        return
    async with FakeAnthropic(api_key=KEY) as fake:
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=fake.base_url, max_retries=0)
        model = AnthropicModel(MODEL, api_key=KEY, base_url=fake.base_url, max_retries=0)
        agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model)])
        url = f"sqlite:///{workdir / f'provider-{time.time_ns()}.db'}"
        try:
            async with serve_in_process(url, agents=agents, sends_per_second=0) as srv:
                thread_id = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
                # The fake server shares this event loop: a long reply measures
                # throughput, a short one the time to the first delta.
                long = await _measure(fake, client, model, srv.address, thread_id, DELTAS)
                short = await _measure(fake, client, model, srv.address, thread_id, 20)
        finally:
            await client.close()
            await model.aclose()
    names = ("bare SDK", "adapter", "runtime (Send+StreamRun)")
    for name, (rate, _) in zip(names, long, strict=True):
        report.add(
            Result(
                "provider", f"{name}: text deltas/s ({DELTAS}-delta reply)", rate, "chunks/s",
                long[0][0] if name != names[0] else None, "bare SDK",
            )
        )  # fmt: skip
    for name, (_, first) in zip(names, short, strict=True):
        report.add(
            Result(
                "provider", f"{name}: first delta (p50, 20-delta reply)", first * 1000, "ms",
                short[0][1] * 1000 if name != names[0] else None, "bare SDK",
            )
        )  # fmt: skip
