"""The opt-in context prefetch of remote resolve_model_context hooks, and its unary call.

A plugin declaring ``prefetch_model_context`` in Describe receives next()'s
result with the stream's ``start``, so its first next() needs no round trip;
one declaring ``unary_model_context`` too (the Python SDK declares both) is
called with ResolveModelContextUnary, one unary round trip, and asks any
other next() of the runtime's hook host. Every test runs a real run over the
gRPC API (or speaks the raw protocol to one side) with transparent proxies
between runtime and plugin, and between plugin and hook host, that record
the messages each side sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import grpc
import pytest

from pai.v1 import hook_host_service_pb2 as host_pb
from pai.v1 import hook_host_service_pb2_grpc as host_grpc
from pai.v1 import lifecycle_pb2, model_pb2, run_service_pb2, runs_pb2
from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai.v1 import lifecycle_plugin_service_pb2_grpc as pb_grpc
from pai_grpc._wire import error_info
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
#: One ResolveModelContextUnary call with the prefetched context, and its reply.
ONE_UNARY_CALL = ["runtime:unary+downstream", "plugin:result"]


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


class Forward(grpc.GenericRpcHandler):
    """Passes every unary call through to ``channel`` as bytes (status and details included)."""

    def __init__(self, channel: grpc.aio.Channel | None = None) -> None:
        self.channel = channel

    def seen(self, method: str, request: bytes) -> None:
        """Called with each request before it is forwarded."""

    def service(self, details: Any) -> Any:
        method = details.method

        async def forward(request: bytes, context: Any) -> bytes:
            self.seen(method, request)
            assert self.channel is not None
            try:
                reply: bytes = await self.channel.unary_unary(method)(request)
            except grpc.aio.AioRpcError as e:
                await context.abort(e.code(), e.details() or "", tuple(e.trailing_metadata() or ()))
            return reply

        # No (de)serializers: the call passes through as bytes.
        return grpc.unary_unary_rpc_method_handler(forward)


class HostTap(Forward):
    """A transparent proxy in front of the hook host: records the ResolveModelContextNext calls."""

    def __init__(self) -> None:
        super().__init__()
        #: ``next`` or ``next(base)``, one per call, in order.
        self.calls: list[str] = []
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((self,))

    def seen(self, method: str, request: bytes) -> None:
        """Record a ResolveModelContextNext call."""
        if method.endswith("/ResolveModelContextNext"):
            asked = host_pb.ResolveModelContextNextRequest.FromString(request)
            self.calls.append("next(base)" if asked.HasField("base") else "next")

    async def start(self) -> str:
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return f"127.0.0.1:{port}"

    async def stop(self) -> None:
        await self.server.stop(0)
        if self.channel is not None:
            await self.channel.close()


class WireTap:
    """A transparent proxy in front of a plugin: records every ResolveModelContext message."""

    def __init__(self, target: str) -> None:
        self.channel = grpc.aio.insecure_channel(target)
        #: One list per ResolveModelContext call, e.g. ``["runtime:start", "plugin:next", ...]``.
        self.calls: list[list[str]] = []
        #: The plugin's calls back to the hook host.
        self.host = HostTap()
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

        unary = self.channel.unary_unary(
            f"/{SERVICE}/ResolveModelContextUnary",
            request_serializer=pb.ResolveModelContextUnaryRequest.SerializeToString,
            response_deserializer=pb.ResolveModelContextUnaryResponse.FromString,
        )

        async def Describe(request: Any, context: Any) -> Any:
            return await describe(request)

        async def ResolveModelContextUnary(request: Any, context: Any) -> Any:
            log = [f"runtime:unary{'+downstream' if request.start.HasField('downstream') else ''}"]
            self.calls.append(log)
            try:
                reply = await unary(request)
            except grpc.aio.AioRpcError as e:
                log.append(f"plugin:{e.code().name}")
                await context.abort(e.code(), e.details() or "", tuple(e.trailing_metadata() or ()))
            log.append("plugin:result")
            return reply

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
            "ResolveModelContextUnary": grpc.unary_unary_rpc_method_handler(
                ResolveModelContextUnary,
                request_deserializer=pb.ResolveModelContextUnaryRequest.FromString,
                response_serializer=pb.ResolveModelContextUnaryResponse.SerializeToString,
            ),
        }
        self.server.add_generic_rpc_handlers(
            # Every other phase passes through untouched.
            (grpc.method_handlers_generic_handler(SERVICE, handlers), Forward(self.channel))
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
    """The runtime's adapter for the plugin at ``plugin_address``, through a WireTap.

    The plugin calls the hook host back through the tap's :class:`HostTap`
    (``tap.host``): the host advertises the host tap's address.
    """
    tap = WireTap(plugin_address)
    host_tap = tap.host
    host = HookHost(advertise=await host_tap.start())
    adapter = RemoteLifecycle(
        PluginConfig(address=await tap.start(), **{"timeout": 15.0, **config}), host
    )
    await adapter.connect()
    host_tap.channel = grpc.aio.insecure_channel(f"127.0.0.1:{host.port}")
    try:
        yield adapter, tap
    finally:
        await adapter.close()
        await host.close()
        await tap.stop()
        await host_tap.stop()


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


def outcome(run: runs_pb2.Run) -> tuple[str, str, str, list[tuple[str, str, str]]]:
    """How a run ended: status, error reason and message, hook failures."""
    return (
        runs_pb2.RunStatus.Name(run.status),
        run.error.reason,
        run.error.message,
        [(f.plugin, f.phase, f.reason) for f in run.hook_failures],
    )


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
    [(Tagger, TWO_ROUND_TRIPS), (PrefetchingTagger, ONE_UNARY_CALL)],
    ids=["declares-nothing", "prefetch"],
)
async def test_a_prefetching_plugin_resolves_the_context_in_one_round_trip(
    database_url: str, hooks: type[Tagger], wire: list[str]
) -> None:
    plugin, inner = hooks(), Inner()
    model = ScriptedModel(["ok"])
    async with served(plugin) as (adapter, tap):
        assert adapter.prefetch_model_context is hooks.prefetch_model_context
        # The SDK serves the unary call whenever it declares the prefetch.
        assert adapter.unary_model_context is hooks.prefetch_model_context
        async with serving(database_url, [adapter, inner], model) as srv:
            run = await run_once(srv, "hi")
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED
    assert texts(model.calls[0].messages) == ["hi", "inner", "tagged"]
    # next() is memoised on both sides: the inner layer ran once, both calls agree.
    assert inner.seen == [["hi"]]
    assert plugin.got == [["hi", "inner"], ["hi", "inner"]]
    assert tap.calls == [wire]
    assert tap.host.calls == []  # nothing asked of the host: one round trip in all


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
            # Once per call: the unary call does not run the hook again for next(base).
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
    # The base goes down to the runtime too (through its hook host, within the one
    # unary call): inner layers it may hold run with it (RMC-03).
    assert tap.calls == [ONE_UNARY_CALL]
    assert tap.host.calls == ["next(base)"]


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


P = TypeVar("P", bound=pb_grpc.LifecyclePluginServiceServicer)


@contextlib.asynccontextmanager
async def listening(plugin: P) -> AsyncIterator[tuple[P, str]]:
    """A raw-protocol plugin served on loopback: it and its address."""
    server = grpc.aio.server()
    pb_grpc.add_LifecyclePluginServiceServicer_to_server(plugin, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield plugin, f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


def raw(ask: pb.ContextNext) -> contextlib.AbstractAsyncContextManager[tuple[RawPrefetcher, str]]:
    return listening(RawPrefetcher(ask))


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
        outcomes[hooks.__name__] = outcome(run)
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
    assert tap.calls == [["runtime:unary+downstream"]]  # cancelled at the timeout
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


# ---- the unary call: next() through the hook host ---------------------------------


class PrefetchingRebaser(Rebaser):
    """Rebaser declaring the prefetch: the SDK serves it with the unary call."""

    prefetch_model_context = True

    def __init__(self) -> None:
        self.calls = 0

    async def resolve_model_context(self, i: ResolveModelContextInput, next: Any) -> Any:
        self.calls += 1
        await next()
        return await next([user("BASE")])


def inner_failing_on_the_base(*, delay: float = 0.0) -> tuple[AgentLifecycle, list[list[str]]]:
    """An in-process resolver that fails (after ``delay``) when its leaf is the plugin's base."""
    seen: list[list[str]] = []

    async def resolve(i: ResolveModelContextInput, nxt: Any) -> list[ModelMessage]:
        got = await nxt()
        seen.append(texts(got))
        await asyncio.sleep(delay)
        if texts(got) == ["BASE"]:
            raise RuntimeError("the inner resolver broke on the base")
        return got

    return lifecycle("inner", resolve_model_context=resolve), seen


@pytest.mark.rule("RMC-03")
@pytest.mark.rule("REM-03")
@pytest.mark.parametrize("failure_mode", ["closed", "open"])
async def test_an_inner_error_under_next_with_a_base_fails_the_run_as_on_the_stream(
    database_url: str, failure_mode: str
) -> None:
    """The runtime's own error, whatever the plugin answers and whatever its failure mode."""
    outcomes = {}
    for hooks in (Rebaser, PrefetchingRebaser):
        inner, seen = inner_failing_on_the_base()
        async with served(hooks(), failure_mode=failure_mode) as (adapter, tap):
            assert adapter.unary_model_context is hooks.prefetch_model_context
            async with serving(database_url, [adapter, inner], ScriptedModel(["ok"])) as srv:
                run = await run_once(srv, "hi")
        outcomes[hooks.__name__] = outcome(run)
        if hooks.prefetch_model_context:
            assert seen == [["hi"], ["BASE"]]
            assert tap.host.calls == ["next(base)"]
        else:
            assert seen == [["BASE"]]
    assert outcomes["PrefetchingRebaser"] == outcomes["Rebaser"]
    status, reason, message, hook_failures = outcomes["Rebaser"]
    assert (status, reason, hook_failures) == ("RUN_STATUS_FAILED", "HOOK_FAILED", [])
    assert "the inner resolver broke on the base" in message


class SlowInnerOnBase(AgentLifecycle):
    """An in-process resolver that takes ``delay`` seconds when its leaf is the plugin's base."""

    name = "slow-inner"

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.seen: list[list[str]] = []

    async def resolve_model_context(self, i: ResolveModelContextInput, next: Any) -> Any:
        got = await next()
        self.seen.append(texts(got))
        if texts(got) == ["BASE"]:
            await asyncio.sleep(self.delay)
        return [*got, system("inner")]


@pytest.mark.rule("REM-03")
async def test_the_runtimes_answer_to_next_does_not_count_toward_the_plugins_timeout(
    database_url: str,
) -> None:
    """As on the stream, where the timeout applies to each of the plugin's messages."""
    plugin, inner = PrefetchingRebaser(), SlowInnerOnBase(delay=0.8)
    model = ScriptedModel(["ok"])
    async with served(plugin, timeout=0.3) as (adapter, tap):
        async with serving(database_url, [adapter, inner], model) as srv:
            run = await run_once(srv, "hi")
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED, run.error
    assert list(run.hook_failures) == []
    assert inner.seen == [["hi"], ["BASE"]]
    assert texts(model.calls[0].messages) == ["BASE", "inner"]
    assert plugin.calls == 1
    assert tap.calls == [ONE_UNARY_CALL]


@pytest.mark.rule("REM-03")
@pytest.mark.parametrize("failure_mode", ["closed", "open"])
async def test_the_hooks_own_error_in_the_unary_call_fails_the_run(
    database_url: str, failure_mode: str
) -> None:
    class Broken(PrefetchingTagger):
        async def resolve_model_context(self, i: ResolveModelContextInput, next: Any) -> Any:
            await next()
            raise RuntimeError("the resolver broke")

    model = ScriptedModel(["ok"])
    async with served(Broken(), failure_mode=failure_mode) as (adapter, tap):
        async with serving(database_url, [adapter], model) as srv:
            run = await run_once(srv, "hi")
    # The SDK's status for a hook's error: INTERNAL with ErrorInfo HOOK_FAILED.
    assert tap.calls == [["runtime:unary+downstream", "plugin:INTERNAL"]]
    assert run.status == runs_pb2.RUN_STATUS_FAILED
    assert run.error.reason == "HOOK_FAILED"
    assert "the resolver broke" in run.error.message
    assert list(run.hook_failures) == []
    assert model.calls == []


class RawUnary(pb_grpc.LifecyclePluginServiceServicer):
    """A plugin on the raw protocol: declares the unary call only, asks next() of the host.

    ``asks``: the bases it asks for in order (None: next() without a base); it
    answers with the last reply. With ``probe``, it implements prepare_run
    too, which tries the host's next() with its own token (it belongs to no
    resolver).
    """

    def __init__(self, asks: Sequence[list[ModelMessage] | None], *, probe: bool = False) -> None:
        self.asks = asks
        self.probe = probe
        self.downstream_sent: list[bool] = []
        self.answers: list[list[str]] = []
        #: (status code, reason) of every host call refused.
        self.refused: list[tuple[grpc.StatusCode, str]] = []
        #: The HookContext of the last resolver call (its token dies with the call).
        self.context: lifecycle_pb2.HookContext | None = None

    async def Describe(self, request: Any, context: Any) -> pb.DescribeResponse:
        phases = [lifecycle_pb2.LIFECYCLE_PHASE_RESOLVE_MODEL_CONTEXT]
        if self.probe:
            phases.append(lifecycle_pb2.LIFECYCLE_PHASE_PREPARE_RUN)
        return pb.DescribeResponse(name="raw-unary", phases=phases, unary_model_context=True)

    async def ask_host(
        self, ctx: lifecycle_pb2.HookContext, base: list[ModelMessage] | None
    ) -> host_pb.ResolveModelContextNextResponse | None:
        request = host_pb.ResolveModelContextNextRequest(
            capability_token=ctx.capability_token, thread_id=ctx.thread_id
        )
        if base is not None:
            request.base.messages.extend(model_messages_to_proto(base))
        async with grpc.aio.insecure_channel(ctx.host_target) as channel:
            try:
                return await host_grpc.HookHostServiceStub(channel).ResolveModelContextNext(request)
            except grpc.aio.AioRpcError as e:
                info = error_info(e)
                self.refused.append((e.code(), info[0] if info else ""))
                return None

    async def PrepareRun(self, request: Any, context: Any) -> pb.PrepareRunResponse:
        await self.ask_host(request.context, None)
        return pb.PrepareRunResponse()

    async def ResolveModelContextUnary(
        self, request: pb.ResolveModelContextUnaryRequest, context: Any
    ) -> pb.ResolveModelContextUnaryResponse:
        self.context = request.start.context
        self.downstream_sent.append(request.start.HasField("downstream"))
        reply = None
        for base in self.asks:
            # Shielded: a host call that outlives this call's cancellation (a plugin
            # may not tie its callbacks to its call) must not keep the runtime busy.
            reply = await asyncio.shield(self.ask_host(request.start.context, base))
            assert reply is not None, self.refused
            self.answers.append(texts(model_messages_from_proto(reply.messages)))
        assert reply is not None
        return pb.ResolveModelContextUnaryResponse(messages=reply.messages)


def raw_unary(
    asks: Sequence[list[ModelMessage] | None], *, probe: bool = False
) -> contextlib.AbstractAsyncContextManager[tuple[RawUnary, str]]:
    return listening(RawUnary(asks, probe=probe))


@pytest.mark.rule("RMC-02")
@pytest.mark.rule("RMC-03")
async def test_a_unary_plugin_without_the_prefetch_asks_next_of_the_host_memoised(
    database_url: str,
) -> None:
    inner = Inner()
    model = ScriptedModel(["ok"])
    asks = [None, None, [user("BASE")]]
    async with raw_unary(asks) as (plugin, address), tapped(address) as (adapter, tap):
        assert adapter.unary_model_context
        assert not adapter.prefetch_model_context
        async with serving(database_url, [adapter, inner], model) as srv:
            run = await run_once(srv, "hi")
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED, run.error
    assert plugin.downstream_sent == [False]  # nothing prefetched for it
    assert plugin.answers == [["hi", "inner"], ["hi", "inner"], ["BASE", "inner"]]
    # next() is evaluated once (RMC-02); next(base) runs the inner layers again (RMC-03).
    assert inner.seen == [["hi"], ["BASE"]]
    assert texts(model.calls[0].messages) == ["BASE", "inner"]
    assert tap.calls == [["runtime:unary", "plugin:result"]]
    assert tap.host.calls == ["next", "next", "next(base)"]


@pytest.mark.rule("REM-02")
async def test_the_hosts_next_belongs_to_the_unary_resolver_call_alone(
    database_url: str,
) -> None:
    """Another call's token is refused; so is the resolver's once its call returned."""
    probing = raw_unary([None], probe=True)
    async with probing as (plugin, address), tapped(address) as (adapter, tap):
        async with serving(database_url, [adapter], ScriptedModel(["ok"])) as srv:
            run = await run_once(srv, "hi")
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED, run.error
        # prepare_run's own token: a live one, of a call that has no next().
        assert plugin.refused == [(grpc.StatusCode.FAILED_PRECONDITION, "NO_CONTEXT_NEXT_IN_CALL")]
        assert plugin.context is not None
        assert await plugin.ask_host(plugin.context, None) is None
    assert plugin.refused[1:] == [(grpc.StatusCode.PERMISSION_DENIED, "CAPABILITY_EXPIRED")]
    assert tap.host.calls == ["next", "next", "next"]


@pytest.mark.rule("REM-03")
async def test_inner_layers_answering_the_hosts_next_run_as_part_of_the_run(
    database_url: str,
) -> None:
    """They run in the run's context: an inner plugin failing open is recorded on the run."""
    model = ScriptedModel(["ok"])
    async with (
        raw_unary([[user("BASE")]]) as (outer, address),
        tapped(address) as (adapter, tap),
        served(SlowAfterNext(), timeout=0.3, failure_mode="open") as (inner, inner_tap),
    ):
        async with serving(database_url, [adapter, inner], model) as srv:
            run = await run_once(srv, "hi")
    assert run.status == runs_pb2.RUN_STATUS_COMPLETED, run.error
    assert tap.host.calls == ["next(base)"]
    assert inner_tap.calls == [["runtime:unary+downstream"]]  # timed out
    assert [(f.plugin, f.phase, f.reason) for f in run.hook_failures] == [
        ("slow", "resolve_model_context", "HOOK_TIMEOUT")
    ]
    assert outer.answers == [["BASE"]]
    assert texts(model.calls[0].messages) == ["BASE"]


@pytest.mark.rule("REM-03")
async def test_cancelling_the_run_stops_the_inner_layers_answering_the_hosts_next(
    database_url: str,
) -> None:
    """What the runtime evaluates for the plugin ends with the call, as on the stream.

    Even when the plugin's host call outlives its own call (RawUnary shields it).
    """
    evaluating, stopped = asyncio.Event(), asyncio.Event()

    class Stuck(AgentLifecycle):
        name = "stuck"

        async def resolve_model_context(self, i: ResolveModelContextInput, next: Any) -> Any:
            got = await next()
            if texts(got) == ["BASE"]:
                evaluating.set()
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    stopped.set()
                    raise
            return got

    async with raw_unary([[user("BASE")]]) as (outer, address), tapped(address) as (adapter, _):
        async with serving(database_url, [adapter, Stuck()], ScriptedModel(["ok"])) as srv:
            thread_id = await new_thread(srv)
            handle = await send(srv, thread_id, "hi")
            await asyncio.wait_for(evaluating.wait(), 10)
            await srv.runs.CancelRun(run_service_pb2.CancelRunRequest(run_id=handle.run_id))
            await asyncio.wait_for(stopped.wait(), 10)
            await collect(srv, handle.run_id)
            run = (await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=handle.run_id))).run
    assert run.status == runs_pb2.RUN_STATUS_CANCELLED
    assert outer.answers == []  # the plugin's next(base) never got its answer
