"""The health check of a server (``pai-grpc health``), light enough for container probes."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai_grpc._wire._tls import ClientTls, channel


async def check_health(
    address: str, service: str = "", *, timeout: float = 3.0, tls: ClientTls | None = None
) -> bool:
    """Whether the server at ``address`` reports SERVING for ``service`` (over ``tls``, if set)."""
    async with channel(address, tls) as api:
        stub = health_pb2_grpc.HealthStub(api)
        try:
            response = await stub.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        except grpc.aio.AioRpcError:
            return False
    return bool(response.status == health_pb2.HealthCheckResponse.SERVING)
