"""Misbehaving plugins for failure-policy tests, written against the raw contract."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from pai.v1 import lifecycle_pb2, model_pb2, runs_pb2
from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai.v1 import lifecycle_plugin_service_pb2_grpc as pb_grpc

#: Sent as-is in place of a reply: field 1 claims 5 bytes and 2 follow, so it never parses.
GARBAGE = b"\x0a\x05ab"


@dataclass
class Behaviour:
    """What the fake plugin does in each phase."""

    #: prepare_model_step: "ok" | "sleep" | "wrong" | "garbage" | "status"
    prepare_model_step: str = "ok"
    #: prepare_run: "ok" | "wrong"
    prepare_run: str = "ok"
    #: transform_step_stream: "echo" | "close_early" | "fail_after_first" | "sleep" |
    #: "garbage" | "unset" (a reply with no arm) | "status_at_start" | "status_midstream"
    #: (after reading the first chunk, while the runtime still writes) | "hook_failed"
    transform: str = "echo"
    #: around_model_call: "pass" | "pass_before_next" | "garbage" | "unset" | "status"
    around: str = "pass"
    #: The status the "status" behaviours end the call with.
    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    #: With it, that status carries ErrorInfo{reason, domain "pai.v1"} (a hook's own error).
    rich_reason: str | None = None
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
    ) -> pb.PrepareModelStepResponse | bytes:
        self.b.calls.append("prepare_model_step")
        if self.b.slow:
            await asyncio.sleep(self.b.sleep)
        if self.b.prepare_model_step == "sleep":
            await asyncio.sleep(self.b.sleep)
        if self.b.prepare_model_step == "wrong":
            return pb.PrepareModelStepResponse(
                continue_step=pb.StepContinue(patch=model_pb2.ModelStepPatch(model="no-colon"))
            )
        if self.b.prepare_model_step == "garbage":
            return GARBAGE
        if self.b.prepare_model_step == "status":
            await self.fail(context)
        return pb.PrepareModelStepResponse()

    async def fail(self, context: Any) -> None:
        """End the call with the configured status (rich when a reason is configured)."""
        message = f"plugin says {self.b.code.name}"
        if self.b.rich_reason is None:
            await context.abort(self.b.code, message)
        info = any_pb2.Any()
        info.Pack(error_details_pb2.ErrorInfo(reason=self.b.rich_reason, domain="pai.v1"))
        await context.abort_with_status(
            rpc_status.to_status(
                status_pb2.Status(
                    code=getattr(code_pb2, self.b.code.name), message=message, details=[info]
                )
            )
        )

    async def AroundModelCall(
        self, requests: AsyncIterator[pb.AroundModelCallRequest], context: Any
    ) -> AsyncIterator[pb.AroundModelCallResponse | bytes]:
        self.b.calls.append("around_model_call")
        await anext(requests)  # start
        if self.b.around == "garbage":
            yield GARBAGE
        elif self.b.around == "unset":
            yield pb.AroundModelCallResponse()
        elif self.b.around == "status":
            await self.fail(context)
        if self.b.around in ("garbage", "unset"):
            await drain(requests)
            return
        if self.b.around == "pass_before_next":
            yield pb.AroundModelCallResponse(pass_through=pb.PassThrough())
            return
        yield pb.AroundModelCallResponse(next=pb.ModelCallNext(mode=pb.STREAM_MODE_PASS_THROUGH))
        await anext(requests)  # next_started
        yield pb.AroundModelCallResponse(pass_through=pb.PassThrough())

    async def TransformStepStream(
        self, requests: AsyncIterator[pb.TransformStepStreamRequest], context: Any
    ) -> AsyncIterator[pb.TransformStepStreamResponse | bytes]:
        self.b.calls.append("transform_step_stream")
        await anext(requests)  # start
        if self.b.transform == "sleep":
            await asyncio.sleep(self.b.sleep)
        if self.b.transform == "status_at_start":
            await self.fail(context)
        sent = 0
        async for message in requests:
            kind = message.WhichOneof("message")
            if kind == "end":
                break
            if self.b.transform == "close_early":
                return  # ends the call without `end`, while the runtime still writes
            if self.b.transform == "status_midstream":
                await self.fail(context)
            if self.b.transform in ("garbage", "unset", "hook_failed"):
                # An answer that breaks the contract (or the hook's own error), then the
                # call stays open until the runtime half-closes or cancels it.
                if self.b.transform == "garbage":
                    yield GARBAGE
                elif self.b.transform == "unset":
                    yield pb.TransformStepStreamResponse()
                else:
                    yield pb.TransformStepStreamResponse(
                        failed=pb.HookFailed(reason="HOOK_FAILED", message="the hook raised")
                    )
                await drain(requests)
                return
            if kind == "batch":
                self.b.calls.append(f"batch:{len(message.batch.chunks)}")
                yield pb.TransformStepStreamResponse(batch=message.batch)
            else:
                yield pb.TransformStepStreamResponse(chunk=message.chunk)
            sent += 1
            if self.b.transform == "fail_after_first" and sent == 1:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "plugin crashed")
        yield pb.TransformStepStreamResponse(end=pb.StreamEnd())


async def drain(requests: AsyncIterator[Any]) -> None:
    """Read until the runtime half-closes or cancels the call."""
    with contextlib.suppress(Exception):
        async for _ in requests:
            pass


def _wire(message: Any) -> bytes:
    """Serialize a reply; bytes go out untouched (so a fake can send garbage)."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def _handlers(servicer: FakePlugin) -> grpc.GenericRpcHandler:
    """The declared methods, with replies serialized by :func:`_wire`."""
    unary = {
        "Describe": pb.DescribeRequest,
        "PrepareRun": pb.PrepareRunRequest,
        "PrepareModelStep": pb.PrepareModelStepRequest,
    }
    streams = {
        "AroundModelCall": pb.AroundModelCallRequest,
        "TransformStepStream": pb.TransformStepStreamRequest,
    }
    methods = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name), request_deserializer=kind.FromString, response_serializer=_wire
        )
        for name, kind in unary.items()
    }
    methods |= {
        name: grpc.stream_stream_rpc_method_handler(
            getattr(servicer, name), request_deserializer=kind.FromString, response_serializer=_wire
        )
        for name, kind in streams.items()
    }
    return grpc.method_handlers_generic_handler("pai.v1.LifecyclePluginService", methods)


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
    server.add_generic_rpc_handlers((_handlers(FakePlugin(behaviour)),))
    checker = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await checker.set("", health_pb2.HealthCheckResponse.SERVING)
    return Running(server, bound, behaviour)
