"""Runners: claim runnable runs from storage under a lease and execute them.

Execution never depends on a client connection (RT-03/RT-04): a run is
picked up from durable state by whichever runner claims it first, in this
process or another one sharing the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket

from pai_grpc.domain import new_id
from pai_grpc.runtime._agents import AgentRegistry
from pai_grpc.runtime._execution import Execution
from pai_grpc.streams import Broker
from storage import Store

log = logging.getLogger("pai_grpc.runner")


def default_owner() -> str:
    """A runner identity unique across hosts and processes."""
    return f"{socket.gethostname()}:{os.getpid()}:{new_id('run')[-8:]}"


class Runner:
    """Claims runs and executes up to ``concurrency`` of them at once."""

    def __init__(
        self,
        *,
        store: Store,
        broker: Broker,
        agents: AgentRegistry,
        owner: str | None = None,
        concurrency: int = 32,
        lease_seconds: float = 30.0,
        poll_interval: float = 1.0,
    ) -> None:
        self._store = store
        self._broker = broker
        self._agents = agents
        self.owner = owner or default_owner()
        self._concurrency = concurrency
        self._lease_seconds = lease_seconds
        self._poll_interval = poll_interval
        self._wake = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._executions: dict[asyncio.Task[None], Execution] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def active(self) -> int:
        """Executions in flight."""
        return len(self._executions)

    def start(self) -> None:
        """Start claiming."""
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._loop(), name=f"runner {self.owner}")
            log.info("runner %s started (concurrency %d)", self.owner, self._concurrency)

    def wake(self) -> None:
        """New work may be runnable: claim now instead of at the next poll."""
        self._wake.set()

    async def _loop(self) -> None:
        while not self._stopping:
            claimed_any = False
            while self.active < self._concurrency and not self._stopping:
                try:
                    claimed = await self._store.claim_run(
                        self.owner, lease_seconds=self._lease_seconds
                    )
                except Exception:
                    log.exception("runner %s: claim failed; retrying", self.owner)
                    await asyncio.sleep(self._poll_interval)
                    break
                if claimed is None:
                    break
                claimed_any = True
                execution = Execution(
                    store=self._store,
                    broker=self._broker,
                    agent=self._agents.get(
                        await self._agent_of(claimed.run.thread_id, claimed.run.scope)
                    ),
                    claimed=claimed,
                    lease_seconds=self._lease_seconds,
                )
                task = asyncio.create_task(execution.run(), name=f"run {claimed.run.id}")
                self._executions[task] = execution
                task.add_done_callback(self._finished)
            if claimed_any:
                continue
            self._wake.clear()
            self._slot_freed.clear()
            waits = [asyncio.ensure_future(self._wake.wait())]
            if self.active >= self._concurrency:
                waits.append(asyncio.ensure_future(self._slot_freed.wait()))
            _, pending = await asyncio.wait(
                waits, timeout=self._poll_interval, return_when=asyncio.FIRST_COMPLETED
            )
            for w in pending:
                w.cancel()

    async def _agent_of(self, thread_id: str, scope: str) -> str:
        thread = await self._store.get_thread(scope, thread_id)
        return thread.agent if thread else ""

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._executions.pop(task, None)
        self._slot_freed.set()
        self._wake.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("execution task crashed", exc_info=task.exception())

    async def stop(self, grace: float = 10.0) -> None:
        """Stop claiming; let executions finish for ``grace`` seconds, then hand them back.

        Executions still running after the grace period are cancelled and
        release their leases, so another runner resumes them immediately.
        """
        self._stopping = True
        self._wake.set()
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        tasks = list(self._executions)
        if tasks:
            log.info("runner %s: draining %d execution(s)", self.owner, len(tasks))
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
                log.info("runner %s: handed back %d run(s)", self.owner, len(pending))
        log.info("runner %s stopped", self.owner)
