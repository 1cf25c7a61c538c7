"""Serving a plugin: a gRPC server with the plugin servicer and health checking."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry.trace import TracerProvider

from pai.v1 import lifecycle_plugin_service_pb2_grpc as pb_grpc
from pai_grpc.lifecycle import AgentLifecycle
from pai_grpc.plugin_sdk._servicer import PluginServicer
from pai_grpc.telemetry import tracing

log = logging.getLogger("pai_grpc.plugin_sdk")


@dataclass
class PluginServer:
    """A running plugin service."""

    server: grpc.aio.Server
    servicer: PluginServicer
    health: health.aio.HealthServicer
    port: int
    host: str = "127.0.0.1"

    @property
    def address(self) -> str:
        """``host:port`` to configure in the runtime."""
        return f"{self.host}:{self.port}"

    async def stop(self, grace: float = 1.0) -> None:
        """Report NOT_SERVING, finish in-flight hook calls (up to ``grace``), stop."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        await self.servicer.close()

    async def wait(self) -> None:
        """Serve until terminated."""
        await self.server.wait_for_termination()


async def serve_plugin(
    lifecycle: AgentLifecycle,
    address: str = "127.0.0.1:0",
    *,
    name: str | None = None,
    tracer_provider: TracerProvider | None = None,
) -> PluginServer:
    """Host ``lifecycle`` as a LifecyclePluginService on ``address``.

    Each hook call continues the caller's trace (its ``traceparent``): a
    server span from ``tracer_provider``, or from the globally installed
    provider by default, so the hook's own spans join the run's trace.
    """
    server = grpc.aio.server(
        options=[("grpc.so_reuseport", 0)],
        interceptors=tracing.server_interceptors(tracer_provider=tracer_provider),
    )
    servicer = PluginServicer(lifecycle, name=name, tracer_provider=tracer_provider)
    pb_grpc.add_LifecyclePluginServiceServicer_to_server(servicer, server)
    checker = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    await checker.set("", health_pb2.HealthCheckResponse.SERVING)
    host = address.rsplit(":", 1)[0]
    if host in ("0.0.0.0", "[::]", ""):
        host = "127.0.0.1"
    log.info("lifecycle plugin %s on %s:%d", servicer._name, host, port)
    return PluginServer(server=server, servicer=servicer, health=checker, port=port, host=host)
