"""Misbehaving plugins for failure-policy tests, written against the raw contract."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from pai.v1 import lifecycle_pb2, model_pb2, runs_pb2
from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai.v1 import lifecycle_plugin_service_pb2_grpc as pb_grpc


@dataclass
class Behaviour:
    """What the fake plugin does in each phase."""

    #: prepare_model_step: "ok" | "sleep" | "wrong"
    prepare_model_step: str = "ok"
    #: prepare_run: "ok" | "wrong"
    prepare_run: str = "ok"
    #: transform_step_stream: "echo" | "close_early" | "fail_after_first" | "sleep"
    transform: str = "echo"
    #: around_model_call: "pass" | "pass_before_next"
    around: str = "pass"
    sleep: float = 2.0
    #: Every handler sleeps first (to trip the back-off).
    slow: bool = False
    #: Declare that chunk batches are accepted.
    batches: bool = False
    calls: list[str] = field(default_factory=list)


class FakePlugin(pb_grpc.LifecyclePluginServiceServicer):
    """Declares prepare_run, prepare_model_step, around_model_call and transform_step_stream."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.b = behaviour

    async def Describe(self, request: pb.DescribeRequest, context: Any) -> pb.DescribeResponse:
        return pb.DescribeResponse(
            name="fake",
            phases=[
                lifecycle_pb2.LIFECYCLE_PHASE_PREPARE_RUN,
                lifecycle_pb2.LIFECYCLE_PHASE_PREPARE_MODEL_STEP,
                lifecycle_pb2.LIFECYCLE_PHASE_AROUND_MODEL_CALL,
                lifecycle_pb2.LIFECYCLE_PHASE_TRANSFORM_STEP_STREAM,
            ],
            accepts_chunk_batches=self.b.batches,
        )

    async def PrepareRun(
        self, request: pb.PrepareRunRequest, context: Any
    ) -> pb.PrepareRunResponse:
        self.b.calls.append("prepare_run")
        if self.b.slow:
            await asyncio.sleep(self.b.sleep)
        if self.b.prepare_run == "wrong":
            # An outcome prepare_run cannot answer with: a malformed reply.
            return pb.PrepareRunResponse(
                respond=lifecycle_pb2.RespondDecision(
                    response=model_pb2.AssistantResponse(), outcome=runs_pb2.RUN_OUTCOME_CANCELLED
                )
            )
        return pb.PrepareRunResponse()

    async def PrepareModelStep(
        self, request: pb.PrepareModelStepRequest, context: Any
    ) -> pb.PrepareModelStepResponse:
        self.b.calls.append("prepare_model_step")
        if self.b.slow:
            await asyncio.sleep(self.b.sleep)
        if self.b.prepare_model_step == "sleep":
            await asyncio.sleep(self.b.sleep)
        if self.b.prepare_model_step == "wrong":
            return pb.PrepareModelStepResponse(
                continue_step=pb.StepContinue(patch=model_pb2.ModelStepPatch(model="no-colon"))
            )
        return pb.PrepareModelStepResponse()

    async def AroundModelCall(
        self, requests: AsyncIterator[pb.AroundModelCallRequest], context: Any
    ) -> AsyncIterator[pb.AroundModelCallResponse]:
        self.b.calls.append("around_model_call")
        await anext(requests)  # start
        if self.b.around == "pass_before_next":
            yield pb.AroundModelCallResponse(pass_through=pb.PassThrough())
            return
        yield pb.AroundModelCallResponse(next=pb.ModelCallNext(mode=pb.STREAM_MODE_PASS_THROUGH))
        await anext(requests)  # next_started
        yield pb.AroundModelCallResponse(pass_through=pb.PassThrough())

    async def TransformStepStream(
        self, requests: AsyncIterator[pb.TransformStepStreamRequest], context: Any
    ) -> AsyncIterator[pb.TransformStepStreamResponse]:
        self.b.calls.append("transform_step_stream")
        await anext(requests)  # start
        if self.b.transform == "sleep":
            await asyncio.sleep(self.b.sleep)
        sent = 0
        async for message in requests:
            kind = message.WhichOneof("message")
            if kind == "end":
                break
            if self.b.transform == "close_early":
                return  # ends the call without `end`: a protocol error
            if kind == "batch":
                self.b.calls.append(f"batch:{len(message.batch.chunks)}")
                yield pb.TransformStepStreamResponse(batch=message.batch)
            else:
                yield pb.TransformStepStreamResponse(chunk=message.chunk)
            sent += 1
            if self.b.transform == "fail_after_first" and sent == 2:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "plugin crashed")
        yield pb.TransformStepStreamResponse(end=pb.StreamEnd())


@dataclass
class Running:
    """A fake plugin on a loopback port."""

    server: grpc.aio.Server
    port: int
    behaviour: Behaviour

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self) -> None:
        await self.server.stop(0)


async def serve_fake(behaviour: Behaviour, port: int = 0) -> Running:
    server = grpc.aio.server()
    pb_grpc.add_LifecyclePluginServiceServicer_to_server(FakePlugin(behaviour), server)
    checker = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await checker.set("", health_pb2.HealthCheckResponse.SERVING)
    return Running(server, bound, behaviour)
