"""Remote hooks through the Python plugin SDK: every phase over the wire, mixed chains
(REM-01), and capability tokens bound to thread, lease and phase (REM-02)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import pytest
from pydantic import BaseModel

from pai.v1 import admin_service_pb2 as apb
from pai.v1 import admin_service_pb2_grpc
from pai.v1 import hook_host_service_pb2 as hpb
from pai.v1 import hook_host_service_pb2_grpc as hpb_grpc
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.convert import struct_to_proto
from pai_grpc.domain import DataChunk, StepStreamChunk, SystemModelMessage, TextDeltaChunk
from pai_grpc.lifecycle import (
    AfterStepInput,
    AfterToolResultInput,
    AgentContract,
    AgentLifecycle,
    BeforeToolCallInput,
    Continue,
    HistoryRewritePatch,
    HistoryRewrittenInput,
    ModelStepPatch,
    ModelStepRequest,
    ModelStepStreamResult,
    NextStep,
    PrepareHistoryRewriteInput,
    PrepareModelStepInput,
    PrepareRunInput,
    ReplaceOutput,
    ResolveModelContextInput,
    RunPatch,
    TransformStepStreamInput,
    compose_lifecycle,
    lifecycle,
)
from pai_grpc.models import ModelCall, ScriptedModel, tool_call_step
from pai_grpc.plugin_sdk import serve_plugin
from pai_grpc.plugins import HookHost, PluginConfig, RemoteLifecycle
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import InProcessServer, serve_in_process
from pai_grpc.tools import ToolContext, tool
from tests.conftest import rich_status
from tests.runtime.support import collect, new_thread, rpc_error, send, transcript


@contextlib.asynccontextmanager
async def remote(hooks: AgentLifecycle, host: HookHost) -> AsyncIterator[RemoteLifecycle]:
    plugin = await serve_plugin(hooks)
    adapter = RemoteLifecycle(PluginConfig(address=plugin.address, timeout=15.0), host)
    await adapter.connect()
    try:
        yield adapter
    finally:
        await adapter.close()
        await plugin.stop(0.5)


@contextlib.asynccontextmanager
async def serving(
    database_url: str, parts: Sequence[AgentLifecycle], *, model: Any, **agent: Any
) -> AsyncIterator[InProcessServer]:
    async with serve_in_process(
        database_url,
        agents=AgentRegistry(
            [Agent(name=DEFAULT_AGENT, model=model, lifecycle=compose_lifecycle(*parts), **agent)]
        ),
    ) as srv:
        yield srv


class City(BaseModel):
    city: str


@tool(description="Weather")
async def weather(value: City, ctx: ToolContext) -> dict[str, Any]:
    return {"celsius": 21}


@pytest.mark.rule("REM-01")
async def test_every_phase_can_be_hosted_remotely(database_url: str) -> None:
    seen: list[str] = []

    class Everything(AgentLifecycle):
        name = "everything"

        async def prepare_run(self, i: PrepareRunInput) -> Continue:
            seen.append("prepare_run")
            await i.run.metadata.merge({"remote": True})
            return Continue(RunPatch(instructions="remote instructions"))

        async def resolve_model_context(self, i: ResolveModelContextInput, next: Any) -> Any:
            seen.append("resolve_model_context")
            assert i.history is not None
            assert i.history.through is not None
            return await next()

        async def prepare_model_step(self, i: PrepareModelStepInput) -> Continue:
            seen.append("prepare_model_step")
            return Continue(ModelStepPatch(append_model_messages=[]))

        async def around_model_call(self, request: ModelStepRequest, next: Any) -> Any:
            seen.append("around_model_call")
            result: ModelStepStreamResult = await next()
            return result

        def transform_step_stream(self, i: TransformStepStreamInput) -> AsyncIterator[Any]:
            seen.append("transform_step_stream")

            async def gen() -> AsyncIterator[StepStreamChunk]:
                assert i.stream is not None
                async for chunk in i.stream:
                    if isinstance(chunk, TextDeltaChunk):
                        chunk = chunk.model_copy(update={"text": chunk.text.upper()})
                    yield chunk
                assert i.ui_data is not None
                i.ui_data.write(DataChunk(name="stats", data={"ok": True}))

            return gen()

        async def before_tool_call(self, i: BeforeToolCallInput) -> None:
            seen.append("before_tool_call")

        async def after_tool_result(self, i: AfterToolResultInput) -> ReplaceOutput:
            seen.append("after_tool_result")
            return ReplaceOutput({"celsius": 22})

        async def after_step(self, i: AfterStepInput) -> NextStep | None:
            seen.append("after_step")
            return None

        async def prepare_history_rewrite(self, i: PrepareHistoryRewriteInput) -> Any:
            seen.append("prepare_history_rewrite")
            return HistoryRewritePatch(private_metadata={"rewritten": i.rewrite.kind})

        async def history_rewritten(self, i: HistoryRewrittenInput) -> None:
            seen.append("history_rewritten")

    def script(call: ModelCall) -> Any:
        if any(m.role == "tool" for m in call.messages):
            return "it is warm"
        return tool_call_step(("c1", "weather", {"city": "Oslo"}))

    model = ScriptedModel(script)
    host = HookHost()
    async with remote(Everything(), host) as adapter:
        assert adapter.phases() == Everything().phases()
        async with serving(
            database_url,
            [adapter],
            model=model,
            tools=[weather],
            contract=AgentContract(ui_data={"stats": {"type": "object"}}),
        ) as srv:
            thread_id = await new_thread(srv)
            handle = await send(srv, thread_id, "weather?")
            await collect(srv, handle.run_id)
            assert (await transcript(srv, thread_id))[-1] == ("assistant", "IT IS WARM")
            assert [m.content for m in model.calls[0].instructions] == ["remote instructions"]
            assert model.calls[1].messages[-1].content[0].output.value == {"celsius": 22}
            admin = admin_service_pb2_grpc.AdminServiceStub(srv.channel)
            listed = await admin.ListLifecycleMessages(
                apb.ListLifecycleMessagesRequest(thread_id=thread_id)
            )
            await admin.UpdateMessageVisibility(
                apb.UpdateMessageVisibilityRequest(
                    thread_id=thread_id, message_ids=[listed.messages[0].message.id], context=False
                )
            )
            await srv.app.runtime.services.history.idle()
            private = await admin.GetThreadPrivateMetadata(
                apb.GetThreadPrivateMetadataRequest(thread_id=thread_id)
            )
            assert dict(private.private_metadata) == {"rewritten": "visibility"}
    await host.close()
    assert set(seen) == set(Everything().phases())


@pytest.mark.rule("REM-01")
async def test_remote_and_in_process_hooks_compose_in_configured_order(database_url: str) -> None:
    def step(name: str) -> AgentLifecycle:
        def prepare_model_step(i: PrepareModelStepInput) -> Continue:
            assert i.input is not None
            stack = [*i.input.instructions, SystemModelMessage(content=name)]
            return Continue(ModelStepPatch(instructions=stack))

        def transform(i: TransformStepStreamInput) -> AsyncIterator[StepStreamChunk]:
            async def gen() -> AsyncIterator[StepStreamChunk]:
                assert i.stream is not None
                async for chunk in i.stream:
                    if isinstance(chunk, TextDeltaChunk):
                        chunk = chunk.model_copy(update={"text": f"{chunk.text}<{name}"})
                    yield chunk

            return gen()

        order: list[str] = []

        async def around(request: ModelStepRequest, next: Any) -> Any:
            order.append(name)
            return await next()

        return lifecycle(
            name, prepare_model_step=prepare_model_step, transform_step_stream=transform,
            around_model_call=around,
        )  # fmt: skip

    model = ScriptedModel(["x"])
    host = HookHost()
    async with remote(step("remote"), host) as middle:
        async with serving(
            database_url, [step("first"), middle, step("last")], model=model, instructions="agent"
        ) as srv:
            thread_id = await new_thread(srv)
            handle = await send(srv, thread_id, "hi")
            await collect(srv, handle.run_id)
            assert [m.content for m in model.calls[0].instructions] == [
                "agent", "first", "remote", "last"
            ]  # fmt: skip
            # Transforms run left to right across the process boundary.
            assert (await transcript(srv, thread_id))[-1] == ("assistant", "x<first<remote<last")
    await host.close()


@contextlib.asynccontextmanager
async def host_stub(target: str) -> AsyncIterator[hpb_grpc.HookHostServiceStub]:
    channel = grpc.aio.insecure_channel(target)
    try:
        yield hpb_grpc.HookHostServiceStub(channel)
    finally:
        await channel.close()


@pytest.mark.rule("REM-02")
async def test_a_token_is_dead_after_its_hook_returned_and_bound_to_its_thread(
    database_url: str,
) -> None:
    captured: dict[str, Any] = {}

    async def prepare_run(i: PrepareRunInput) -> None:
        host = i.thread._host  # type: ignore[attr-defined]
        captured.setdefault("tokens", []).append((host.token, host.thread_id))
        if "other" in captured:
            # The live token, naming another thread: refused, nothing written.
            async with host_stub(captured["target"]) as stub:
                err = await rpc_error(
                    stub.MergeMetadata(
                        hpb.MergeMetadataRequest(
                            capability_token=host.token,
                            thread_id=captured["other"],
                            target=hpb.METADATA_TARGET_THREAD,
                            patch=struct_to_proto({"stolen": True}),
                        )
                    )
                )
                captured["wrong_thread"] = rich_status(err)[:2]

    host = HookHost()
    async with remote(lifecycle("keeper", prepare_run=prepare_run), host) as adapter:
        captured["target"] = host.target
        async with serving(database_url, [adapter], model=ScriptedModel(["ok"])) as srv:
            first = await new_thread(srv)
            await collect(srv, (await send(srv, first, "one")).run_id)
            token, thread_id = captured["tokens"][0]
            assert thread_id == first
            async with host_stub(host.target) as stub:
                # After the hook returned, its token is refused for reads and writes.
                for call in (
                    stub.MergeMetadata(
                        hpb.MergeMetadataRequest(
                            capability_token=token,
                            thread_id=first,
                            target=hpb.METADATA_TARGET_THREAD,
                            patch=struct_to_proto({"late": True}),
                        )
                    ),
                    stub.ListThreadMessages(
                        hpb.ListThreadMessagesRequest(capability_token=token, thread_id=first)
                    ),
                ):
                    err = await rpc_error(call)
                    assert rich_status(err)[:2] == (
                        grpc.StatusCode.PERMISSION_DENIED,
                        "CAPABILITY_EXPIRED",
                    )
            second = await new_thread(srv)
            captured["other"] = first
            await collect(srv, (await send(srv, second, "two")).run_id)
            assert captured["wrong_thread"] == (grpc.StatusCode.PERMISSION_DENIED, "WRONG_THREAD")
            head = await srv.threads.GetThread(tpb.GetThreadRequest(thread_id=first))
            assert dict(head.thread.metadata) == {}  # nothing changed
    await host.close()


@pytest.mark.rule("REM-02")
async def test_a_token_carries_its_phase_permissions(database_url: str) -> None:
    seen: dict[str, Any] = {}

    async def resolve(i: ResolveModelContextInput, next: Any) -> Any:
        host = i.thread._host  # type: ignore[attr-defined]
        async with host_stub(seen["target"]) as stub:
            err = await rpc_error(
                stub.UpdateThreadMessageVisibility(
                    hpb.UpdateThreadMessageVisibilityRequest(
                        capability_token=host.token,
                        thread_id=host.thread_id,
                        update=hpb.VisibilityUpdate(
                            message_ids=[i.history.through.message.id],  # type: ignore[union-attr]
                            context=False,
                        ),
                    )
                )
            )
            seen["resolver_visibility"] = rich_status(err)[:2]
            collected = await stub.CollectHistory(
                hpb.CollectHistoryRequest(capability_token=host.token, thread_id=host.thread_id)
            )
            seen["history"] = len(collected.messages)
        return await next()

    async def prepare_model_step(i: PrepareModelStepInput) -> None:
        host = i.thread._host  # type: ignore[attr-defined]
        async with host_stub(seen["target"]) as stub:
            err = await rpc_error(
                stub.CollectHistory(
                    hpb.CollectHistoryRequest(capability_token=host.token, thread_id=host.thread_id)
                )
            )
            seen["step_history"] = rich_status(err)[:2]

    hooks = lifecycle("perms", resolve_model_context=resolve, prepare_model_step=prepare_model_step)
    host = HookHost()
    async with remote(hooks, host) as adapter:
        seen["target"] = host.target
        async with serving(database_url, [adapter], model=ScriptedModel(["ok"])) as srv:
            thread_id = await new_thread(srv)
            await collect(srv, (await send(srv, thread_id, "hi")).run_id)
            assert (await transcript(srv, thread_id)) == [("user", "hi"), ("assistant", "ok")]
    await host.close()
    assert seen["resolver_visibility"] == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "VISIBILITY_NOT_ALLOWED",
    )
    assert seen["history"] == 1
    assert seen["step_history"] == (grpc.StatusCode.FAILED_PRECONDITION, "NO_HISTORY_IN_PHASE")
