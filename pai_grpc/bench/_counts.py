"""Work per run as counts: database transactions and Python function calls.

On a shared machine, runs/s and CPU per run drift by 10-20% between two
identical measurements, and this one has no hardware counters. Counts do not
drift: the database transactions a single-step run costs (read and write
transactions started, per :attr:`storage.Store.engines`), on PostgreSQL
the SQL statements sent (each is a round trip), and the Python
function calls the server's event-loop thread makes per run (cProfile's call
count over the runs load; the load generator is another process), with
telemetry off and on (SDK providers with in-memory sinks, as in the
telemetry section). A change that removes work shows here even when the
timing benchmarks cannot resolve it.
"""

from __future__ import annotations

import cProfile
import pstats
from pathlib import Path

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from sqlalchemy import event

from pai_grpc.bench._common import Report, Result, drop_schema, load
from pai_grpc.bench._runs import CLIENTS, _app
from pai_grpc.bench._telemetry import _CountingExporter
from pai_grpc.server import tune_gc
from pai_grpc.telemetry import Telemetry
from pai_grpc.telemetry import meter_provider as service_meter_provider

SECONDS = 3.0


async def _per_run(
    backend: str, workdir: Path, telemetry: Telemetry | None
) -> tuple[float, float, float]:
    """Transactions, SQL statements (PostgreSQL) and event-loop Python calls per run."""
    app, schema = await _app(backend, workdir, telemetry)
    tune_gc()
    try:
        address = f"127.0.0.1:{app.port}"
        await load(address, "runs", CLIENTS, 1.0)  # warm up: caches, compiled statements
        engines = app.store.engines
        transactions = engines.transactions
        statements = [0]

        def count(*_: object) -> None:
            statements[0] += 1

        engine = engines.async_engine.sync_engine if engines.async_engine else None
        if engine is not None:
            event.listen(engine, "before_cursor_execute", count)
        profile = cProfile.Profile()
        profile.enable()
        measured = await load(address, "runs", CLIENTS, SECONDS)
        profile.disable()
        if engine is not None:
            event.remove(engine, "before_cursor_execute", count)
        # Each client's warm-up run falls inside the window too.
        runs = float(measured["runs"]) + CLIENTS
        calls = sum(stat[1] for stat in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]
        return (engines.transactions - transactions) / runs, statements[0] / runs, calls / runs
    finally:
        await app.stop(grace=1.0)
        await drop_schema(schema)


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Measure one backend: counts with telemetry off, then on."""
    transactions, statements, calls = await _per_run(backend, workdir, None)
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_CountingExporter()))
    meter_provider = service_meter_provider([InMemoryMetricReader()])
    try:
        _, _, traced_calls = await _per_run(
            backend, workdir, Telemetry(tracer_provider, meter_provider)
        )
    finally:
        meter_provider.shutdown()
        tracer_provider.shutdown()
    report.add(Result(backend, "database transactions per run", transactions, "tx"))
    if backend == "postgresql":
        report.add(Result(backend, "SQL statements per run", statements, "statements"))
    report.add(Result(backend, "baseline: Python calls per run, telemetry off", calls, "calls"))
    report.add(
        Result(
            backend,
            "Python calls per run, telemetry on",
            traced_calls,
            "calls",
            calls,
            "off",
            note=f"telemetry adds {traced_calls - calls:.0f} calls per run",
        )
    )


__all__ = ["run"]
