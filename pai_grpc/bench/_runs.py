"""Runtime benchmarks: single-step runs/s and time-to-first-chunk through StreamRun.

First table: `pai-grpc serve` in its own process, as users run it (see
:mod:`pai_grpc.bench._process`). Second table: the server in the benchmark's
own process with a zero-latency scripted model; baselines measured in the same
run: gRPC unary round trips/s (health checks) with the same client
concurrency, and time-to-first-chunk calling the same model directly.
"""

from __future__ import annotations

import time
from pathlib import Path

from pai_grpc.bench import _process
from pai_grpc.bench._common import (
    Report,
    Result,
    bench_database,
    drop_schema,
    load,
    median_ms,
)
from pai_grpc.config import Settings
from pai_grpc.domain import StepStreamChunk, TextDeltaChunk
from pai_grpc.models import ModelCall, ScriptedModel, last_user_text, text_step
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import App
from pai_grpc.telemetry import Telemetry
from storage import Store, upgrade

CLIENTS = 16
SECONDS = 4.0


STREAM_DELTAS = 20_000


def _reply(call: ModelCall) -> list[StepStreamChunk]:
    # Zero latency: one short step, or a long one when the load generator asks to stream.
    if last_user_text(call.messages) == "stream":
        return (
            text_step("x" * STREAM_DELTAS, block_id="s", words=False)[:1]
            + [TextDeltaChunk(id="s", text="x") for _ in range(STREAM_DELTAS)]
            + text_step("", block_id="s")[-2:]
        )
    return text_step("ok")


def _model() -> ScriptedModel:
    return ScriptedModel(_reply)


async def _app(
    backend: str, workdir: Path, telemetry: Telemetry | None = None
) -> tuple[App, str | None]:
    url, schema = await bench_database(backend, workdir, "runs")
    store = Store.open(url, pool_size=40)
    await upgrade(store)
    app = App(
        # One scope sends far faster than its default rate: measure the runtime, not the
        # limit (the active-run count stays on, as in production).
        Settings(
            address="127.0.0.1:0", database_url=url, runner_concurrency=64, sends_per_second=0
        ),
        AgentRegistry([Agent(name=DEFAULT_AGENT, model=_model())]),
        store=store,
        telemetry=telemetry,
    )
    await app.start()
    return app, schema


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Measure one backend: served by its own process, then in process."""
    print(f"  -- {backend}: pai-grpc serve in its own process, load in another", flush=True)
    await _process.run(report, backend, workdir)
    print(f"  -- {backend}: server in the benchmark process", flush=True)
    await _in_process(report, backend, workdir)


async def _in_process(report: Report, backend: str, workdir: Path) -> None:
    app, schema = await _app(backend, workdir)
    address = f"127.0.0.1:{app.port}"
    try:
        base = (await load(address, "unary", CLIENTS, 2.0))["rate"]
        report.add(Result(backend, f"baseline: unary RPCs, {CLIENTS} clients", base, "rpc/s"))
        value = (await load(address, "runs", CLIENTS, SECONDS))["rate"]
        report.add(
            Result(
                backend,
                f"single-step runs, {CLIENTS} clients",
                value,
                "runs/s",
                base,
                "unary",
                note="Send -> StreamRun to terminal; clients in another process",
            )
        )
        stream_rate = (await load(address, "stream", 1, 3))["rate"]
        report.add(
            Result(
                backend,
                f"one stream: text deltas through StreamRun ({STREAM_DELTAS})",
                stream_rate,
                "chunks/s",
                base,
                "unary",
            )
        )
        samples = (await load(address, "ttfc", 1, 60))["ttfc"]
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
        report.add(Result(backend, "time to first chunk via Send+StreamRun (p50)", through, "ms"))
        report.add(Result(backend, "time to first chunk calling the model (p50)", bare, "ms"))
        report.add(
            Result(backend, "runtime overhead on first chunk (p50 diff)", through - bare, "ms")
        )
    finally:
        await app.stop(grace=1)
        await drop_schema(schema)
