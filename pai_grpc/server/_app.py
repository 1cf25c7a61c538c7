"""Processes: the gRPC application (API + embedded runner) and runner-only workers."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import sys
from datetime import timedelta
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from pai.v1 import admin_service_pb2_grpc, run_service_pb2_grpc, thread_service_pb2_grpc
from pai_grpc._exposure import check_exposure
from pai_grpc._wire import add_port
from pai_grpc.config import ConfigError, Settings
from pai_grpc.runtime import AgentRegistry, Runner, Runtime, ScopeQuotas, Sweeper
from pai_grpc.server._admin import AdminService
from pai_grpc.server._decode import add_guarded
from pai_grpc.server._reflection import enable_reflection
from pai_grpc.server._runs import RunService
from pai_grpc.server._scope import ScopeResolver
from pai_grpc.server._threads import ThreadService
from pai_grpc.telemetry import Telemetry, tracing
from storage import Store, Unavailable, check_schema, outage_delay

if TYPE_CHECKING:
    from pai_grpc.server._http import HttpServer

log = logging.getLogger("pai_grpc.server")

#: The contract services this port serves, as listed by reflection. The plugin and
#: tool contracts (LifecyclePluginService, HookHostService, ToolService) are served
#: by plugins and tool servers, never here, so reflection does not list them.
SERVICE_NAMES = (
    "pai.v1.ThreadService",
    "pai.v1.RunService",
    "pai.v1.AdminService",
)
MAX_MESSAGE_BYTES = 16 << 20
#: How often health probes the database while it is up, and while it is down.
PROBE_UP_SECONDS = 2.0
PROBE_DOWN_SECONDS = 0.25


async def _until_signal() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("signal received")


def tune_gc() -> None:
    """Take what startup loaded out of the cyclic garbage collector's reach.

    Everything loaded at startup (modules, generated descriptors, SQLAlchemy
    metadata, config) lives as long as the process, yet every full collection
    walked it: ``gc.freeze()`` moves it to a permanent generation. On the runs
    benchmark, time in the collector per run fell from ≈0.43 ms to ≈0.25 ms.
    CPython's thresholds stay: raising the first one to 10,000 cut that to
    ≈0.08 ms but let garbage cycles pile up between collections, and the
    memory benchmark's RSS after 10,000 runs rose from ≈175 MiB to ≈260 MiB.
    """
    gc.collect()
    gc.freeze()


#: glibc's mallopt parameter for the most arenas (malloc.h).
_M_ARENA_MAX = -8
#: Arenas a serving process allocates from unless ``MALLOC_ARENA_MAX`` says otherwise.
MALLOC_ARENAS = 2


def cap_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process; returns whether it was capped.

    glibc gives each new thread that allocates an arena of its own (up to
    eight per core), and what one arena frees is not reused by the others. A
    serving process runs a dozen threads (SQLite's readers and writer,
    gRPC's, the metrics server's), and allocated from 11 arenas. Capped at
    two, the memory benchmark's resident set was 5-7 MiB smaller throughout
    (117 MiB instead of 124 after 10,000 runs on long histories), and runs/s
    did not drop (alternated rounds on SQLite: 1.02-1.06x), though SQLite's
    threads now share two arenas with the event loop. Call it before threads
    start. ``MALLOC_ARENA_MAX`` in the environment (which glibc
    reads itself) wins; other C libraries are left alone.
    """
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: musl's mallopt differs)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_ARENA_MAX, arenas))


async def _settle(timeout: float = 2.0) -> None:
    """Let the tasks still alive after a drain finish before the process's loop closes.

    grpc's server completes its shutdown as soon as every call's final status
    is on the wire, which can be a loop iteration before the call's own task
    (``_schedule_rpc_coro``) has run its completion. ``asyncio.run`` would then
    cancel that task, and grpc logs the cancellation as an unhandled ERROR in
    the servicer method, on a call that in fact completed. After a drain
    nothing else runs, so this waits for at most a moment.
    """
    current = asyncio.current_task()
    alive = [task for task in asyncio.all_tasks() if task is not current and not task.done()]
    if alive:
        await asyncio.wait(alive, timeout=timeout)


def _transport(settings: Settings) -> str:
    if settings.tls is None:
        return "plaintext"
    return "mutual TLS" if settings.tls.require_client_cert else "TLS"


def _idempotency_ttl(settings: Settings) -> timedelta:
    return timedelta(seconds=settings.file.retention.idempotency_ttl)


def _sweeper(store: Store, settings: Settings, runtime: Runtime) -> Sweeper:
    table = settings.file.retention
    return Sweeper(
        store,
        table.policy(),
        interval=table.sweep_interval,
        metrics=runtime.services.metrics,
    )


#: How long a starting process waits for an unreachable database before giving up.
STARTUP_DATABASE_WAIT = 120.0


async def _check_schema_when_reachable(store: Store, wait: float = STARTUP_DATABASE_WAIT) -> None:
    """Check the schema, first waiting out an unreachable database (at most ``wait`` seconds).

    A replacement runner or server can start in the middle of a database
    restart, a failover or a rollout of both; exiting then would only make
    its supervisor restart it into the same outage. A wrong schema still
    fails at once.

    Raises:
        storage.Unavailable: the database stayed unreachable for ``wait``.
        storage.SchemaMismatch: the database is not at this code's revision.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    attempt = 0
    while True:
        try:
            await check_schema(store)
        except Unavailable as e:
            if loop.time() >= deadline:
                raise
            if attempt == 0:
                log.warning("waiting up to %.0fs for the database: %s", wait, e)
            await asyncio.sleep(outage_delay(attempt))
            attempt += 1
            continue
        if attempt:
            log.info("the database is reachable; starting")
        await _warn_about_upkeep(store)
        return


async def _warn_about_upkeep(store: Store) -> None:
    """Log what in the database's upkeep would slow the service down over time.

    Advisory only: a database that cannot be asked still serves.
    """
    try:
        problems = await store.upkeep_problems()
    except Exception as e:  # whatever the reason, starting matters more
        log.info("could not read the database's vacuum settings: %s", e)
        return
    for problem in problems:
        log.warning("%s (docs/storage.md, Vacuum)", problem)


class App:
    """One server process: the gRPC server plus (by default) an embedded runner."""

    def __init__(
        self,
        settings: Settings,
        agents: AgentRegistry,
        *,
        store: Store | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.settings = settings
        self.store = store or Store.open(settings.database_url)
        self.store.idempotency_ttl = _idempotency_ttl(settings)
        self.runtime = Runtime(self.store, agents, telemetry=telemetry)
        self.runtime.services.lease_seconds = settings.lease_seconds
        self.runtime.services.bound_memory(
            run_event_buffer_bytes=settings.run_event_buffer_bytes,
            context_cache_bytes=settings.context_cache_bytes,
            events_after_terminal=settings.file.retention.events_after_terminal,
        )
        self.runtime.services.quotas = ScopeQuotas(
            max_active_runs=settings.max_active_runs_per_scope,
            sends_per_second=settings.sends_per_second,
            send_burst=settings.send_burst,
        )
        self.scopes = ScopeResolver.from_settings(settings)
        self.runner: Runner | None = None
        self.sweeper: Sweeper | None = None
        self.health = health.aio.HealthServicer()
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.http: HttpServer | None = None
        self.http_port = 0
        self._monitor: asyncio.Task[None] | None = None
        self._availability = asyncio.Event()
        self._stopped = False

    async def start(self) -> int:
        """Check the schema, start the runner and the server; return the bound port.

        Raises:
            InsecureBind: no auth is configured and the address is not loopback
                (unless ``settings.insecure_dev``); nothing was started.
        """
        check_exposure(self.settings)
        await _check_schema_when_reachable(self.store)
        if self.settings.tls is not None:
            self.settings.tls.configuration()  # unusable TLS files fail before anything starts
        if self.settings.http_address is not None:
            self.http = self._bind_http()  # an unusable HTTP address too
        # Register every contract file so clients can fetch any contract descriptor.
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
            self.sweeper = _sweeper(self.store, self.settings, self.runtime)
            self.sweeper.start()
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
                *self.settings.keepalive.server_options(),
            ],
            # A span per call, continuing the caller's traceparent, and the RPC
            # metrics (each only when this process exports them).
            interceptors=[
                *tracing.server_interceptors(self.runtime.services.telemetry),
            ],
        )
        # Guarded: an undecodable request is INVALID_ARGUMENT with ErrorInfo, never UNKNOWN.
        threads = ThreadService(self.runtime, self.scopes)
        runs = RunService(self.runtime, self.scopes)
        admin = AdminService(self.runtime, self.scopes)
        add_guarded(thread_service_pb2_grpc.add_ThreadServiceServicer_to_server, threads, server)
        add_guarded(run_service_pb2_grpc.add_RunServiceServicer_to_server, runs, server)
        add_guarded(admin_service_pb2_grpc.add_AdminServiceServicer_to_server, admin, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        enable_reflection((*SERVICE_NAMES, health.SERVICE_NAME), server)
        # With TLS, handlers see the peer's certificate in context.auth_context().
        self.port = add_port(server, self.settings.address, self.settings.tls)
        await server.start()
        self.server = server
        if self.http is not None:
            from pai_grpc.server._connect import connect_applications

            self.http.serve(connect_applications(threads, runs, admin))
            self.http_port = await self.http.start()
            log.info(
                "serving pai.v1 over Connect and gRPC-Web on %s (port %d)%s",
                self.settings.http_address,
                self.http_port,
                ", console at /console/" if self.settings.file.http.console else "",
            )
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.store.dialect == "postgresql":
            self.store.engines.on_availability(lambda _available: self._availability.set())
            self._monitor = asyncio.create_task(self._watch_database(), name="database health")
        log.info(
            "serving pai.v1 on %s (port %d, %s)",
            self.settings.address,
            self.port,
            _transport(self.settings),
        )
        return self.port

    def _bind_http(self) -> HttpServer:
        """Bind the HTTP port (ConfigError when the address cannot be bound)."""
        assert self.settings.http_address is not None
        # The HTTP/Connect stack is loaded only by a process that serves it.
        from pai_grpc.server._http import HttpServer

        table = self.settings.file.http
        try:
            return HttpServer(
                self.settings.http_address,
                cors_origins=table.cors_origins,
                console=table.console,
                tls=self.settings.tls,
            )
        except OSError as e:
            raise ConfigError(f"cannot serve HTTP on {self.settings.http_address}: {e}") from e

    async def stop(self, grace: float | None = None) -> None:
        """Drain gracefully: report NOT_SERVING, stop accepting, finish or hand back runs.

        Idempotent: a second call (say, a test harness stopping an app the test
        already drained) returns at once instead of closing things twice.
        """
        if self._stopped:
            return
        self._stopped = True
        grace = self.settings.grace_seconds if grace is None else grace
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        log.info("draining (grace %.1fs)", grace)
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        # Health first, so balancers stop routing here.
        await self.health.enter_graceful_shutdown()
        if self.sweeper is not None:
            await self.sweeper.stop()
        if self.runner is not None:
            # The port stays open while in-flight runs finish: their streams keep
            # flowing, health checks answer NOT_SERVING instead of a refused
            # connection, and new requests are still served (a new run is left
            # runnable for other runners, as this one claims nothing more).
            await self.runner.stop(grace)
        if self.server is not None:
            # Then refuse new calls; calls in flight get what is left of the grace
            # (at least a moment, so finished runs' streams deliver their last events).
            await self.server.stop(max(deadline - loop.time(), min(grace, 1.0)))
        if self.http is not None:
            await self.http.stop(max(deadline - loop.time(), min(grace, 1.0)))
        await self.runtime.services.signals.close()
        await self.store.close()
        log.info("drained; bye")

    async def run_until_signal(self) -> None:
        """Serve until SIGTERM or SIGINT, then drain."""
        await self.start()
        tune_gc()
        await _until_signal()
        await self.stop()
        await _settle()

    async def _watch_database(self) -> None:
        """Keep health in step with the database: NOT_SERVING while it cannot be reached.

        Requests and runs report what they see at once (``on_availability``);
        probes find an outage, and the database's return, without traffic.
        """
        engines = self.store.engines
        serving = True
        while True:
            if engines.available != serving:
                serving = engines.available
                status = (
                    health_pb2.HealthCheckResponse.SERVING
                    if serving
                    else health_pb2.HealthCheckResponse.NOT_SERVING
                )
                for name in ("", *SERVICE_NAMES):
                    await self.health.set(name, status)
                if serving:
                    log.info("health: SERVING (the database is back)")
                else:
                    log.warning("health: NOT_SERVING (the database is unreachable)")
            self._availability.clear()
            interval = PROBE_UP_SECONDS if serving else PROBE_DOWN_SECONDS
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._availability.wait(), interval)
            if not self._availability.is_set():
                with contextlib.suppress(Exception):  # the outcome lands in engines.available
                    await self.store.now()


class RunnerProcess:
    """A runner-only process: claims and executes runs from the shared database."""

    def __init__(
        self,
        settings: Settings,
        agents: AgentRegistry,
        *,
        store: Store | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.settings = settings
        self.store = store or Store.open(settings.database_url)
        self.store.idempotency_ttl = _idempotency_ttl(settings)
        self.runtime = Runtime(self.store, agents, telemetry=telemetry)
        self.runtime.services.bound_memory(
            run_event_buffer_bytes=settings.run_event_buffer_bytes,
            context_cache_bytes=settings.context_cache_bytes,
            events_after_terminal=settings.file.retention.events_after_terminal,
        )
        self.runner = Runner(
            self.runtime.services,
            concurrency=settings.runner_concurrency,
            lease_seconds=settings.lease_seconds,
        )
        self.sweeper = _sweeper(self.store, settings, self.runtime)

    async def start(self) -> None:
        """Check the schema and start claiming (and sweeping)."""
        await _check_schema_when_reachable(self.store)
        await self.runtime.services.signals.start()
        self.runner.start()
        self.sweeper.start()

    async def stop(self, grace: float | None = None) -> None:
        """Finish or hand back in-flight runs, then close."""
        await self.sweeper.stop()
        await self.runner.stop(self.settings.grace_seconds if grace is None else grace)
        await self.runtime.services.signals.close()
        await self.store.close()

    async def run_until_signal(self) -> None:
        """Run until SIGTERM or SIGINT, then drain."""
        await self.start()
        tune_gc()
        await _until_signal()
        await self.stop()
        await _settle()
