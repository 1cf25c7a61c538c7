"""Server reflection lists exactly what the API port serves, over v1 and v1alpha."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from pai_grpc.testing import InProcessServer

#: What the API port serves. The plugin and tool contracts (LifecyclePluginService,
#: HookHostService, ToolService) are served by plugins and tool servers, not here.
SERVED = {
    "pai.v1.ThreadService",
    "pai.v1.RunService",
    "pai.v1.AdminService",
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
}

Ask = Callable[
    [reflection_pb2.ServerReflectionRequest], Awaitable[reflection_pb2.ServerReflectionResponse]
]


def _asker(channel: grpc.aio.Channel, version: str) -> Ask:
    # The v1 and v1alpha messages are the same on the wire; only the service name differs.
    call_factory = channel.stream_stream(
        f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )

    async def ask(
        request: reflection_pb2.ServerReflectionRequest,
    ) -> reflection_pb2.ServerReflectionResponse:
        async for response in call_factory(iter([request])):
            return response  # type: ignore[no-any-return]
        raise AssertionError("no reflection response")

    return ask


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_reflection_lists_only_served_services(server: InProcessServer, version: str) -> None:
    ask = _asker(server.channel, version)
    listed = await ask(reflection_pb2.ServerReflectionRequest(list_services=""))
    names = {s.name for s in listed.list_services_response.service}
    assert names == SERVED

    for name in names:
        found = await ask(reflection_pb2.ServerReflectionRequest(file_containing_symbol=name))
        assert found.WhichOneof("message_response") == "file_descriptor_response", name
        described: dict[str, list[descriptor_pb2.MethodDescriptorProto]] = {}
        for raw in found.file_descriptor_response.file_descriptor_proto:
            fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
            for svc in fd.service:
                described[f"{fd.package}.{svc.name}"] = list(svc.method)
        assert described.get(name), f"{name} is listed but not described"
        # Listed means served: each method answers something other than "no such method".
        method = described[name][0]
        if method.client_streaming:
            continue  # the reflection services themselves: exercised above
        code = await _code_of(server.channel, f"/{name}/{method.name}", method.server_streaming)
        assert code != grpc.StatusCode.UNIMPLEMENTED, (name, method.name)


async def _code_of(channel: grpc.aio.Channel, path: str, streaming: bool) -> grpc.StatusCode:
    """The status an empty request to ``path`` gets (OK when it is answered)."""
    try:
        if streaming:
            call = channel.unary_stream(path)(b"", timeout=2)
            async for _ in call:
                break
            call.cancel()
        else:
            await channel.unary_unary(path)(b"", timeout=2)
    except grpc.aio.AioRpcError as e:
        return e.code()
    return grpc.StatusCode.OK
