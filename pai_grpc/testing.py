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
from pai_grpc.config import Settings
from pai_grpc.models import LanguageModel, OfflineModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import App
from pai_grpc.telemetry import Telemetry
from storage import Store, upgrade


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
    telemetry: Telemetry | None = None,
    **settings: Any,
) -> AsyncIterator[InProcessServer]:
    """Migrate, start an app on ``127.0.0.1:0``, and yield it with client stubs."""
    if agents is None:
        agents = AgentRegistry(
            [Agent(name=DEFAULT_AGENT, model=model or OfflineModel(chunk_delay=0))]
        )
    store = await migrated_store(database_url)
    app = App(
        Settings(
            address="127.0.0.1:0",
            database_url=database_url,
            embedded_runner=embedded_runner,
            **settings,
        ),
        agents,
        store=store,
        telemetry=telemetry,
    )
    await app.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{app.port}")
    try:
        yield InProcessServer(
            app=app,
            channel=channel,
            threads=thread_service_pb2_grpc.ThreadServiceStub(channel),
            runs=run_service_pb2_grpc.RunServiceStub(channel),
        )
    finally:
        await channel.close()
        await app.stop(grace=1.0)
