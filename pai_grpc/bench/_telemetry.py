"""Telemetry overhead: single-step runs/s with telemetry off, then on, in the same run.

"On" is the SDK's meter and tracer providers exporting to in-memory sinks
(an :class:`InMemoryMetricReader`, and behind the batch span processor an
exporter that counts the spans it is handed and lets them go, as a network
exporter does once it has sent them: keeping fifteen thousand spans alive
would add garbage-collector work no deployment has), so the cost measured is
recording and aggregation, not a network. Like ``pai-grpc serve``, the
benchmark freezes the started server's heap (:func:`tune_gc`). Off and on
alternate (off, on, off, on) to even out a shared machine's drift; the
ratio on/off is the figure to watch (the target is at least 0.95). The
server's CPU per run (this process's CPU time over the measured window; the
load generator is another process) is printed beside it, because on a shared
machine it drifts less than throughput.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from pai_grpc.bench._common import Report, Result, drop_schema, load
from pai_grpc.bench._runs import CLIENTS, _app
from pai_grpc.server import tune_gc
from pai_grpc.telemetry import Telemetry
from pai_grpc.telemetry import meter_provider as service_meter_provider

SECONDS = 4.0
ROUNDS = 3


class _CountingExporter(SpanExporter):
    """An in-memory span sink that keeps a count, not the spans."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Count the batch."""
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


async def _runs_per_second(
    backend: str, workdir: Path, telemetry: Telemetry | None
) -> tuple[float, float]:
    """Runs/s and the server's CPU milliseconds per run."""
    app, schema = await _app(backend, workdir, telemetry)
    tune_gc()  # as `pai-grpc serve` does once started
    try:
        await load(f"127.0.0.1:{app.port}", "runs", CLIENTS, 1.0)  # warm up
        cpu = time.process_time()
        rate = float((await load(f"127.0.0.1:{app.port}", "runs", CLIENTS, SECONDS))["rate"])
        cpu = time.process_time() - cpu
        return rate, cpu * 1000.0 / max(rate * SECONDS, 1.0)
    finally:
        await app.stop(grace=1.0)
        await drop_schema(schema)
        gc.unfreeze()


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Measure one backend: runs/s off and on, alternating."""
    off: list[tuple[float, float]] = []
    on: list[tuple[float, float]] = []
    points = 0
    spans = 0
    for _ in range(ROUNDS):
        off.append(await _runs_per_second(backend, workdir, None))
        reader = InMemoryMetricReader()
        exporter = _CountingExporter()
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
            spans += exporter.spans
        finally:
            meter_provider.shutdown()
            tracer_provider.shutdown()

    def median(rounds: list[tuple[float, float]], i: int) -> float:
        return statistics.median(r[i] for r in rounds)

    base = median(off, 0)
    report.add(Result(backend, f"baseline: runs, telemetry off, {CLIENTS} clients", base, "runs/s"))
    report.add(
        Result(
            backend,
            f"runs, telemetry on, {CLIENTS} clients",
            median(on, 0),
            "runs/s",
            base,
            "off",
            note=f"in-memory sinks; {points} metric points, {spans} spans; target >= 0.95x",
        )
    )
    base_cpu = median(off, 1)
    report.add(Result(backend, "baseline: server CPU per run, telemetry off", base_cpu, "ms"))
    report.add(
        Result(backend, "server CPU per run, telemetry on", median(on, 1), "ms", base_cpu, "off")
    )


__all__ = ["run"]
