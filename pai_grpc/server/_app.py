"""Processes: the gRPC application (API + embedded runner) and runner-only workers."""

from __future__ import annotations

import asyncio
import logging
import signal

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from pai.v1 import admin_service_pb2_grpc, run_service_pb2_grpc, thread_service_pb2_grpc
from pai_grpc.config import Settings
from pai_grpc.runtime import AgentRegistry, Runner, Runtime
from pai_grpc.server._admin import AdminService
from pai_grpc.server._runs import RunService
from pai_grpc.server._scope import ScopeResolver
from pai_grpc.server._threads import ThreadService
from storage import Store, check_schema

log = logging.getLogger("pai_grpc.server")

#: The contract's services, as listed by reflection.
SERVICE_NAMES = (
    "pai.v1.ThreadService",
    "pai.v1.RunService",
    "pai.v1.AdminService",
    "pai.v1.LifecyclePluginService",
    "pai.v1.HookHostService",
    "pai.v1.ToolService",
)
MAX_MESSAGE_BYTES = 16 << 20


async def _until_signal() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("signal received")


class App:
    """One server process: the gRPC server plus (by default) an embedded runner."""

    def __init__(
        self,
        settings: Settings,
        agents: AgentRegistry,
        *,
        store: Store | None = None,
    ) -> None:
        self.settings = settings
        self.store = store or Store.open(settings.database_url)
        self.runtime = Runtime(self.store, agents)
        self.runtime.services.lease_seconds = settings.lease_seconds
        self.scopes = ScopeResolver(settings.tokens, admin_tokens=settings.admin_tokens)
        self.runner: Runner | None = None
        self.health = health.aio.HealthServicer()
        self.server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> int:
        """Check the schema, start the runner and the server; return the bound port."""
        await check_schema(self.store)
        # Register every contract file so reflection can describe all six services.
        from pai.v1 import (  # noqa: F401
            admin_service_pb2,
            hook_host_service_pb2,
            lifecycle_plugin_service_pb2,
            tool_service_pb2,
        )

        await self.runtime.services.signals.start()
        if self.settings.embedded_runner:
            self.runner = Runner(
                self.runtime.services,
                concurrency=self.settings.runner_concurrency,
                lease_seconds=self.settings.lease_seconds,
            )
            self.runner.start()
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ]
        )
        thread_service_pb2_grpc.add_ThreadServiceServicer_to_server(
            ThreadService(self.runtime, self.scopes), server
        )
        run_service_pb2_grpc.add_RunServiceServicer_to_server(
            RunService(self.runtime, self.scopes), server
        )
        admin_service_pb2_grpc.add_AdminServiceServicer_to_server(
            AdminService(self.runtime, self.scopes), server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        self.port = server.add_insecure_port(self.settings.address)
        if self.port == 0:
            raise OSError(f"cannot listen on {self.settings.address}")
        await server.start()
        self.server = server
        for name in ("", *SERVICE_NAMES[:3]):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("serving pai.v1 on %s (port %d)", self.settings.address, self.port)
        return self.port

    async def stop(self, grace: float | None = None) -> None:
        """Drain gracefully: report NOT_SERVING, stop accepting, finish or hand back runs."""
        grace = self.settings.grace_seconds if grace is None else grace
        log.info("draining (grace %.1fs)", grace)
        await self.health.enter_graceful_shutdown()
        tasks = []
        if self.runner is not None:
            tasks.append(self.runner.stop(grace))
        if self.server is not None:
            tasks.append(self.server.stop(grace))
        await asyncio.gather(*tasks)
        await self.runtime.services.signals.close()
        await self.store.close()
        log.info("drained; bye")

    async def run_until_signal(self) -> None:
        """Serve until SIGTERM or SIGINT, then drain."""
        await self.start()
        await _until_signal()
        await self.stop()


class RunnerProcess:
    """A runner-only process: claims and executes runs from the shared database."""

    def __init__(
        self, settings: Settings, agents: AgentRegistry, *, store: Store | None = None
    ) -> None:
        self.settings = settings
        self.store = store or Store.open(settings.database_url)
        self.runtime = Runtime(self.store, agents)
        self.runner = Runner(
            self.runtime.services,
            concurrency=settings.runner_concurrency,
            lease_seconds=settings.lease_seconds,
        )

    async def start(self) -> None:
        """Check the schema and start claiming."""
        await check_schema(self.store)
        await self.runtime.services.signals.start()
        self.runner.start()

    async def stop(self, grace: float | None = None) -> None:
        """Finish or hand back in-flight runs, then close."""
        await self.runner.stop(self.settings.grace_seconds if grace is None else grace)
        await self.runtime.services.signals.close()
        await self.store.close()

    async def run_until_signal(self) -> None:
        """Run until SIGTERM or SIGINT, then drain."""
        await self.start()
        await _until_signal()
        await self.stop()
