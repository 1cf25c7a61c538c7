"""Provider adapter overhead: chunks/s and time to first chunk against the fake Messages API.

Three readings of the same scripted reply, in the same run: the bare SDK
(baseline), the AnthropicModel adapter, and the whole runtime (Send ->
StreamRun through gRPC). The served first delta is read with a reply that
starts at once and with one whose first token takes FIRST_TOKEN_SECONDS,
sent with Send + StreamRun and with SendAndStream.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path

import anthropic
import grpc

from pai.v1 import run_service_pb2_grpc
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc.bench._client import one_call, send_and_stream
from pai_grpc.bench._common import Report, Result, drop_schema, free_port
from pai_grpc.bench._process import CLI, served_database, serving
from pai_grpc.fakes import FakeAnthropic, StreamTurn, reply, text_block
from pai_grpc.models import ModelCall
from pai_grpc.models.anthropic import AnthropicModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import serve_in_process

KEY = "sk-bench"
MODEL = "claude-sonnet-5-5"
DELTAS = 2000
ROUNDS = 5
#: First-delta samples of the served reading (each side, alternating).
SERVED_SAMPLES = 30
#: The served reading is taken twice: with a reply whose first event follows the
#: headers at once (a burst: the whole reply is there before the client's
#: StreamRun reaches the server), and after this time to the first token (as a
#: real model: the StreamRun is attached when the first delta comes).
FIRST_TOKEN_SECONDS = 0.05


def _turn(deltas: int) -> StreamTurn:
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


async def _runtime(channel: grpc.aio.Channel) -> tuple[float, float]:
    """One Send + StreamRun on a new thread: the model gets the one message the bare SDK sends."""
    threads = tgrpc.ThreadServiceStub(channel)
    runs = run_service_pb2_grpc.RunServiceStub(channel)
    thread_id = (await threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    first, deltas, _, seconds = await send_and_stream(threads, runs, thread_id)
    return deltas / seconds, first


async def _one_call(channel: grpc.aio.Channel) -> float:
    """Seconds to the first delta of one SendAndStream on a new thread."""
    threads = tgrpc.ThreadServiceStub(channel)
    thread_id = (await threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    return (await one_call(threads, thread_id))[0]


def _medians(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


async def _measure(
    fake: FakeAnthropic,
    client: anthropic.AsyncAnthropic,
    model: AnthropicModel,
    channel: grpc.aio.Channel,
    deltas: int,
) -> list[tuple[float, float]]:
    """Medians of (chunks/s, seconds to first delta) for bare SDK, adapter, runtime."""
    fake.script(_turn(deltas))
    await _bare(client)
    return [
        _medians([await _bare(client) for _ in range(ROUNDS)]),
        _medians([await _adapter(model) for _ in range(ROUNDS)]),
        _medians([await _runtime(channel) for _ in range(ROUNDS)]),
    ]


async def _served(workdir: Path, first_token: float) -> tuple[float, float, float]:
    """First delta (p50, seconds) of the bare SDK and of `pai-grpc serve` in its own process.

    The server answers with Claude through the fake Messages API (its
    ``ANTHROPIC_BASE_URL``); the fake and the gRPC client share this
    process's loop, as the fake and the bare SDK do. Samples alternate. The
    fake sends its first event ``first_token`` seconds after the headers.
    Returns the bare SDK's, Send + StreamRun's and SendAndStream's.
    """
    async with FakeAnthropic(api_key=KEY) as fake:
        fake.script(replace(_turn(20), first_event_delay=first_token))
        env, schema = await served_database("sqlite", workdir, "provider")
        env.update(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=fake.base_url)
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=fake.base_url, max_retries=0)
        address = f"127.0.0.1:{free_port()}"
        try:
            async with (
                serving(*CLI, "serve", "--address", address, env=env, address=address),
                grpc.aio.insecure_channel(address) as channel,
            ):
                for _ in range(3):  # warm every path up
                    await _bare(client)
                    await _runtime(channel)
                    await _one_call(channel)
                bare: list[float] = []
                served: list[float] = []
                one: list[float] = []
                for _ in range(SERVED_SAMPLES):
                    bare.append((await _bare(client))[1])
                    served.append((await _runtime(channel))[1])
                    one.append(await _one_call(channel))
        finally:
            await client.close()
            await drop_schema(schema)
    return statistics.median(bare), statistics.median(served), statistics.median(one)


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
                # The fake server shares this event loop: a long reply measures
                # throughput, a short one the time to the first delta. Like the
                # SDK's connection, the channel is opened once, as clients do.
                async with grpc.aio.insecure_channel(srv.address) as channel:
                    long = await _measure(fake, client, model, channel, DELTAS)
                    short = await _measure(fake, client, model, channel, 20)
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
    for first_token, label in ((0.0, "at once"), (FIRST_TOKEN_SECONDS, "first token 50 ms")):
        bare, *served = await _served(workdir, first_token)
        report.add(Result("provider", f"bare SDK: first delta (p50, {label})", bare * 1000, "ms"))
        for calls, first in zip(("Send + StreamRun", "SendAndStream"), served, strict=True):
            report.add(
                Result(
                    "provider",
                    f"pai-grpc serve, {calls}: first delta (p50, {label})",
                    first * 1000,
                    "ms",
                    bare * 1000,
                    "bare SDK",
                    note=f"+{(first - bare) * 1000:.2f} ms; target <= bare SDK + 3 ms",
                )
            )
