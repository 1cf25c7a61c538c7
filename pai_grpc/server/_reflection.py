"""Server reflection over both ``grpc.reflection.v1`` and ``grpc.reflection.v1alpha``.

grpcio-reflection ships only v1alpha. The v1 protocol is the same protocol
under a new package name (identical messages, field for field), so one
servicer answers both: v1 requests decode with the v1alpha message classes
and v1alpha responses encode to v1 bytes. A v1 copy of the reflection file is
added to the descriptor pool so clients can describe the v1 service too.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1ALPHA = reflection.SERVICE_NAME
V1 = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _register_v1_descriptor() -> None:
    """Add the v1 reflection file (a renamed copy of v1alpha's) to the default pool."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(_V1_FILE)
        return
    except KeyError:
        pass
    fdp = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(fdp)
    old, new = f".{fdp.package}.", ".grpc.reflection.v1."
    fdp.name = _V1_FILE
    fdp.package = "grpc.reflection.v1"
    for message in fdp.message_type:
        for f in message.field:
            if f.type_name.startswith(old):
                f.type_name = new + f.type_name[len(old) :]
    for service in fdp.service:
        for method in service.method:
            method.input_type = new + method.input_type[len(old) :]
            method.output_type = new + method.output_type[len(old) :]
    pool.Add(fdp)


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serve reflection (v1 and v1alpha) listing ``service_names`` and both reflection services."""
    _register_v1_descriptor()
    servicer = reflection.aio.ReflectionServicer((*service_names, V1, V1ALPHA))
    for name in (V1, V1ALPHA):
        handler = grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": handler}),)
        )
