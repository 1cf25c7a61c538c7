"""Runtime benchmarks: single-step runs/s and time-to-first-chunk through StreamRun.

Baselines measured in the same run: gRPC unary round trips/s (health checks)
with the same client concurrency, and time-to-first-chunk calling the same
zero-latency model directly.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai.v1 import parts_pb2, run_service_pb2, run_service_pb2_grpc
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc.bench._common import POSTGRES_URL, Report, Result, median_ms
from pai_grpc.config import Settings
from pai_grpc.models import ModelCall, ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import App
from storage import Store, upgrade

CLIENTS = 16
SECONDS = 4.0


def _model() -> ScriptedModel:
    return ScriptedModel(["ok"])  # zero latency, one short step


async def _app(backend: str, workdir: Path) -> tuple[App, str | None]:
    schema = None
    if backend == "sqlite":
        url = f"sqlite:///{workdir / f'runs-{time.time_ns()}.db'}"
    else:
        import asyncpg

        schema = f"bench_runs_{time.time_ns()}"
        conn = await asyncpg.connect(POSTGRES_URL)
        await conn.execute(f"CREATE SCHEMA {schema}")
        await conn.close()
        url = f"{POSTGRES_URL}?schema={schema}"
    store = Store.open(url, pool_size=40)
    await upgrade(store)
    app = App(
        Settings(address="127.0.0.1:0", database_url=url, runner_concurrency=64),
        AgentRegistry([Agent(name=DEFAULT_AGENT, model=_model())]),
        store=store,
    )
    await app.start()
    return app, schema


async def _drop(schema: str | None) -> None:
    if schema is None:
        return
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_URL)
    await conn.execute(f"DROP SCHEMA {schema} CASCADE")
    await conn.close()


def _text(s: str) -> parts_pb2.MessagePart:
    return parts_pb2.MessagePart(text=parts_pb2.TextPart(text=s))


async def _one_run(
    threads: tgrpc.ThreadServiceStub, runs: run_service_pb2_grpc.RunServiceStub, thread_id: str
) -> float:
    """Send and stream one run; return seconds to the first text delta."""
    start = time.perf_counter()
    first = 0.0
    handle = (await threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[_text("hi")]))).run
    async for response in runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=handle.run_id)):
        if not first and response.event.chunk.WhichOneof("chunk") == "text_delta":
            first = time.perf_counter() - start
    return first


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Measure one backend."""
    app, schema = await _app(backend, workdir)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
            threads = tgrpc.ThreadServiceStub(channel)
            runs = run_service_pb2_grpc.RunServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)

            async def unary_rate() -> float:
                stop = time.perf_counter() + 2.0
                count = 0

                async def client() -> None:
                    nonlocal count
                    while time.perf_counter() < stop:
                        await health.Check(health_pb2.HealthCheckRequest())
                        count += 1

                start = time.perf_counter()
                await asyncio.gather(*(client() for _ in range(CLIENTS)))
                return count / (time.perf_counter() - start)

            base = await unary_rate()
            report.add(Result(backend, f"baseline: unary RPCs, {CLIENTS} clients", base, "rpc/s"))

            ids = [
                (await threads.CreateThread(tpb.CreateThreadRequest())).thread.id
                for _ in range(CLIENTS)
            ]
            for thread_id in ids[:4]:  # warm up
                await _one_run(threads, runs, thread_id)
            stop = time.perf_counter() + SECONDS
            done = 0

            async def client(thread_id: str) -> None:
                nonlocal done
                while time.perf_counter() < stop:
                    await _one_run(threads, runs, thread_id)
                    done += 1

            start = time.perf_counter()
            await asyncio.gather(*(client(t) for t in ids))
            value = done / (time.perf_counter() - start)
            report.add(
                Result(
                    backend,
                    f"single-step runs, {CLIENTS} clients",
                    value,
                    "runs/s",
                    base,
                    "unary",
                    note="Send -> StreamRun to terminal",
                )
            )

            samples = [await _one_run(threads, runs, ids[0]) for _ in range(60)]
            model = _model()
            direct: list[float] = []
            for _ in range(60):
                t0 = time.perf_counter()
                stream = await model.stream(ModelCall(messages=[]))
                async for chunk in stream:
                    if chunk.type == "text-delta":
                        direct.append(time.perf_counter() - t0)
                        break
            through, bare = median_ms(samples), median_ms(direct)
            report.add(Result(backend, "time to first chunk via StreamRun (p50)", through, "ms"))
            report.add(Result(backend, "time to first chunk calling the model (p50)", bare, "ms"))
            report.add(
                Result(backend, "runtime overhead on first chunk (p50 diff)", through - bare, "ms")
            )
    finally:
        await app.stop(grace=1)
        await _drop(schema)
