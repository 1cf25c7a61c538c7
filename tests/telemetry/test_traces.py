"""Traces: one trace per run, from the caller's traceparent through RPC, execution,
steps, model calls, tool calls and hooks; remote plugins and tool servers join it;
a recovered execution shows the recovery."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

from pai.v1 import run_service_pb2, run_service_pb2_grpc, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc._config_telemetry import TelemetryTable
from pai_grpc.config import ConfigError
from pai_grpc.domain import Usage, new_id
from pai_grpc.errors import FailedPrecondition
from pai_grpc.lifecycle import (
    AfterStepInput,
    AgentLifecycle,
    PrepareModelStepInput,
    compose_lifecycle,
)
from pai_grpc.models import ScriptedModel, text_step, tool_call_step
from pai_grpc.plugin_sdk import serve_plugin
from pai_grpc.plugins import HookHost, PluginConfig, RemoteLifecycle
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.telemetry import Telemetry, tracer_provider_from_settings
from pai_grpc.testing import InProcessServer, serve_in_process
from pai_grpc.tools import Tool, ToolContext, tool
from pai_grpc.toolservice import RemoteToolServer, serve_tools
from tests.processes import Processes
from tests.runtime.support import new_thread, text, wait_run
from tests.runtime.test_resume_after_crash import _ready

#: The caller's trace and span (as a client with its own tracing would send them).
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


def traced() -> tuple[Telemetry, InMemorySpanExporter]:
    """Telemetry recording every span into memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry(provider, metrics.NoOpMeterProvider()), exporter


def hex_id(value: int, width: int = 16) -> str:
    return f"{value:0{width}x}"


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = named(spans, name)
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


class City(BaseModel):
    city: str


@tool(description="Weather")
async def weather(value: City, ctx: ToolContext) -> dict[str, Any]:
    # The tool runs inside its execute_tool span.
    assert trace.get_current_span().is_recording()
    return {"celsius": 21}


class Tagger(AgentLifecycle):
    """An in-process hook."""

    name = "tagger"

    async def after_step(self, input: AfterStepInput) -> None:
        return None


class Remote(AgentLifecycle):
    """A hook served by the plugin SDK; it records a span of its own."""

    name = "remote-guard"

    def __init__(self, provider: TracerProvider) -> None:
        self._tracer = provider.get_tracer("plugin")

    async def prepare_model_step(self, input: PrepareModelStepInput) -> None:
        with self._tracer.start_as_current_span("plugin work"):
            return None


def weather_model(provider: str = "anthropic") -> ScriptedModel:
    return ScriptedModel(
        [
            tool_call_step(("call-1", "weather", {"city": "Paris"})),
            text_step("21 degrees", usage=Usage(input_tokens=17, output_tokens=4)),
        ],
        provider=provider,
        model_id="claude-test",
    )


@contextlib.asynccontextmanager
async def serving(
    database_url: str,
    telemetry: Telemetry,
    parts: Sequence[AgentLifecycle],
    tools: Sequence[Tool] = (weather,),
    model: ScriptedModel | None = None,
) -> AsyncIterator[InProcessServer]:
    agent = Agent(
        name=DEFAULT_AGENT,
        model=model or weather_model(),
        tools=list(tools),
        lifecycle=compose_lifecycle(*parts) if parts else None,
    )
    async with serve_in_process(
        database_url, agents=AgentRegistry([agent]), telemetry=telemetry
    ) as srv:
        yield srv


async def send_traced(srv: InProcessServer, message: str = "weather in Paris?") -> str:
    thread_id = await new_thread(srv)
    response = await srv.threads.Send(
        tpb.SendRequest(thread_id=thread_id, parts=[text(message)]),
        metadata=(("traceparent", TRACEPARENT),),
    )
    return str(response.run.run_id)


async def test_a_run_is_one_trace_from_the_callers_traceparent(database_url: str) -> None:
    telemetry, exporter = traced()
    plugin_exporter = InMemorySpanExporter()
    plugin_provider = TracerProvider()
    plugin_provider.add_span_processor(SimpleSpanProcessor(plugin_exporter))
    plugin = await serve_plugin(Remote(plugin_provider), tracer_provider=plugin_provider)
    host = HookHost(telemetry=telemetry)
    adapter = RemoteLifecycle(
        PluginConfig(address=plugin.address, timeout=15.0), host, telemetry=telemetry
    )
    await adapter.connect()
    try:
        async with serving(database_url, telemetry, [Tagger(), adapter]) as srv:
            run_id = await send_traced(srv)
            run = await wait_run(srv, run_id)
            assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    finally:
        await adapter.close()
        await plugin.stop(0.5)
        await host.close()
    spans = exporter.get_finished_spans()
    trace_id = int(TRACE_ID, 16)
    # Everything of the run is in the caller's trace (health checks and Describe aside).
    in_trace = [s for s in spans if s.context.trace_id == trace_id]

    send = one(in_trace, "/pai.v1.ThreadService/Send")
    assert send.kind == trace.SpanKind.SERVER
    assert parent_of(send) == int(CALLER_SPAN, 16)

    execution = one(in_trace, f"run {DEFAULT_AGENT}")
    assert parent_of(execution) == send.context.span_id, "the run continues the accepting RPC"
    attributes = dict(execution.attributes or {})
    assert attributes["pai.run.id"] == run_id
    assert attributes["pai.agent"] == DEFAULT_AGENT
    assert attributes["pai.run.attempt"] == 1
    assert attributes["pai.run.status"] == "completed"
    assert attributes["pai.thread.id"]
    assert not execution.events, "a first execution recovers nothing"

    steps = named(in_trace, "pai.step")
    assert [dict(s.attributes or {})["pai.step.index"] for s in steps] == [0, 1]
    assert {parent_of(s) for s in steps} == {execution.context.span_id}
    step_ids = {s.context.span_id for s in steps}

    chats = sorted(named(in_trace, "chat claude-test"), key=lambda s: s.start_time or 0)
    assert len(chats) == 2
    assert {parent_of(c) for c in chats} == step_ids
    last = dict(chats[1].attributes or {})
    assert last["gen_ai.system"] == "anthropic"
    assert last["gen_ai.operation.name"] == "chat"
    assert last["gen_ai.request.model"] == "claude-test"
    assert last["gen_ai.usage.input_tokens"] == 17
    assert last["gen_ai.usage.output_tokens"] == 4
    assert last["gen_ai.response.finish_reasons"] == ("stop",)
    assert dict(chats[0].attributes or {})["gen_ai.response.finish_reasons"] == ("tool-calls",)

    tool_span = one(in_trace, "execute_tool weather")
    assert parent_of(tool_span) == steps[0].context.span_id
    tool_attributes = dict(tool_span.attributes or {})
    assert tool_attributes["gen_ai.tool.name"] == "weather"
    assert tool_attributes["gen_ai.tool.call.id"] == "call-1"
    assert tool_attributes["pai.tool.outcome"] == "success"

    after = named(in_trace, "pai.hook after_step")
    assert len(after) == 2
    assert {parent_of(h) for h in after} == step_ids
    assert dict(after[0].attributes or {})["pai.hook.name"] == "tagger"
    assert dict(after[0].attributes or {})["pai.hook.outcome"] == "ok"

    # The remote hook: hook span -> client span -> the plugin's server span -> its own span.
    remote_hooks = named(in_trace, "pai.hook prepare_model_step")
    assert len(remote_hooks) == 2
    assert dict(remote_hooks[0].attributes or {})["pai.hook.name"] == "remote-guard"
    clients = named(in_trace, "/pai.v1.LifecyclePluginService/PrepareModelStep")
    assert len(clients) == 2
    assert all(c.kind == trace.SpanKind.CLIENT for c in clients)
    assert {parent_of(c) for c in clients} == {h.context.span_id for h in remote_hooks}
    plugin_spans = plugin_exporter.get_finished_spans()
    served = named(plugin_spans, "/pai.v1.LifecyclePluginService/PrepareModelStep")
    assert len(served) == 2
    assert {s.context.trace_id for s in served} == {trace_id}, "the plugin joins the run's trace"
    assert {parent_of(s) for s in served} == {c.context.span_id for c in clients}
    work = named(plugin_spans, "plugin work")
    assert {parent_of(w) for w in work} == {s.context.span_id for s in served}
    # Health checks get no span.
    assert not [s for s in spans if "Health" in s.name]


async def test_a_remote_tool_server_continues_the_run_trace(sqlite_url: str) -> None:
    telemetry, exporter = traced()
    tool_telemetry, tool_exporter = traced()
    server, port = await serve_tools([weather], telemetry=tool_telemetry)
    remote = RemoteToolServer("weather", f"127.0.0.1:{port}", telemetry=telemetry)
    try:
        tools = await remote.connect()
        async with serving(sqlite_url, telemetry, [], tools=tools) as srv:
            run = await wait_run(srv, await send_traced(srv))
            assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    finally:
        await remote.close()
        await server.stop(0.5)
    tool_span = one(exporter.get_finished_spans(), "execute_tool weather")
    client = one(exporter.get_finished_spans(), "/pai.v1.ToolService/ExecuteTool")
    assert parent_of(client) == tool_span.context.span_id
    served = one(tool_exporter.get_finished_spans(), "/pai.v1.ToolService/ExecuteTool")
    assert served.context.trace_id == int(TRACE_ID, 16)
    assert parent_of(served) == client.context.span_id


async def test_failures_are_on_their_spans(sqlite_url: str) -> None:
    @tool(description="Broken")
    async def broken(value: City, ctx: ToolContext) -> dict[str, Any]:
        raise RuntimeError("no forecast today")

    class Refuser(AgentLifecycle):
        name = "refuser"

        async def after_step(self, input: AfterStepInput) -> None:
            if input.step.index == 1:
                raise FailedPrecondition("refused", reason="REFUSED")

    model = ScriptedModel(
        [tool_call_step(("call-1", "broken", {"city": "Paris"})), "sorry"], model_id="m"
    )
    telemetry, exporter = traced()
    async with serving(sqlite_url, telemetry, [Refuser()], tools=[broken], model=model) as srv:
        run = await wait_run(srv, await send_traced(srv))
        assert run.status == runs_pb2.RUN_STATUS_FAILED
    spans = exporter.get_finished_spans()
    failed_tool = dict(one(spans, "execute_tool broken").attributes or {})
    assert failed_tool["pai.tool.outcome"] == "error"
    hooks = named(spans, "pai.hook after_step")
    assert [dict(h.attributes or {})["pai.hook.outcome"] for h in hooks] == ["ok", "error"]
    assert dict(hooks[1].attributes or {})["pai.hook.failure_reason"] == "REFUSED"
    assert hooks[1].status.status_code == trace.StatusCode.ERROR
    execution = one(spans, f"run {DEFAULT_AGENT}")
    assert dict(execution.attributes or {})["pai.run.status"] == "failed"
    assert execution.status.status_code == trace.StatusCode.ERROR


async def test_an_untraced_app_stores_no_trace_context(sqlite_url: str) -> None:
    async with serving(sqlite_url, Telemetry.noop(), []) as srv:
        run_id = await send_traced(srv)
        await wait_run(srv, run_id)
        record = await srv.store.get_run("default", run_id)
    assert record is not None
    assert record.trace_context is None


async def test_the_run_keeps_the_accepting_calls_trace_context(sqlite_url: str) -> None:
    telemetry, exporter = traced()
    async with serving(sqlite_url, telemetry, []) as srv:
        run_id = await send_traced(srv)
        await wait_run(srv, run_id)
        record = await srv.store.get_run("default", run_id)
    send = one(exporter.get_finished_spans(), "/pai.v1.ThreadService/Send")
    assert record is not None
    assert record.trace_context == f"00-{TRACE_ID}-{hex_id(send.context.span_id)}-01"


async def test_a_caller_without_traceparent_starts_the_trace_at_the_rpc(sqlite_url: str) -> None:
    telemetry, exporter = traced()
    async with serving(sqlite_url, telemetry, []) as srv:
        thread_id = await new_thread(srv)
        response = await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("hi")]))
        await wait_run(srv, response.run.run_id)
    spans = exporter.get_finished_spans()
    send = one(spans, "/pai.v1.ThreadService/Send")
    assert send.parent is None
    execution = one(spans, f"run {DEFAULT_AGENT}")
    assert execution.context.trace_id == send.context.trace_id
    assert parent_of(execution) == send.context.span_id


async def test_an_rpc_error_is_on_the_server_span(sqlite_url: str) -> None:
    telemetry, exporter = traced()
    async with serving(sqlite_url, telemetry, []) as srv:
        with pytest.raises(grpc.aio.AioRpcError):
            await srv.threads.Send(
                tpb.SendRequest(thread_id=new_id("thr"), parts=[text("hi")]),
                metadata=(("traceparent", TRACEPARENT),),
            )
    send = one(exporter.get_finished_spans(), "/pai.v1.ThreadService/Send")
    not_found = grpc.StatusCode.NOT_FOUND.value[0]
    attributes = dict(send.attributes or {})
    assert attributes["rpc.grpc.status_code"] == not_found
    assert attributes["rpc.service"] == "pai.v1.ThreadService"
    assert attributes["rpc.method"] == "Send"
    assert attributes["network.peer.address"] == "127.0.0.1"
    # NOT_FOUND is the caller's mistake, not the server's: the span is no error
    # (OpenTelemetry's gRPC conventions for server spans).
    assert send.status.status_code == trace.StatusCode.UNSET


def _spans_in(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _executions(spans: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    return [
        s
        for s in spans
        if s["name"] == f"run {DEFAULT_AGENT}" and s["attributes"].get("pai.run.id") == run_id
    ]


@pytest.mark.slow
async def test_a_run_recovered_after_kill_9_shows_the_recovery(
    sqlite_url: str, tmp_path: Path
) -> None:
    traces = tmp_path / "traces.jsonl"
    server = Processes(tmp_path, sqlite_url, chunk_delay=0.01, lease_seconds=1.0)
    with server.config.open("a") as config:
        config.write(f'\n[telemetry]\ntraces_exporter = "jsonl"\ntraces_file = "{traces}"\n')
    try:
        server.migrate()
        first = server.serve(name="server-a")
        async with grpc.aio.insecure_channel(server.address) as channel:
            threads = tgrpc.ThreadServiceStub(channel)
            runs = run_service_pb2_grpc.RunServiceStub(channel)
            await _ready(threads, server, "server-a")
            thread_id = (await threads.CreateThread(tpb.CreateThreadRequest())).thread.id
            long_text = " ".join(f"w{i}" for i in range(120))
            run_id = (
                await threads.Send(
                    tpb.SendRequest(thread_id=thread_id, parts=[text(long_text)]),
                    metadata=(("traceparent", TRACEPARENT),),
                )
            ).run.run_id
            deltas = 0
            async for response in runs.StreamRun(
                run_service_pb2.StreamRunRequest(run_id=run_id), timeout=30
            ):
                if response.event.chunk.WhichOneof("chunk") == "text_delta":
                    deltas += 1
                if deltas >= 5:
                    break
            first.send_signal(signal.SIGKILL)  # mid-step: its execution span never ends
            first.wait()
        assert not _executions(_spans_in(traces), run_id), "the killed execution ended no span"

        server.serve(name="server-b")
        async with grpc.aio.insecure_channel(server.address) as channel:
            threads = tgrpc.ThreadServiceStub(channel)
            runs = run_service_pb2_grpc.RunServiceStub(channel)
            await _ready(threads, server, "server-b")
            deadline = time.monotonic() + 60
            while True:
                run = (await runs.GetRun(run_service_pb2.GetRunRequest(run_id=run_id))).run
                if run.status == runs_pb2.RUN_STATUS_COMPLETED:
                    break
                assert time.monotonic() < deadline, server.log("server-b")
                await asyncio.sleep(0.1)
    finally:
        server.stop_all()

    spans = _spans_in(traces)
    send = [s for s in spans if s["name"] == "/pai.v1.ThreadService/Send"]
    assert len(send) == 1, [s["name"] for s in spans]
    send_id = send[0]["context"]["span_id"]
    assert send[0]["context"]["trace_id"] == f"0x{TRACE_ID}"
    [recovered] = _executions(spans, run_id)  # the second attempt; the first never ended
    assert recovered["context"]["trace_id"] == f"0x{TRACE_ID}"
    assert recovered["parent_id"] == send_id, "the recovered execution continues the run's trace"
    assert recovered["attributes"]["pai.run.attempt"] == 2
    assert recovered["attributes"]["pai.run.status"] == "completed"
    [event] = [e for e in recovered["events"] if e["name"] == "pai.run.recovered"]
    assert event["attributes"]["pai.run.previous_attempt"] == 1
    assert [link["context"]["span_id"] for link in recovered["links"]] == [send_id]
    assert recovered["resource"]["attributes"]["service.name"] == "pai-grpc"


async def test_a_hook_failing_open_is_marked_on_its_span(sqlite_url: str) -> None:
    class Slow(AgentLifecycle):
        name = "slow"

        async def prepare_model_step(self, input: PrepareModelStepInput) -> None:
            await asyncio.sleep(2)

    telemetry, exporter = traced()
    plugin = await serve_plugin(Slow())
    host = HookHost(telemetry=telemetry)
    adapter = RemoteLifecycle(
        PluginConfig(address=plugin.address, timeout=0.1, failure_mode="open"),
        host,
        telemetry=telemetry,
    )
    await adapter.connect()
    try:
        async with serving(sqlite_url, telemetry, [adapter], model=ScriptedModel(["hi"])) as srv:
            run = await wait_run(srv, await send_traced(srv))
            assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    finally:
        await adapter.close()
        await plugin.stop(0)
        await host.close()
    hook = one(exporter.get_finished_spans(), "pai.hook prepare_model_step")
    attributes = dict(hook.attributes or {})
    assert attributes["pai.hook.name"] == "slow"
    assert attributes["pai.hook.outcome"] == "failed_open"
    assert attributes["pai.hook.failure_reason"] == "HOOK_TIMEOUT"


def test_the_tracer_provider_follows_the_table_then_otel_variables() -> None:
    assert tracer_provider_from_settings(TelemetryTable(), env={}) is None
    from_env = tracer_provider_from_settings(
        TelemetryTable(),
        env={
            "OTEL_TRACES_EXPORTER": "console",
            "OTEL_SERVICE_NAME": "from-env",
            "OTEL_TRACES_SAMPLER": "traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.25",
        },
    )
    assert from_env is not None
    assert from_env.resource.attributes["service.name"] == "from-env"
    assert from_env.sampler.get_description() == "TraceIdRatioBased{0.25}"
    # A key the file sets wins over its variable.
    table = TelemetryTable(traces_exporter="none", service_name="from-file")
    assert tracer_provider_from_settings(table, env={"OTEL_TRACES_EXPORTER": "console"}) is None
    from_file = tracer_provider_from_settings(
        TelemetryTable(traces_exporter="console", service_name="from-file"),
        env={"OTEL_SERVICE_NAME": "from-env"},
    )
    assert from_file is not None
    assert from_file.resource.attributes["service.name"] == "from-file"
    assert "ParentBased" in from_file.sampler.get_description()
    with pytest.raises(ConfigError, match="traces_exporter"):
        tracer_provider_from_settings(TelemetryTable(), env={"OTEL_TRACES_EXPORTER": "zipkin"})
    for provider in (from_env, from_file):
        provider.shutdown()


async def test_spans_reach_an_otlp_collector(sqlite_url: str) -> None:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    received: list[Any] = []

    class Collector(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
        async def Export(self, request: Any, context: Any) -> Any:
            received.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    collector = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Collector(), collector)
    port = collector.add_insecure_port("127.0.0.1:0")
    await collector.start()
    provider = tracer_provider_from_settings(
        TelemetryTable(traces_exporter="otlp", otlp_endpoint=f"http://127.0.0.1:{port}"), env={}
    )
    assert provider is not None
    try:
        async with serving(sqlite_url, Telemetry(provider, metrics.NoOpMeterProvider()), []) as srv:
            await wait_run(srv, await send_traced(srv))
        # The exporter is synchronous (a batch thread): flush it off the event loop.
        assert await asyncio.to_thread(provider.force_flush)
    finally:
        await asyncio.to_thread(provider.shutdown)
        await collector.stop(0)
    names = {
        span.name
        for request in received
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    }
    assert {"/pai.v1.ThreadService/Send", f"run {DEFAULT_AGENT}", "pai.step"} <= names
    service = {
        attribute.value.string_value
        for request in received
        for resource in request.resource_spans
        for attribute in resource.resource.attributes
        if attribute.key == "service.name"
    }
    assert service == {"pai-grpc"}


def test_a_stored_traceparent_is_read_as_the_w3c_propagator_reads_it() -> None:
    """The direct parse of the runtime's own traceparent agrees with the propagator."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from pai_grpc.telemetry._tracing import _stored_context

    propagator = TraceContextTextMapPropagator()
    for value in (
        f"00-{TRACE_ID}-00f067aa0ba902b7-01",
        f"00-{TRACE_ID}-00f067aa0ba902b7-00",
        f"00-{'0' * 32}-00f067aa0ba902b7-01",  # an invalid trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",  # an invalid span id
        f"00-{TRACE_ID.upper()}-00f067aa0ba902b7-01",  # W3C ids are lower case
        f"00-{TRACE_ID}-00f067aa0ba902b7",  # no flags
        f"01-{TRACE_ID}-00f067aa0ba902b7-01-extra",  # a later version may add fields
        "not a traceparent",
    ):
        expected = trace.get_current_span(
            propagator.extract({"traceparent": value})
        ).get_span_context()
        got = _stored_context(value)
        if not expected.is_valid:
            assert got is None, value
            continue
        assert got == expected, value
        assert got is not None
        assert got.is_remote
        assert got.trace_flags == expected.trace_flags
