"""Telemetry overhead: single-step runs/s with telemetry off, then on, in the same run.

"On" is the SDK's meter and tracer providers exporting to in-memory sinks
(an :class:`InMemoryMetricReader`, and an :class:`InMemorySpanExporter`
behind the batch span processor), so the cost measured is recording and
aggregation, not a network. Off and on alternate (off, on, off, on) to even
out a shared machine's drift; the ratio on/off is the figure to watch (the
target is at least 0.95).
"""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pai_grpc.bench._common import Report, Result, drop_schema, load
from pai_grpc.bench._runs import CLIENTS, _app
from pai_grpc.telemetry import Telemetry
from pai_grpc.telemetry import meter_provider as service_meter_provider

SECONDS = 4.0
ROUNDS = 2


async def _runs_per_second(backend: str, workdir: Path, telemetry: Telemetry | None) -> float:
    app, schema = await _app(backend, workdir, telemetry)
    try:
        await load(f"127.0.0.1:{app.port}", "runs", CLIENTS, 1.0)  # warm up
        return float((await load(f"127.0.0.1:{app.port}", "runs", CLIENTS, SECONDS))["rate"])
    finally:
        await app.stop(grace=1.0)
        await drop_schema(schema)


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Measure one backend: runs/s off and on, alternating."""
    off: list[float] = []
    on: list[float] = []
    points = 0
    spans = 0
    for _ in range(ROUNDS):
        off.append(await _runs_per_second(backend, workdir, None))
        reader = InMemoryMetricReader()
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
        meter_provider = service_meter_provider([reader])  # as the service builds it
        try:
            on.append(
                await _runs_per_second(backend, workdir, Telemetry(tracer_provider, meter_provider))
            )
            data = reader.get_metrics_data()
            points += sum(
                len(m.data.data_points)
                for rm in (data.resource_metrics if data else [])
                for sm in rm.scope_metrics
                for m in sm.metrics
            )
            tracer_provider.force_flush()
            spans += len(exporter.get_finished_spans())
        finally:
            meter_provider.shutdown()
            tracer_provider.shutdown()
    base = sum(off) / len(off)
    report.add(Result(backend, f"baseline: runs, telemetry off, {CLIENTS} clients", base, "runs/s"))
    report.add(
        Result(
            backend,
            f"runs, telemetry on, {CLIENTS} clients",
            sum(on) / len(on),
            "runs/s",
            base,
            "off",
            note=f"in-memory sinks; {points} metric points, {spans} spans; target >= 0.95x",
        )
    )


__all__ = ["run"]
