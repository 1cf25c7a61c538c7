"""Remote hook benchmarks: what a hook costs in process and over the wire.

Baselines measured in the same run: a bare gRPC unary round trip to the same
plugin server (Describe), and the same no-op hook called in process. Each
phase's remote no-op call is reported against both (against the bare round
trip called alternately with it, call by call); the design target is a
remote no-op hook within 1.3x of a bare unary round trip (resolve_model_context:
1.5x). resolve_model_context is measured without and with the plugin's context
prefetch (start -> next -> next_result -> result on the stream, or one
ResolveModelContextUnary call, which the SDK serves to a prefetching plugin). Streams:
a step of text deltas through a remote identity transform vs no transform,
both measured end to end through the runtime (Send -> StreamRun) and at the
adapter.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai.v1 import lifecycle_plugin_service_pb2_grpc as pb_grpc
from pai.v1 import run_service_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.bench._common import Report, Result, median_ms
from pai_grpc.domain import (
    FinishStepChunk,
    StepStreamChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    UserModelMessage,
)
from pai_grpc.lifecycle import (
    AgentLifecycle,
    BeforeToolCallInput,
    Execution,
    ModelStepRequest,
    PrepareModelStepInput,
    PrepareRunInput,
    ResolveModelContextInput,
    StepInfo,
    ToolInfo,
    TransformStepStreamInput,
    UiDataWriter,
    compose_lifecycle,
)
from pai_grpc.models import ScriptedModel
from pai_grpc.plugin_sdk import serve_plugin
from pai_grpc.plugins import HookHost, PluginConfig, RemoteLifecycle
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.tools import InitialEntry

#: Calls per latency sample set, and deltas per streamed step.
CALLS = 400
DELTAS = 5_000
#: Alternating rounds of the runtime's stream with and without the remote transform.
RUNTIME_ROUNDS = 5


class Noop(AgentLifecycle):
    """Every phase, doing nothing (a no-op hook measures pure hook overhead)."""

    name = "noop"

    async def prepare_run(self, input: Any) -> None:
        """No decision."""

    async def prepare_model_step(self, input: Any) -> None:
        """No decision."""

    async def before_tool_call(self, input: Any) -> None:
        """No decision."""

    async def resolve_model_context(self, input: Any, next: Any) -> Any:
        """The downstream context."""
        return await next()

    def transform_step_stream(self, input: TransformStepStreamInput) -> AsyncIterator[Any]:
        """Identity."""
        assert input.stream is not None
        return input.stream


class PrefetchingNoop(Noop):
    """The no-op hooks, declaring that resolve_model_context begins with next()."""

    name = "noop-prefetch"
    prefetch_model_context = True


async def _latency(fn: Callable[[], Awaitable[object]], calls: int = CALLS) -> float:
    """Median latency of sequential calls, in ms."""
    for _ in range(20):
        await fn()
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - t0)
    return median_ms(samples)


async def _paired(
    fn: Callable[[], Awaitable[object]], bare: Callable[[], Awaitable[object]], calls: int = CALLS
) -> tuple[float, float]:
    """Median latencies of ``fn`` and of ``bare``, called alternately (ms).

    A baseline measured once, before every phase, drifted by up to 40%
    between runs on a shared machine; alternating call by call, both
    medians see the same machine.
    """
    for _ in range(20):
        await fn()
        await bare()
    samples: list[float] = []
    baseline: list[float] = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await fn()
        t1 = time.perf_counter()
        await bare()
        samples.append(t1 - t0)
        baseline.append(time.perf_counter() - t1)
    return median_ms(samples), median_ms(baseline)


@dataclass
class _BenchRun:
    """The run a hook sees, without a database (its metadata clients are never called)."""

    run_id: str
    thread_id: str
    initiator: str
    started_at: None
    execution: Execution
    metadata: Any
    private_metadata: Any


def _inputs() -> dict[str, Any]:
    run = _BenchRun(
        run_id="run_bench",
        thread_id="thr_bench",
        initiator="send",
        started_at=None,
        execution=Execution(operation="send", started_at=None),
        metadata=None,
        private_metadata=None,
    )
    base: dict[str, Any] = {"run": run, "thread": None}
    request = ModelStepRequest(
        run_id="run_bench",
        thread_id="thr_bench",
        step_index=0,
        model=ScriptedModel(["x"]),
        instructions=[],
        messages=[UserModelMessage(content=[])],
        tools=[],
    )
    step = StepInfo("stp_bench", 0)
    return {
        "prepare_run": PrepareRunInput(**base, input={"message_id": "m"}),
        "prepare_model_step": PrepareModelStepInput(**base, step=step, input=request),
        "before_tool_call": BeforeToolCallInput(
            **base,
            step=step,
            tool=ToolInfo(name="weather", source="backend"),
            tool_call_id="c1",
            entry=InitialEntry(),
            input={"city": "Oslo"},
        ),
        "resolve_model_context": ResolveModelContextInput(**base, step=step, history=None),
        "request": request,
        "step": step,
        "base": base,
    }


def _deltas(n: int) -> list[StepStreamChunk]:
    return [
        TextStartChunk(id="t"),
        *(TextDeltaChunk(id="t", text="x") for _ in range(n)),
        TextEndChunk(id="t"),
        FinishStepChunk(finish_reason="stop"),
    ]


async def _replay(chunks: list[StepStreamChunk]) -> AsyncIterator[StepStreamChunk]:
    for chunk in chunks:
        yield chunk


async def _consume(
    hooks: AgentLifecycle, inputs: dict[str, Any], chunks: list[StepStreamChunk]
) -> None:
    stream = hooks.transform_step_stream(
        TransformStepStreamInput(
            **inputs["base"],
            step=inputs["step"],
            stream=_replay(chunks),
            input=inputs["request"],
            ui_data=UiDataWriter(lambda chunk: None),
        )
    )
    async for _ in stream:
        pass


async def _phases(report: Report) -> None:
    inputs = _inputs()
    local = compose_lifecycle(Noop())
    plugin = await serve_plugin(Noop())
    prefetching = await serve_plugin(PrefetchingNoop())
    host = HookHost()
    remote = RemoteLifecycle(PluginConfig(address=plugin.address, timeout=10.0), host)
    await remote.connect()
    remote_prefetch = RemoteLifecycle(PluginConfig(address=prefetching.address, timeout=10.0), host)
    await remote_prefetch.connect()
    channel = grpc.aio.insecure_channel(plugin.address)
    stub = pb_grpc.LifecyclePluginServiceStub(channel)
    try:

        def describe() -> Awaitable[object]:
            return stub.Describe(pb.DescribeRequest())  # type: ignore[no-any-return]

        bare = await _latency(describe)
        report.add(Result("hooks", "baseline: bare unary round trip (p50)", bare, "ms"))

        async def downstream(base: Any = None) -> list[Any]:
            return []

        def resolve(h: AgentLifecycle) -> Awaitable[object]:
            return h.resolve_model_context(inputs["resolve_model_context"], downstream)

        #: Row name -> the call, and the adapter it goes through remotely.
        calls: dict[str, tuple[Callable[[AgentLifecycle], Awaitable[object]], RemoteLifecycle]] = {
            "prepare_run": (lambda h: h.prepare_run(inputs["prepare_run"]), remote),
            "prepare_model_step": (
                lambda h: h.prepare_model_step(inputs["prepare_model_step"]),
                remote,
            ),
            "before_tool_call": (
                lambda h: h.before_tool_call(inputs["before_tool_call"]),
                remote,
            ),
            "resolve_model_context": (resolve, remote),
            "resolve_model_context (prefetch, unary call)": (resolve, remote_prefetch),
        }
        for phase, (call, adapter) in calls.items():

            async def in_process_call(call: Any = call) -> object:
                return await call(local)

            async def remote_call(call: Any = call, adapter: RemoteLifecycle = adapter) -> object:
                return await call(adapter)

            in_process = await _latency(in_process_call)
            over_wire, paired = await _paired(remote_call, describe)
            report.add(Result("hooks", f"{phase}: no-op in process (p50)", in_process, "ms"))
            report.add(
                Result(
                    "hooks",
                    f"{phase}: no-op remote (p50)",
                    over_wire,
                    "ms",
                    paired,
                    "bare unary",
                    note=f"bare {paired:.2f} ms, sampled alternately; "
                    f"{over_wire / max(in_process, 1e-9):.0f}x in process",
                )
            )
        chunks = _deltas(DELTAS)
        t0 = time.perf_counter()
        await _consume(local, inputs, chunks)
        local_rate = len(chunks) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        await _consume(remote, inputs, chunks)
        through = len(chunks) / (time.perf_counter() - t0)
        report.add(
            Result("hooks", "adapter: identity transform in process", local_rate, "chunks/s")
        )
        report.add(
            Result(
                "hooks",
                "adapter: identity transform remote",
                through,
                "chunks/s",
                local_rate,
                "in process",
                note="plugin in the same process: both ends' CPU counted",
            )
        )
    finally:
        await channel.close()
        await remote.close()
        await remote_prefetch.close()
        await plugin.stop(0.5)
        await prefetching.stop(0.5)
        await host.close()


async def _step_rate(srv: Any, deltas: int) -> float:
    """Chunks/s of one long step, Send -> StreamRun to terminal."""
    thread_id = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    t0 = time.perf_counter()
    handle = (
        await srv.threads.Send(
            tpb.SendRequest(
                thread_id=thread_id,
                parts=[{"text": {"text": "stream"}}],
            )
        )
    ).run
    n = 0
    async for _ in srv.runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=handle.run_id)):
        n += 1
    return n / (time.perf_counter() - t0)


async def _runtime(report: Report, workdir: Path) -> None:
    from pai_grpc.testing import serve_in_process

    # Every Send streams one step of DELTAS deltas (the last scripted step repeats).
    plugin = await serve_plugin(Noop())
    host = HookHost()
    remote = RemoteLifecycle(
        PluginConfig(
            address=plugin.address, timeout=10.0, only=frozenset({"transform_step_stream"})
        ),
        host,
    )
    await remote.connect()
    agents = AgentRegistry(
        [Agent(name=DEFAULT_AGENT, model=ScriptedModel([_deltas(DELTAS)]), lifecycle=remote)]
    )
    plain = f"sqlite:///{workdir / f'hooks-{time.time_ns()}.db'}"
    transformed = f"sqlite:///{workdir / f'hooks-remote-{time.time_ns()}.db'}"
    nones: list[float] = []
    throughs: list[float] = []
    try:
        async with (
            serve_in_process(
                plain, model=ScriptedModel([_deltas(DELTAS)]), sends_per_second=0
            ) as bare,
            serve_in_process(transformed, agents=agents, sends_per_second=0) as srv,
        ):
            # Alternating rounds, medians: one stream each drifted by up to 30%.
            for _ in range(RUNTIME_ROUNDS):
                nones.append(await _step_rate(bare, DELTAS))
                throughs.append(await _step_rate(srv, DELTAS))
    finally:
        await remote.close()
        await plugin.stop(0.5)
        await host.close()
    none, through = statistics.median(nones), statistics.median(throughs)
    report.add(Result("hooks", f"runtime: step of {DELTAS} deltas, no transform", none, "events/s"))
    report.add(
        Result(
            "hooks",
            f"runtime: step of {DELTAS} deltas, remote transform",
            through,
            "events/s",
            none,
            "no transform",
            note=f"Send -> StreamRun to terminal; medians of {RUNTIME_ROUNDS} alternating rounds",
        )
    )


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Hook overhead (storage-independent: measured once, on SQLite)."""
    if backend != "sqlite":
        return
    await _phases(report)
    await _runtime(report, workdir)


__all__ = ["run"]
