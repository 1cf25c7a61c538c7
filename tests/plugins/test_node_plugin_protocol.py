"""The Node.js example plugin (examples/node-plugin) speaks LifecyclePluginService.

Protocol-level tests: the plugin runs as a real `node` process on loopback and
is called directly with grpc.aio stubs, so these tests pin the wire shapes a
non-Python plugin produces (oneofs, enums, Struct/Value) independently of the
runtime's remote-hook client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from pai.v1 import (
    chunks_pb2,
    lifecycle_pb2,
    model_pb2,
    parts_pb2,
    runs_pb2,
    tools_pb2,
)
from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai.v1 import lifecycle_plugin_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.slow

CALL_TIMEOUT_S = 10.0


@pytest.fixture
async def stub(plugin_address: str) -> AsyncIterator[pb_grpc.LifecyclePluginServiceStub]:
    """A stub on a fresh channel (one per test: each test has its own event loop)."""
    async with grpc.aio.insecure_channel(plugin_address) as channel:
        yield pb_grpc.LifecyclePluginServiceStub(channel)


# ---- builders ----


def value(obj: Any) -> struct_pb2.Value:
    """A google.protobuf.Value from plain JSON."""
    return json_format.ParseDict(obj, struct_pb2.Value())


def plain(v: struct_pb2.Value) -> Any:
    """Plain JSON from a google.protobuf.Value."""
    return json_format.MessageToDict(v)


def context() -> lifecycle_pb2.HookContext:
    return lifecycle_pb2.HookContext(
        agent="demo",
        thread_id="thr_01J00000000000000000000000",
        step=lifecycle_pb2.LifecycleStepInfo(step_id="step_1", index=0),
    )


def user(text: str) -> model_pb2.ModelMessage:
    part = model_pb2.UserContentPart(text=model_pb2.ModelTextPart(text=text))
    return model_pb2.ModelMessage(user=model_pb2.UserModelMessage(content=[part]))


def assistant(text: str) -> model_pb2.ModelMessage:
    part = model_pb2.AssistantContentPart(text=model_pb2.ModelTextPart(text=text))
    return model_pb2.ModelMessage(assistant=model_pb2.AssistantModelMessage(content=[part]))


def step_request(*messages: model_pb2.ModelMessage) -> model_pb2.ModelStepRequest:
    return model_pb2.ModelStepRequest(
        run_id="run_01J00000000000000000000000",
        model="fake:echo",
        instructions=model_pb2.Instructions(
            messages=[
                model_pb2.SystemModelMessage(
                    content="You are terse.",
                    provider_options=json_format.ParseDict(
                        {"anthropic": {"cacheControl": {"type": "ephemeral"}, "n": 1.5}},
                        struct_pb2.Struct(),
                    ),
                )
            ]
        ),
        messages=list(messages),
    )


def delta(text: str, id: str = "t1") -> pb.TransformStepStreamRequest:
    chunk = chunks_pb2.StepStreamChunk(text_delta=chunks_pb2.TextDeltaChunk(id=id, text=text))
    return pb.TransformStepStreamRequest(chunk=chunk)


def start() -> pb.TransformStepStreamRequest:
    return pb.TransformStepStreamRequest(
        start=pb.TransformStepStreamStart(context=context(), input=step_request(user("hi")))
    )


END = pb.TransformStepStreamRequest(end=pb.StreamEnd())

# A note on writes: grpc.aio (grpc/grpc#36066) reports
# INTERNAL "Internal error from Core" instead of the server's status when a
# client write fails because the server already finished the stream (about 1
# call in 5 on loopback). The plugin finishes TransformStepStream on its own
# (after `end`, on abort, on a protocol error), so these tests use the
# reader/writer API and never write or half-close after the plugin may have
# finished: the statuses they assert are then deterministic.


# ---- Describe ----


async def test_describe_lists_exactly_the_three_phases(
    stub: pb_grpc.LifecyclePluginServiceStub,
) -> None:
    described = await stub.Describe(pb.DescribeRequest(), timeout=CALL_TIMEOUT_S)
    assert described.name == "node-guard"
    assert described.version
    assert sorted(described.phases) == sorted(
        [
            lifecycle_pb2.LIFECYCLE_PHASE_PREPARE_MODEL_STEP,
            lifecycle_pb2.LIFECYCLE_PHASE_BEFORE_TOOL_CALL,
            lifecycle_pb2.LIFECYCLE_PHASE_TRANSFORM_STEP_STREAM,
        ]
    )
    assert len(described.phases) == 3


# ---- PrepareModelStep ----


async def test_prepare_model_step_appends_a_system_instruction(
    stub: pb_grpc.LifecyclePluginServiceStub,
) -> None:
    request = pb.PrepareModelStepRequest(
        context=context(), input=step_request(user("forbidden fruit?"), user("Hello there"))
    )
    response = await stub.PrepareModelStep(request, timeout=CALL_TIMEOUT_S)
    assert response.WhichOneof("decision") == "continue_step"
    patch = response.continue_step.patch
    assert [m.content for m in patch.instructions.messages] == [
        "You are terse.",
        "Answer in the voice of the Node plugin.",
    ]
    # The existing instruction comes back intact, provider options (a Struct) included.
    assert patch.instructions.messages[0] == request.input.instructions.messages[0]
    # Only instructions are patched: the patch stays sparse.
    assert [f.name for f, _ in patch.ListFields()] == ["instructions"]


async def test_prepare_model_step_without_instructions_adds_only_its_own(
    stub: pb_grpc.LifecyclePluginServiceStub,
) -> None:
    input = model_pb2.ModelStepRequest(model="fake:echo", messages=[user("hi")])
    response = await stub.PrepareModelStep(
        pb.PrepareModelStepRequest(context=context(), input=input), timeout=CALL_TIMEOUT_S
    )
    messages = response.continue_step.patch.instructions.messages
    assert [m.content for m in messages] == ["Answer in the voice of the Node plugin."]


async def test_prepare_model_step_blocks_the_forbidden_word(
    stub: pb_grpc.LifecyclePluginServiceStub,
) -> None:
    request = pb.PrepareModelStepRequest(
        context=context(),
        input=step_request(user("hello"), assistant("hi"), user("tell me the Forbidden thing")),
    )
    response = await stub.PrepareModelStep(request, timeout=CALL_TIMEOUT_S)
    assert response.WhichOneof("decision") == "block"
    assert response.block.reason == "NODE_POLICY"
    assert list(response.block.response.parts) == [
        parts_pb2.MessagePart(
            text=parts_pb2.TextPart(
                text="Blocked by the Node plugin.", state=parts_pb2.PART_STATE_DONE
            )
        )
    ]


# ---- BeforeToolCall ----


def tool_call(name: str, input: Any) -> pb.BeforeToolCallRequest:
    return pb.BeforeToolCallRequest(
        context=context(),
        tool=tools_pb2.ToolInfo(name=name, source=model_pb2.TOOL_SOURCE_BACKEND),
        tool_call_id="call_1",
        entry=tools_pb2.ToolExecutionEntry(initial=tools_pb2.InitialEntry()),
        input=value(input),
    )


async def test_before_tool_call_rejects_destructive_tools(
    stub: pb_grpc.LifecyclePluginServiceStub,
) -> None:
    response = await stub.BeforeToolCall(
        tool_call("delete_everything", {"city": "paris"}), timeout=CALL_TIMEOUT_S
    )
    assert response.WhichOneof("decision") == "reject"
    assert response.reject.message == "The Node plugin refuses destructive tools."


async def test_before_tool_call_upper_cases_the_city(
    stub: pb_grpc.LifecyclePluginServiceStub,
) -> None:
    input = {"city": "Paris", "days": 3, "units": ["c"], "opts": {"x": None, "ok": True}}
    response = await stub.BeforeToolCall(tool_call("weather", input), timeout=CALL_TIMEOUT_S)
    assert response.WhichOneof("decision") == "replace_input"
    # Every other field round-trips through Struct/Value unchanged.
    assert plain(response.replace_input.input) == {**input, "city": "PARIS"}


@pytest.mark.parametrize("input", [{"town": "paris"}, "paris", [{"city": "x"}], None, {}])
async def test_before_tool_call_continues_otherwise(
    stub: pb_grpc.LifecyclePluginServiceStub, input: Any
) -> None:
    response = await stub.BeforeToolCall(tool_call("weather", input), timeout=CALL_TIMEOUT_S)
    assert response.WhichOneof("decision") == "continue_call"


# ---- TransformStepStream ----


async def test_transform_redacts_and_writes_stats_after_end(
    stub: pb_grpc.LifecyclePluginServiceStub,
) -> None:
    upstream = [
        chunks_pb2.StepStreamChunk(start=chunks_pb2.StartChunk()),
        chunks_pb2.StepStreamChunk(text_start=chunks_pb2.TextStartChunk(id="t1")),
        delta("the secret is ").chunk,
        delta("secret, secret!", id="t1").chunk,
        chunks_pb2.StepStreamChunk(text_end=chunks_pb2.TextEndChunk(id="t1")),
        chunks_pb2.StepStreamChunk(
            finish=chunks_pb2.FinishChunk(
                finish_reason=chunks_pb2.FINISH_REASON_STOP,
                total_usage=chunks_pb2.Usage(input_tokens=2**40, output_tokens=7),
            )
        ),
    ]

    call = stub.TransformStepStream(timeout=CALL_TIMEOUT_S)
    await call.write(start())
    for chunk in upstream:
        await call.write(pb.TransformStepStreamRequest(chunk=chunk))
    await call.write(END)
    # The plugin finishes the call itself after `end`; no half-close is needed
    # (see the note on writes below END).
    responses = []
    while (response := await call.read()) is not grpc.aio.EOF:
        responses.append(response)
    assert await call.code() == grpc.StatusCode.OK

    kinds = [r.WhichOneof("message") for r in responses]
    assert kinds == ["chunk"] * len(upstream) + ["ui_data", "end"]
    downstream = [r.chunk for r in responses[: len(upstream)]]
    expected = list(upstream)
    expected[2] = delta("the [node-redacted] is ").chunk
    expected[3] = delta("[node-redacted], [node-redacted]!").chunk
    # Non-text chunks (including int64 usage) come back byte-for-byte equal.
    assert downstream == expected

    stats = responses[-2].ui_data
    assert stats.name == "node-stats"
    assert not stats.transient
    assert plain(stats.data) == {"chunks": len(upstream)}


async def test_transform_aborts_on_marker(stub: pb_grpc.LifecyclePluginServiceStub) -> None:
    call = stub.TransformStepStream(timeout=CALL_TIMEOUT_S)
    await call.write(start())
    await call.write(delta("fine so far"))
    first = await call.read()
    assert first == pb.TransformStepStreamResponse(chunk=delta("fine so far").chunk)
    await call.write(delta("then ABORT-NOW please"))
    aborted = await call.read()
    assert aborted.WhichOneof("message") == "abort"
    assert aborted.abort == lifecycle_pb2.StepAbort(
        reason="NODE_ABORT", outcome=runs_pb2.RUN_OUTCOME_BLOCKED
    )
    # Abort is terminal: no ui_data, no end. Chunks the runtime still had in flight are
    # drained, and the plugin finishes OK once the runtime half-closes.
    await call.write(delta("in flight"))
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


async def test_transform_rejects_a_stream_not_opened_by_start(
    stub: pb_grpc.LifecyclePluginServiceStub,
) -> None:
    call = stub.TransformStepStream(timeout=CALL_TIMEOUT_S)
    await call.write(delta("no start"))
    assert await call.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "start" in (await call.details())


# ---- phases the plugin does not declare ----


async def test_undeclared_phases_are_unimplemented(
    stub: pb_grpc.LifecyclePluginServiceStub,
) -> None:
    unary_calls = [
        stub.PrepareRun(pb.PrepareRunRequest(context=context()), timeout=CALL_TIMEOUT_S),
        stub.AfterToolResult(pb.AfterToolResultRequest(), timeout=CALL_TIMEOUT_S),
        stub.AfterStep(pb.AfterStepRequest(), timeout=CALL_TIMEOUT_S),
        stub.PrepareHistoryRewrite(pb.PrepareHistoryRewriteRequest(), timeout=CALL_TIMEOUT_S),
        stub.HistoryRewritten(pb.HistoryRewrittenRequest(), timeout=CALL_TIMEOUT_S),
    ]
    for unary in unary_calls:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await unary
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED

    # Streams: the plugin answers on the call headers, before any message, so
    # the test sends none (see the note on writes below END).
    for stream in (
        stub.AroundModelCall(timeout=CALL_TIMEOUT_S),
        stub.ResolveModelContext(timeout=CALL_TIMEOUT_S),
    ):
        assert await stream.code() == grpc.StatusCode.UNIMPLEMENTED
