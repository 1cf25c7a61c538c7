"""A harness for lifecycle tests: one agent with hooks behind a real gRPC server.

Every lifecycle scenario runs through the public API (Send, StreamRun,
GetRun, ListMessages) against a real store of each backend. ``hooks_mode``
selects where the hooks live: ``in-process``, or ``remote``: the same hook
objects served by the Python plugin SDK on a loopback port and called
through the remote adapter and HookHostService (REM-01).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from pai.v1 import admin_service_pb2_grpc, run_service_pb2, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.domain import LifecycleMessage
from pai_grpc.lifecycle import AgentContract, AgentLifecycle, compose_lifecycle
from pai_grpc.models import LanguageModel, ScriptedModel
from pai_grpc.plugin_sdk import serve_plugin
from pai_grpc.plugins import HookHost, PluginConfig, RemoteLifecycle
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.runtime._records import lifecycle_message_from_record
from pai_grpc.server._scope import DEV_SCOPE
from pai_grpc.testing import InProcessServer, serve_in_process
from pai_grpc.tools import Tool
from storage import RunRecord, Store, ThreadRecord
from tests.runtime.support import TERMINAL, kinds, new_thread, send, transcript

#: Where hooks live (PAI_TEST_HOOK_MODES narrows it, e.g. while debugging one mode).
HOOK_MODES = tuple(os.environ.get("PAI_TEST_HOOK_MODES", "in-process,remote").split(","))
#: Remote hooks get a generous timeout: the scenarios test semantics, not latency.
REMOTE_TIMEOUT = 15.0


@dataclass
class Finished:
    """A run that reached a terminal state, with its event log."""

    run: runs_pb2.Run
    events: list[runs_pb2.RunEvent]

    @property
    def status(self) -> str:
        """e.g. ``completed``."""
        return runs_pb2.RunStatus.Name(self.run.status)[len("RUN_STATUS_") :].lower()

    @property
    def outcome(self) -> str:
        """e.g. ``blocked`` ("" when unset)."""
        name = runs_pb2.RunOutcome.Name(self.run.outcome)
        return "" if name.endswith("UNSPECIFIED") else name[len("RUN_OUTCOME_") :].lower()

    @property
    def kinds(self) -> list[str]:
        """Event kinds, e.g. ``["status:running", "start_step", ...]``."""
        return kinds(self.events)

    @property
    def text(self) -> str:
        """Every streamed text delta, joined."""
        return "".join(
            e.chunk.text_delta.text
            for e in self.events
            if e.WhichOneof("event") == "chunk" and e.chunk.WhichOneof("chunk") == "text_delta"
        )


@dataclass
class Harness:
    """An agent with hooks behind a running server."""

    srv: InProcessServer
    model: LanguageModel
    agent: Agent

    @property
    def admin(self) -> admin_service_pb2_grpc.AdminServiceStub:
        """An AdminService stub (dev mode: no credential needed)."""
        return admin_service_pb2_grpc.AdminServiceStub(self.srv.channel)

    @property
    def store(self) -> Store:
        """The server's store (for assertions on durable state)."""
        return self.srv.store

    async def thread(self, **kw: Any) -> str:
        """Create a thread; return its id."""
        return await new_thread(self.srv, **kw)

    async def send(self, thread_id: str, text: str, **kw: Any) -> Any:
        """Send a user message; return the run handle."""
        return await send(self.srv, thread_id, text, **kw)

    async def finish(self, run_id: str, *, timeout: float = 30) -> Finished:
        """Stream the run to its end (terminal or waiting) and read it back."""
        events: list[runs_pb2.RunEvent] = []
        async for response in self.srv.runs.StreamRun(
            run_service_pb2.StreamRunRequest(run_id=run_id), timeout=timeout
        ):
            events.append(response.event)
            event = response.event
            if event.WhichOneof("event") != "status":
                continue
            if event.status.status in TERMINAL:
                break
            if event.status.status == runs_pb2.RUN_STATUS_WAITING:
                # Stop at a wait that still holds (the log may replay an earlier one).
                now = await self.srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=run_id))
                if now.run.status == runs_pb2.RUN_STATUS_WAITING:
                    break
        run = (await self.srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=run_id))).run
        return Finished(run=run, events=events)

    async def ask(self, text: str, thread_id: str | None = None) -> tuple[str, Finished]:
        """Send ``text`` (to a new thread unless given) and wait for the run to end."""
        thread_id = thread_id or await self.thread()
        handle = await self.send(thread_id, text)
        return thread_id, await self.finish(handle.run_id)

    async def transcript(self, thread_id: str) -> list[tuple[str, str]]:
        """(role, text) of each transcript message."""
        return await transcript(self.srv, thread_id)

    async def messages(self, thread_id: str, view: str = "all") -> list[LifecycleMessage]:
        """Every stored message as a lifecycle message (visibility and private metadata)."""
        out: list[LifecycleMessage] = []
        token = ""
        while True:
            page = await self.store.list_messages(
                DEV_SCOPE,
                thread_id,
                view=view,
                limit=1000,
                page_token=token,  # type: ignore[arg-type]
            )
            out += [lifecycle_message_from_record(m) for m in page.items]
            token = page.next_page_token
            if not token:
                return out

    async def thread_record(self, thread_id: str) -> ThreadRecord:
        """The stored thread (including private metadata)."""
        record = await self.store.get_thread(DEV_SCOPE, thread_id)
        assert record is not None
        return record

    async def run_record(self, run_id: str) -> RunRecord:
        """The stored run (including private metadata)."""
        record = await self.store.get_run(DEV_SCOPE, run_id)
        assert record is not None
        return record

    async def history_idle(self) -> None:
        """Wait until every history_rewritten delivery ran."""
        await self.srv.app.runtime.services.history.idle()


@asynccontextmanager
async def harness(
    database_url: str,
    hooks: AgentLifecycle | Sequence[AgentLifecycle] | None,
    *,
    model: LanguageModel | None = None,
    tools: Sequence[Tool] = (),
    contract: AgentContract | None = None,
    mode: str = "in-process",
    models: Sequence[LanguageModel] = (),
    **agent_options: Any,
) -> AsyncIterator[Harness]:
    """Serve one agent whose lifecycle is ``hooks`` (composed left to right).

    ``models`` are further models hooks may route to (remote hooks name them
    by ``provider:model_id``).
    """
    if mode not in ("in-process", "remote"):
        raise ValueError(f"unknown hooks mode {mode!r}")
    if hooks is not None and not isinstance(hooks, AgentLifecycle):
        hooks = compose_lifecycle(*hooks)
    model = model or ScriptedModel(["hello"])
    async with contextlib.AsyncExitStack() as stack:
        lifecycle = hooks
        if hooks is not None and mode == "remote":
            plugin = await serve_plugin(hooks)
            stack.push_async_callback(plugin.stop, 0.5)
            host = HookHost()
            stack.push_async_callback(host.close)
            remote = RemoteLifecycle(
                PluginConfig(address=plugin.address, timeout=REMOTE_TIMEOUT), host
            )
            remote.register_models([model, *models])
            await remote.connect()
            stack.push_async_callback(remote.close)
            lifecycle = remote
        agent = Agent(
            name=DEFAULT_AGENT,
            model=model,
            tools=list(tools),
            lifecycle=lifecycle,
            contract=contract or AgentContract(),
            **agent_options,
        )
        srv = await stack.enter_async_context(
            serve_in_process(database_url, agents=AgentRegistry([agent]))
        )
        yield Harness(srv=srv, model=model, agent=agent)


__all__ = ["HOOK_MODES", "TERMINAL", "Finished", "Harness", "harness", "tpb"]
