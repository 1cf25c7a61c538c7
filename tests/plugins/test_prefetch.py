"""The opt-in context prefetch of remote resolve_model_context hooks.

A plugin declaring ``prefetch_model_context`` in Describe receives next()'s
result with the stream's ``start``, so its first next() needs no round trip.
Every test runs a real run over the gRPC API (or speaks the raw protocol to
one side) with a transparent proxy between runtime and plugin that records
the ResolveModelContext messages each side sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import pytest

from pai.v1 import lifecycle_pb2, model_pb2, run_service_pb2, runs_pb2
from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai.v1 import lifecycle_plugin_service_pb2_grpc as pb_grpc
from pai_grpc.convert import (
    HookCall,
    HookRun,
    hook_context_to_proto,
    model_messages_from_proto,
    model_messages_to_proto,
)
from pai_grpc.domain import (
    ModelMessage,
    ModelTextPart,
    SystemModelMessage,
    UserModelMessage,
)
from pai_grpc.lifecycle import (
    AgentLifecycle,
    Execution,
    ResolveModelContextInput,
    StepInfo,
    compose_lifecycle,
    lifecycle,
)
from pai_grpc.models import ScriptedModel
from pai_grpc.plugin_sdk import serve_plugin
from pai_grpc.plugins import HookHost, PluginConfig, RemoteLifecycle
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import InProcessServer, serve_in_process
from tests.runtime.support import collect, new_thread, send

SERVICE = "pai.v1.LifecyclePluginService"
#: What each side sent on one ResolveModelContext stream, without and with prefetch.
TWO_ROUND_TRIPS = ["runtime:start", "plugin:next", "runtime:next_result", "plugin:result"]
ONE_ROUND_TRIP = ["runtime:start+downstream", "plugin:result"]


def texts(messages: Sequence[ModelMessage]) -> list[str]:
    out = []
    for m in messages:
        if isinstance(m, SystemModelMessage):
            out.append(m.content)
        elif isinstance(m, UserModelMessage):
            out.append("".join(p.text for p in m.content if isinstance(p, ModelTextPart)))
    return out


def system(text: str) -> SystemModelMessage:
    return SystemModelMessage(content=text)


def user(text: str) -> UserModelMessage:
    return UserModelMessage(content=[ModelTextPart(text=text)])


def label(message: Any) -> str:
    """A ResolveModelContext message as ``kind`` plus what it carries."""
    kind = message.WhichOneof("message")
    if kind == "start" and message.start.HasField("downstream"):
        return "start+downstream"
    if kind == "next" and message.next.HasField("base"):
        return "next(base)"
    return str(kind)


class WireTap:
    """A transparent proxy in front of a plugin: records every ResolveModelContext message."""

    def __init__(self, target: str) -> None:
        self.channel = grpc.aio.insecure_channel(target)
        #: One list per ResolveModelContext call, e.g. ``["runtime:start", "plugin:next", ...]``.
        self.calls: list[list[str]] = []
        self.server = grpc.aio.server()
        self.port = 0

    async def start(self) -> str:
        describe = self.channel.unary_unary(
            f"/{SERVICE}/Describe",
            request_serializer=pb.DescribeRequest.SerializeToString,
            response_deserializer=pb.DescribeResponse.FromString,
        )
        resolve = self.channel.stream_stream(
            f"/{SERVICE}/ResolveModelContext",
            request_serializer=pb.ResolveModelContextRequest.SerializeToString,
            response_deserializer=pb.ResolveModelContextResponse.FromString,
        )

        async def Describe(request: Any, context: Any) -> Any:
            return await describe(request)

        async def ResolveModelContext(requests: Any, context: Any) -> AsyncIterator[Any]:
            log: list[str] = []
            self.calls.append(log)
            upstream = resolve()

            async def forward() -> None:
                async for request in requests:
                    log.append(f"runtime:{label(request)}")
                    await upstream.write(request)
                await upstream.done_writing()

            forwarding = asyncio.create_task(forward())
            try:
                async for reply in upstream:
                    log.append(f"plugin:{label(reply)}")
                    yield reply
            finally:
                forwarding.cancel()
                upstream.cancel()

        handlers = {
            "Describe": grpc.unary_unary_rpc_method_handler(
                Describe,
                request_deserializer=pb.DescribeRequest.FromString,
                response_serializer=pb.DescribeResponse.SerializeToString,
            ),
            "ResolveModelContext": grpc.stream_stream_rpc_method_handler(
                ResolveModelContext,
                request_deserializer=pb.ResolveModelContextRequest.FromString,
                response_serializer=pb.ResolveModelContextResponse.SerializeToString,
            ),
        }
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, handlers),)
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return f"127.0.0.1:{self.port}"

    async def stop(self) -> None:
        await self.server.stop(0)
        await self.channel.close()


@contextlib.asynccontextmanager
async def tapped(
    plugin_address: str, **config: Any
) -> AsyncIterator[tuple[RemoteLifecycle, WireTap]]:
    """The runtime's adapter for the plugin at ``plugin_address``, through a WireTap."""
    tap = WireTap(plugin_address)
    host = HookHost()
    adapter = RemoteLifecycle(
        PluginConfig(address=await tap.start(), **{"timeout": 15.0, **config}), host
    )
    await adapter.connect()
    try:
        yield adapter, tap
    finally:
        await adapter.close()
        await host.close()
        await tap.stop()


@contextlib.asynccontextmanager
async def served(
    hooks: AgentLifecycle, **config: Any
) -> AsyncIterator[tuple[RemoteLifecycle, WireTap]]:
    """``hooks`` served by the Python plugin SDK, seen through a WireTap."""
    plugin = await serve_plugin(hooks)
    try:
        async with tapped(plugin.address, **config) as pair:
            yield pair
    finally:
        await plugin.stop(0.5)


@contextlib.asynccontextmanager
async def serving(
    database_url: str, parts: Sequence[AgentLifecycle], model: ScriptedModel
) -> AsyncIterator[InProcessServer]:
    agent = Agent(name=DEFAULT_AGENT, model=model, lifecycle=compose_lifecycle(*parts))
    async with serve_in_process(database_url, agents=AgentRegistry([agent])) as srv:
        yield srv


async def run_once(srv: InProcessServer, text: str) -> runs_pb2.Run:
    thread_id = await new_thread(srv)
    handle = await send(srv, thread_id, text)
    await collect(srv, handle.run_id)
    return (await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=handle.run_id))).run


class Inner(AgentLifecycle):
    """A resolver inside the remote one: records its downstream, adds ``inner``."""

    name = "inner"

    def __init__(self, *, prefetch: bool = False) -> None:
        self.prefetch_model_context = prefetch
        self.seen: list[list[str]] = []

    async def resolve_model_context(self, i: ResolveModelContextInput, next: Any) -> Any:
        got = await next()
        self.seen.append(texts(got))
        return [*got, system("inner")]


class Tagger(AgentLifecycle):
    """Calls next() twice (memoised), then appends ``tagged``."""

    name = "tagger"

    def __init__(self) -> None:
        self.got: list[list[str]] = []

    async def resolve_model_context(self, i: ResolveModelContextInput, next: Any) -> Any:
        first = await next()
        again = await next()
        self.got += [texts(first), texts(again)]
        return [*first, system("tagged")]


class PrefetchingTagger(Tagger):
    """The same hook, declaring that it always begins with next()."""

    prefetch_model_context = True


@pytest.mark.rule("REM-01")
@pytest.mark.rule("RMC-02")
@pytest.mark.parametrize(
    ("hooks", "wire"),
    [(Tagger, TWO_ROUND_TRIPS), (PrefetchingTagger, ONE_ROUND_TRIP)],
    ids=["declares-nothing", "prefetch"],
)
async def test_a_prefetching_plugin_resolves_the_context_in_one_round_trip(
    database_url: str, hooks: type[Tagger], wire: list[str]
) -> None:
    plugin, inner = hooks(), Inner()
    model = ScriptedModel(["ok"])
    async with served(plugin) as (adapter, tap):
        assert adapter.prefetch_model_context is hooks.prefetch_model_context
        async with serving(database_url, [adapter, inner], model) as srv:
            run = await run_once(srv, "hi")
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    assert texts(model.calls[0].messages) == ["hi", "inner", "tagged"]
    # next() is memoised on both sides: the inner layer ran once, both calls agree.
    assert inner.seen == [["hi"]]
    assert plugin.got == [["hi", "inner"], ["hi", "inner"]]
    assert tap.calls == [wire]


async def test_a_composition_declares_prefetch_when_every_resolver_does() -> None:
    async def describe(*parts: AgentLifecycle) -> bool:
        plugin = await serve_plugin(compose_lifecycle(*parts))
        try:
            async with grpc.aio.insecure_channel(plugin.address) as channel:
                stub = pb_grpc.LifecyclePluginServiceStub(channel)
                return (await stub.Describe(pb.DescribeRequest())).prefetch_model_context
        finally:
            await plugin.stop(0.5)

    other = lifecycle("other", prepare_run=lambda i: None)  # no resolver: no say
    assert await describe(PrefetchingTagger(), other, Inner(prefetch=True))
    assert not await describe(PrefetchingTagger(), Inner(prefetch=False))
    assert not await describe(Inner(prefetch=False), PrefetchingTagger())
    assert not await describe(Tagger())


@pytest.mark.rule("RMC-03")
async def test_next_with_a_base_after_the_prefetch_runs_the_plugins_inner_layers_with_it(
    database_url: str,
) -> None:
    plain: list[list[str]] = []

    class Rebase(AgentLifecycle):
        name = "rebase"
        prefetch_model_context = True

        async def resolve_model_context(self, i: ResolveModelContextInput, next: Any) -> Any:
            plain.append(texts(await next()))
            return await next([user("BASE")])

    inner = Inner(prefetch=True)
    model = ScriptedModel(["ok"])
    async with served(compose_lifecycle(Rebase(), inner)) as (adapter, tap):
        assert adapter.prefetch_model_context
        async with serving(database_url, [adapter], model) as srv:
            run = await run_once(srv, "durable question")
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    # The inner layer ran for the prefetched next(), then again with the replaced leaf.
    assert inner.seen == [["durable question"], ["BASE"]]
    assert plain == [["durable question", "inner"]]
    assert texts(model.calls[0].messages) == ["BASE", "inner"]
    # The base goes down to the runtime too: inner layers it may hold run with it (RMC-03).
    assert tap.calls == [
        ["runtime:start+downstream", "plugin:next(base)", "runtime:next_result", "plugin:result"]
    ]


class RawPrefetcher(pb_grpc.LifecyclePluginServiceServicer):
    """A plugin on the raw protocol: declares prefetch, yet sends ``ask`` over the wire."""

    def __init__(self, ask: pb.ContextNext) -> None:
        self.ask = ask
        self.starts: list[list[str]] = []
        self.next_results: list[list[str]] = []

    async def Describe(self, request: Any, context: Any) -> pb.DescribeResponse:
        return pb.DescribeResponse(
            name="raw-prefetcher",
            phases=[lifecycle_pb2.LIFECYCLE_PHASE_RESOLVE_MODEL_CONTEXT],
            prefetch_model_context=True,
        )

    async def ResolveModelContext(
        self, requests: AsyncIterator[pb.ResolveModelContextRequest], context: Any
    ) -> AsyncIterator[pb.ResolveModelContextResponse]:
        start = (await anext(requests)).start
        self.starts.append(texts(model_messages_from_proto(start.downstream.messages)))
        yield pb.ResolveModelContextResponse(next=self.ask)
        answer = (await anext(requests)).next_result
        self.next_results.append(texts(model_messages_from_proto(answer.messages)))
        yield pb.ResolveModelContextResponse(result=pb.ContextResult(messages=answer.messages))
        async for _ in requests:  # the stream-close rule: read until the runtime ends it
            pass


@contextlib.asynccontextmanager
async def raw(ask: pb.ContextNext) -> AsyncIterator[tuple[RawPrefetcher, str]]:
    plugin = RawPrefetcher(ask)
    server = grpc.aio.server()
    pb_grpc.add_LifecyclePluginServiceServicer_to_server(plugin, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield plugin, f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


@pytest.mark.rule("RMC-02")
async def test_a_next_asked_despite_the_prefetch_gets_the_same_messages(
    database_url: str,
) -> None:
    inner = Inner()
    model = ScriptedModel(["ok"])
    async with raw(pb.ContextNext()) as (plugin, address), tapped(address) as (adapter, tap):
        async with serving(database_url, [adapter, inner], model) as srv:
            run = await run_once(srv, "hi")
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    assert plugin.starts == plugin.next_results == [["hi", "inner"]]
    assert inner.seen == [["hi"]]  # answered from the prefetch, not by a second next()
    assert tap.calls == [
        ["runtime:start+downstream", "plugin:next", "runtime:next_result", "plugin:result"]
    ]


@pytest.mark.rule("RMC-03")
async def test_a_next_with_a_base_after_the_prefetch_runs_the_runtimes_inner_layers_with_it(
    database_url: str,
) -> None:
    inner = Inner()
    model = ScriptedModel(["ok"])
    ask = pb.ContextNext(
        base=model_pb2.ModelMessageList(messages=model_messages_to_proto([user("BASE")]))
    )
    async with raw(ask) as (plugin, address), tapped(address) as (adapter, tap):
        async with serving(database_url, [adapter, inner], model) as srv:
            run = await run_once(srv, "hi")
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    assert plugin.starts == [["hi", "inner"]]
    assert inner.seen == [["hi"], ["BASE"]]
    assert plugin.next_results == [["BASE", "inner"]]
    assert texts(model.calls[0].messages) == ["BASE", "inner"]
    assert tap.calls == [
        ["runtime:start+downstream", "plugin:next(base)", "runtime:next_result", "plugin:result"]
    ]


async def test_a_prefetching_plugin_asks_next_when_start_carries_no_downstream() -> None:
    """An older runtime never sends ``downstream``: the SDK then asks ``next`` as before."""
    plugin = await serve_plugin(PrefetchingTagger())
    run = HookRun(
        run_id="run_old",
        thread_id="thr_old",
        initiator="send",
        started_at=None,
        execution=Execution(operation="send", started_at=None),
    )
    ctx = hook_context_to_proto(HookCall(thread_id="thr_old", run=run, step=StepInfo("stp_old", 0)))
    try:
        async with grpc.aio.insecure_channel(plugin.address) as channel:
            stub = pb_grpc.LifecyclePluginServiceStub(channel)
            described = await stub.Describe(pb.DescribeRequest())
            assert described.prefetch_model_context
            call = stub.ResolveModelContext(timeout=10)
            await call.write(
                pb.ResolveModelContextRequest(start=pb.ResolveModelContextStart(context=ctx))
            )
            asked = await call.read()
            assert asked.WhichOneof("message") == "next"
            assert not asked.next.HasField("base")
            await call.write(
                pb.ResolveModelContextRequest(
                    next_result=pb.ContextNextResult(
                        messages=model_messages_to_proto([user("from the old runtime")])
                    )
                )
            )
            answer = await call.read()
            await call.done_writing()
            assert answer.WhichOneof("message") == "result"
            assert texts(model_messages_from_proto(answer.result.messages)) == [
                "from the old runtime",
                "tagged",
            ]
    finally:
        await plugin.stop(0.5)


def failing_inner() -> AgentLifecycle:
    async def resolve(i: ResolveModelContextInput, nxt: Any) -> list[ModelMessage]:
        raise RuntimeError("the inner resolver broke")

    return lifecycle("inner", resolve_model_context=resolve)


@pytest.mark.rule("REM-03")
@pytest.mark.parametrize("failure_mode", ["closed", "open"])
async def test_a_downstream_error_fails_the_run_as_without_prefetch(
    database_url: str, failure_mode: str
) -> None:
    outcomes = {}
    for hooks in (Tagger, PrefetchingTagger):
        async with served(hooks(), failure_mode=failure_mode) as (adapter, tap):
            async with serving(
                database_url, [adapter, failing_inner()], ScriptedModel(["ok"])
            ) as srv:
                run = await run_once(srv, "hi")
        outcomes[hooks.__name__] = (
            runs_pb2.RunStatus.Name(run.status),
            run.error.reason,
            run.error.message,
            [(f.plugin, f.phase, f.reason) for f in run.hook_failures],
        )
        # With prefetch, next() raised before the stream opened.
        assert tap.calls == ([] if hooks.prefetch_model_context else [TWO_ROUND_TRIPS[:2]])
    assert outcomes["PrefetchingTagger"] == outcomes["Tagger"]
    status, reason, message, hook_failures = outcomes["Tagger"]
    assert (status, reason, hook_failures) == ("RUN_STATUS_FAILED", "HOOK_FAILED", [])
    assert "the inner resolver broke" in message


class SlowAfterNext(AgentLifecycle):
    """Takes the prefetched context, then never answers in time."""

    name = "slow"
    prefetch_model_context = True

    async def resolve_model_context(self, i: ResolveModelContextInput, next: Any) -> Any:
        got = await next()
        await asyncio.sleep(5)
        return got


@pytest.mark.rule("REM-03")
@pytest.mark.parametrize("failure_mode", ["closed", "open"])
async def test_a_prefetching_plugin_keeps_its_timeout_and_failure_mode(
    database_url: str, failure_mode: str
) -> None:
    inner = Inner()
    model = ScriptedModel(["ok"])
    async with served(SlowAfterNext(), timeout=0.3, failure_mode=failure_mode) as (adapter, tap):
        async with serving(database_url, [adapter, inner], model) as srv:
            run = await run_once(srv, "hi")
    assert tap.calls == [["runtime:start+downstream"]]
    assert inner.seen == [["hi"]]  # failing open reuses the prefetched result
    if failure_mode == "closed":
        assert run.status == runs_pb2.RUN_STATUS_FAILED
        assert run.error.reason == "HOOK_TIMEOUT"
        assert model.calls == []
    else:
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert [(f.phase, f.reason) for f in run.hook_failures] == [
            ("resolve_model_context", "HOOK_TIMEOUT")
        ]
        assert texts(model.calls[0].messages) == ["hi", "inner"]


class Rebaser(AgentLifecycle):
    """Replaces the downstream leaf: next(base) with a context of its own."""

    name = "rebaser"

    async def resolve_model_context(self, i: ResolveModelContextInput, next: Any) -> Any:
        return await next([user("BASE")])


@pytest.mark.rule("RMC-03")
async def test_next_with_a_base_in_a_plugin_still_runs_the_runtimes_inner_layers(
    database_url: str,
) -> None:
    """Across the process boundary too: the base replaces the leaf, not the inner layers."""
    inner = Inner()
    model = ScriptedModel(["ok"])
    async with served(Rebaser()) as (adapter, tap):
        async with serving(database_url, [adapter, inner], model) as srv:
            run = await run_once(srv, "hi")
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    assert inner.seen == [["BASE"]]
    assert texts(model.calls[0].messages) == ["BASE", "inner"]
    assert tap.calls == [
        ["runtime:start", "plugin:next(base)", "runtime:next_result", "plugin:result"]
    ]
