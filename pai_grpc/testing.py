"""Test support shipped with the package: an in-process server on a loopback port.

Use it from any test suite (ours or an application's)::

    async with serve_in_process(database_url, model=ScriptedModel(["hi"])) as srv:
        thread = await srv.threads.CreateThread(CreateThreadRequest())
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc

from pai.v1 import run_service_pb2_grpc, thread_service_pb2_grpc
from pai_grpc._wire import ClientTls, channel
from pai_grpc.config import Settings
from pai_grpc.models import LanguageModel, OfflineModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import App
from pai_grpc.telemetry import Telemetry
from storage import Store, upgrade

#: The channel option that gives a channel subchannels of its own.
LOCAL_SUBCHANNELS = ("grpc.use_local_subchannel_pool", 1)


@dataclass
class InProcessServer:
    """A running app with a client channel and stubs."""

    app: App
    channel: grpc.aio.Channel
    threads: thread_service_pb2_grpc.ThreadServiceStub
    runs: run_service_pb2_grpc.RunServiceStub

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.app.port}"

    @property
    def store(self) -> Store:
        """The app's storage provider (for assertions on durable state)."""
        return self.app.store


async def migrated_store(database_url: str) -> Store:
    """A provider for ``database_url`` with the schema at head."""
    store = Store.open(database_url)
    await upgrade(store)
    return store


@asynccontextmanager
async def serve_in_process(
    database_url: str,
    *,
    model: LanguageModel | None = None,
    agents: AgentRegistry | None = None,
    embedded_runner: bool = True,
    client_tls: ClientTls | None = None,
    telemetry: Telemetry | None = None,
    address: str = "127.0.0.1:0",
    **settings: Any,
) -> AsyncIterator[InProcessServer]:
    """Migrate, start an app on ``address`` (a free loopback port), and yield it with client stubs.

    ``settings`` are :class:`~pai_grpc.config.Settings` fields (``tls=ServerTls(...)``
    serves TLS); ``client_tls`` secures the stubs' channel. ``telemetry`` is the
    app's (say, an SDK tracer provider with an in-memory exporter, to assert on
    its spans).
    """
    if agents is None:
        agents = AgentRegistry(
            [Agent(name=DEFAULT_AGENT, model=model or OfflineModel(chunk_delay=0))]
        )
    store = await migrated_store(database_url)
    app = App(
        Settings(
            address=address,
            database_url=database_url,
            embedded_runner=embedded_runner,
            **settings,
        ),
        agents,
        store=store,
        telemetry=telemetry,
    )
    await app.start()
    # Its own subchannels: grpc shares them between a process's channels to the
    # same target, and a channel left open to a server that stopped keeps its
    # subchannel backing off. A server that then got the same port was
    # refused to these stubs until the backoff ended (seen in CI).
    api = channel(f"127.0.0.1:{app.port}", client_tls, options=[LOCAL_SUBCHANNELS])
    try:
        yield InProcessServer(
            app=app,
            channel=api,
            threads=thread_service_pb2_grpc.ThreadServiceStub(api),
            runs=run_service_pb2_grpc.RunServiceStub(api),
        )
    finally:
        await api.close()
        await app.stop(grace=1.0)
