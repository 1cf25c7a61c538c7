"""Metrics: what a real server records for runs, tools, hooks, RPCs and commits."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
from opentelemetry import trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Sum
from pydantic import BaseModel

from pai.v1 import runs_pb2
from pai_grpc.lifecycle import AgentLifecycle, BeforeToolCallInput
from pai_grpc.models import ModelCall, ScriptedModel, last_user_text, tool_call_step
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.telemetry import Telemetry
from pai_grpc.telemetry._metrics import PROMETHEUS_NAMES, Metrics, bounded_reason, metrics_for
from pai_grpc.testing import serve_in_process
from pai_grpc.tools import ToolContext, tool
from tests.runtime.support import collect, new_thread, send, wait_run


class City(BaseModel):
    city: str


@tool(description="Current weather in a city.")
async def weather(value: City, ctx: ToolContext) -> dict[str, Any]:
    return {"city": value.city, "celsius": 21}


class Guard(AgentLifecycle):
    """Refuses (by raising) to let the weather of Boom be looked up."""

    name = "guard"

    async def before_tool_call(self, input: BeforeToolCallInput) -> None:
        if isinstance(input.input, dict) and input.input.get("city") == "Boom":
            raise RuntimeError("no")


def script(call: ModelCall) -> Any:
    """Look the weather up for the city named in the message, then answer."""
    if call.messages[-1].role == "tool":
        return "sunny"
    city = "Boom" if "Boom" in last_user_text(call.messages) else "Paris"
    return tool_call_step(("c1", "weather", {"city": city}))


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    """Every data point of metric ``name`` (as OpenTelemetry names it)."""
    data = reader.get_metrics_data()
    out: list[Any] = []
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    out.extend(metric.data.data_points)
    return out


def value(reader: InMemoryMetricReader, name: str, **labels: Any) -> float:
    """The sum of the matching points (counters: the value; histograms: the count)."""
    total = 0.0
    for p in points(reader, name):
        if all(p.attributes.get(k) == v for k, v in labels.items()):
            total += p.count if hasattr(p, "bucket_counts") else p.value
    return total


@pytest.fixture
def recorded() -> Iterator[tuple[Telemetry, InMemoryMetricReader]]:
    """Telemetry whose metrics land in memory."""
    memory = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[memory])
    yield Telemetry(trace.NoOpTracerProvider(), provider), memory
    provider.shutdown()


async def test_a_server_records_runs_tools_hooks_rpcs_and_commits(
    database_url: str, recorded: tuple[Telemetry, InMemoryMetricReader]
) -> None:
    telemetry, reader = recorded
    agents = AgentRegistry(
        [
            Agent(
                name=DEFAULT_AGENT,
                model=ScriptedModel(script, model_id="weather-model"),
                tools=[weather],
                lifecycle=Guard(),
            )
        ]
    )
    async with serve_in_process(database_url, agents=agents, telemetry=telemetry) as srv:
        thread_id = await new_thread(srv)
        ok = await send(srv, thread_id, "weather in Paris?")
        assert (await wait_run(srv, ok.run_id)).status == runs_pb2.RUN_STATUS_COMPLETED
        await collect(srv, ok.run_id)
        boom = await send(srv, thread_id, "weather in Boom?")
        assert (await wait_run(srv, boom.run_id)).status == runs_pb2.RUN_STATUS_FAILED

    agent = {"agent": DEFAULT_AGENT}
    assert value(reader, "pai.runs.started", **agent) == 2
    assert value(reader, "pai.runs.finished", status="completed", reason="", **agent) == 1
    assert value(reader, "pai.runs.finished", status="failed", reason="HOOK_FAILED") == 1
    assert value(reader, "pai.run.queue", **agent) == 2
    assert value(reader, "pai.time_to_first_chunk", **agent) == 2
    assert value(reader, "pai.run.duration", **agent) == 2
    assert value(reader, "pai.model.tokens", model="weather-model", direction="output") > 0
    assert value(reader, "pai.tool.calls", tool="weather", outcome="ok") == 1
    assert value(reader, "pai.hook.duration", plugin="guard", phase="before_tool_call") == 2
    assert value(reader, "pai.hook.failures", plugin="guard", reason="HOOK_FAILED") == 1
    assert value(reader, "pai.storage.commit", backend=srv.store.dialect) > 0
    assert value(reader, "pai.active_runs") == 0
    assert value(reader, "pai.active_streams") == 0
    assert value(reader, "pai.lease.recoveries") == 0
    send_ok = {"rpc.method": "Send", "rpc.grpc.status_code": 0}
    assert value(reader, "rpc.server.duration", **send_ok) == 2
    stream = {"rpc.method": "StreamRun", "rpc.service": "pai.v1.RunService"}
    assert value(reader, "rpc.server.duration", **stream) == 1
    for p in points(reader, "pai.runs.finished") + points(reader, "pai.tool.calls"):
        # Bounded labels only: never a run or thread id.
        assert not any(str(v).startswith(("run_", "thr_")) for v in p.attributes.values())


def test_prometheus_names_and_second_buckets() -> None:
    registry = prometheus_client.CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    try:
        m = metrics_for(Telemetry(trace.NoOpTracerProvider(), provider))
        assert metrics_for(Telemetry(trace.NoOpTracerProvider(), provider)) is m
        touch_every_instrument(m)
        exposition = prometheus_client.generate_latest(registry).decode()
    finally:
        provider.shutdown()
    families = {line.split()[2] for line in exposition.splitlines() if line.startswith("# TYPE ")}
    assert families >= PROMETHEUS_NAMES, PROMETHEUS_NAMES - families
    assert {f for f in families if f.startswith(("pai_", "rpc_"))} == PROMETHEUS_NAMES
    # Seconds, not the SDK's default 0..10000 buckets.
    assert 'pai_run_queue_seconds_bucket{agent="a",' in exposition
    assert 'le="0.005"' in exposition
    assert "rpc_server_duration_seconds_bucket{" in exposition


def touch_every_instrument(m: Metrics) -> None:
    m.runs_started.add(1, {"agent": "a"})
    m.runs_finished.add(1, {"agent": "a", "status": "completed", "reason": ""})
    m.run_queue.record(0.01, {"agent": "a"})
    m.time_to_first_chunk.record(0.2, {"agent": "a"})
    m.run_duration.record(1.5, {"agent": "a"})
    m.model_tokens.add(3, {"model": "x", "direction": "input"})
    m.tool_calls.add(1, {"tool": "t", "outcome": "ok"})
    m.hook_duration.record(0.001, {"plugin": "p", "phase": "after_step"})
    m.hook_failures.add(1, {"plugin": "p", "phase": "after_step", "reason": "HOOK_TIMEOUT"})
    m.lease_recoveries.add(1)
    m.active_runs.add(1)
    m.active_streams.add(1)
    m.storage_observer("sqlite")(0.002, True)
    m.retention_removed.add(10, {"kind": "events"})
    m.rpc_server_duration.record(0.003, {"rpc.method": "Send", "rpc.grpc.status_code": 0})


def test_free_text_reasons_are_not_label_values() -> None:
    assert bounded_reason("MAX_STEPS") == "MAX_STEPS"
    assert bounded_reason(None) == ""
    assert bounded_reason("cancelled") == "cancelled"
    assert bounded_reason("the user said stop, 4111-1111") == "other"


def test_the_grafana_dashboard_queries_only_exported_metrics() -> None:
    dashboard = json.loads((Path(__file__).parent.parent / "deploy/grafana/pai.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs
    used: set[str] = set()
    for expr in exprs:
        # Label names (in `by (...)` and `{...}` matchers) are not metric names.
        bare = re.sub(r"\b(by|without)\s*\([^)]*\)|\{[^}]*\}", "", expr)
        found = re.findall(r"\b(?:pai|rpc)_\w+", bare)
        names = {re.sub(r"_(bucket|sum|count)$", "", n) for n in found}
        assert names, expr
        assert names <= PROMETHEUS_NAMES, (expr, names - PROMETHEUS_NAMES)
        used |= names
    for shown in (
        "pai_run_queue_seconds",
        "pai_time_to_first_chunk_seconds",
        "pai_model_tokens_total",
        "pai_hook_duration_seconds",
        "pai_runs_finished_total",
    ):
        assert shown in used


async def test_a_run_handed_back_and_claimed_again_is_a_recovery(
    sqlite_url: str, recorded: tuple[Telemetry, InMemoryMetricReader]
) -> None:
    telemetry, reader = recorded
    slow = ScriptedModel(["slow " * 50], chunk_delay=0.2)
    async with serve_in_process(sqlite_url, model=slow) as first:
        thread_id = await new_thread(first)
        run_id = (await send(first, thread_id, "go")).run_id
        for _ in range(500):  # until the runner holds it
            held = await first.store.get_run("default", run_id)
            if held is not None and held.lease_owner:
                break
            await asyncio.sleep(0.01)
        await first.app.stop(grace=0.1)  # handed back unfinished
    fast = ScriptedModel(["done"])
    async with serve_in_process(sqlite_url, model=fast, telemetry=telemetry) as second:
        assert (await wait_run(second, run_id)).status == runs_pb2.RUN_STATUS_COMPLETED
    assert value(reader, "pai.lease.recoveries") == 1
    assert value(reader, "pai.runs.started") == 0  # its first execution was elsewhere
    assert value(reader, "pai.runs.finished", status="completed") == 1
    assert value(reader, "pai.active_runs") == 0


def test_a_count_is_one_cumulative_series_per_label_set() -> None:
    """Counts export as the SDK's counters do: monotonic, cumulative, one point per label set."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        m = metrics_for(Telemetry(trace.NoOpTracerProvider(), provider))
        m.runs_finished.add(1, {"agent": "a", "status": "completed", "reason": ""})
        # The same labels in another order are the same series.
        m.runs_finished.add(2, {"reason": "", "status": "completed", "agent": "a"})
        m.runs_finished.add(1, {"agent": "a", "status": "failed", "reason": "MAX_STEPS"})
        m.lease_recoveries.add(1)
        first = points(reader, "pai.runs.finished")
        m.runs_finished.add(1, {"agent": "a", "status": "completed", "reason": ""})
        second = points(reader, "pai.runs.finished")
        metric = next(
            mt
            for rm in reader.get_metrics_data().resource_metrics  # type: ignore[union-attr]
            for sm in rm.scope_metrics
            for mt in sm.metrics
            if mt.name == "pai.runs.finished"
        )
    finally:
        provider.shutdown()
    assert isinstance(metric.data, Sum)
    assert metric.data.is_monotonic
    assert sorted((dict(p.attributes)["status"], p.value) for p in first) == [
        ("completed", 3),
        ("failed", 1),
    ]
    # Cumulative: the next collection carries the running total.
    assert sorted((dict(p.attributes)["status"], p.value) for p in second) == [
        ("completed", 4),
        ("failed", 1),
    ]
