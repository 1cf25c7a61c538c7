"""Serving a plugin: a gRPC server with the plugin servicer and health checking.

TLS comes from the arguments or, for a plugin process configured by its
environment, from variables (used when the argument is not given):

- ``PAI_PLUGIN_TLS_CERT``, ``PAI_PLUGIN_TLS_KEY``: the plugin's own listener
  serves TLS; ``PAI_PLUGIN_TLS_CLIENT_CA`` also requires the runtime's client
  certificate (mutual TLS).
- ``PAI_HOOK_HOST_TLS_CA``, ``PAI_HOOK_HOST_TLS_CERT``, ``PAI_HOOK_HOST_TLS_KEY``,
  ``PAI_HOOK_HOST_TLS_SERVER_NAME``: the hooks' facades call the runtime's
  HookHostService over TLS (mutual with a cert and key).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry.trace import TracerProvider

from pai.v1 import lifecycle_plugin_service_pb2_grpc as pb_grpc
from pai_grpc._wire import ClientTls, Keepalive, ServerTls, add_port
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


#: Environment prefixes of the plugin's listener TLS and of its channel to the hook host.
PLUGIN_TLS_ENV = "PAI_PLUGIN_TLS_"
HOOK_HOST_TLS_ENV = "PAI_HOOK_HOST_TLS_"


async def serve_plugin(
    lifecycle: AgentLifecycle,
    address: str = "127.0.0.1:0",
    *,
    name: str | None = None,
    tls: ServerTls | None = None,
    host_tls: ClientTls | None = None,
    tracer_provider: TracerProvider | None = None,
) -> PluginServer:
    """Host ``lifecycle`` as a LifecyclePluginService on ``address``.

    Each hook call continues the caller's trace (its ``traceparent``): a
    server span from ``tracer_provider``, or from the globally installed
    provider by default, so the hook's own spans join the run's trace.

    Args:
        lifecycle: The hooks to serve.
        address: ``HOST:PORT`` to listen on.
        name: The plugin's name in the runtime's diagnostics.
        tls: TLS of the plugin's listener (default: ``PAI_PLUGIN_TLS_*``, else
            plaintext); with a client CA, the runtime must present a certificate.
        host_tls: TLS of the channel to the runtime's HookHostService (default:
            ``PAI_HOOK_HOST_TLS_*``, else plaintext).
        tracer_provider: Where the plugin's spans go (default: the global provider, as
            installed when the plugin starts; with none installed the plugin records no
            spans and its calls carry no tracing interceptors).

    Raises:
        TlsError: A TLS file cannot be used.
    """
    tls = tls if tls is not None else ServerTls.from_env(PLUGIN_TLS_ENV)
    host_tls = host_tls if host_tls is not None else ClientTls.from_env(HOOK_HOST_TLS_ENV)
    options = [("grpc.so_reuseport", 0), *Keepalive().server_options()]
    server = grpc.aio.server(
        options=options,
        interceptors=tracing.server_interceptors(tracer_provider=tracer_provider),
    )
    servicer = PluginServicer(
        lifecycle, name=name, host_tls=host_tls, tracer_provider=tracer_provider
    )
    pb_grpc.add_LifecyclePluginServiceServicer_to_server(servicer, server)
    checker = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    port = add_port(server, address, tls)
    await server.start()
    await checker.set("", health_pb2.HealthCheckResponse.SERVING)
    host = address.rsplit(":", 1)[0]
    if host in ("0.0.0.0", "[::]", ""):
        host = "127.0.0.1"
    log.info("lifecycle plugin %s on %s:%d", servicer._name, host, port)
    return PluginServer(server=server, servicer=servicer, health=checker, port=port, host=host)
