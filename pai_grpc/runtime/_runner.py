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
from pai_grpc.runtime._executor import RunExecutor
from pai_grpc.runtime._services import Services
from storage import ClaimedRun, Unavailable, patient

log = logging.getLogger("pai_grpc.runner")

AGENT_CACHE_SIZE = 10_000


def default_owner() -> str:
    """A runner identity unique across hosts and processes."""
    return f"{socket.gethostname()}:{os.getpid()}:{new_id('run')[-8:]}"


async def _patiently(execution: RunExecutor) -> None:
    """Run an execution that waits out database outages (still under its lease).

    Failing instead would leave the run stalled until its lease expired; waiting
    lets it carry on the moment the database is back (see :func:`storage.patient`).
    """
    with patient():
        await execution.run()


class Runner:
    """Claims runs and executes up to ``concurrency`` of them at once."""

    def __init__(
        self,
        services: Services,
        *,
        owner: str | None = None,
        concurrency: int = 32,
        lease_seconds: float = 30.0,
        poll_interval: float = 1.0,
    ) -> None:
        self._services = services
        self.owner = owner or default_owner()
        self._concurrency = concurrency
        self._lease_seconds = lease_seconds
        self._poll_interval = poll_interval
        self._wake = asyncio.Event()
        self._executions: dict[asyncio.Task[None], RunExecutor] = {}
        self._by_run: dict[str, RunExecutor] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._agent_cache: dict[str, str] = {}
        self._reserved = 0
        #: Whether runnable work may be left over (a claim filled every free slot).
        self._backlog = False
        services.signals.on_runnable(self.wake)
        services.signals.on_cancel(self._cancel_requested)
        services.handoff = self

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

    def cancel(self, run_id: str, reason: str = "cancelled") -> bool:
        """Cancel ``run_id`` if this runner executes it; return whether it did."""
        execution = self._by_run.get(run_id)
        if execution is None:
            return False
        execution.cancel(reason)
        return True

    def _cancel_requested(self, run_id: str) -> None:
        self.cancel(run_id)

    async def _loop(self) -> None:
        store = self._services.store
        while not self._stopping:
            self._wake.clear()
            free = self._concurrency - self.active - self._reserved
            if free > 0:
                # Reserve the batch before awaiting the database: Sends hand runs
                # into the same slots meanwhile, and together they must never
                # exceed the concurrency. Unused reservations are given back.
                batch = min(free, 8)
                self._reserved += batch
                try:
                    claims = await store.claim_runs(
                        self.owner, lease_seconds=self._lease_seconds, limit=batch
                    )
                except Unavailable as e:
                    self._release(batch)
                    log.warning("runner %s: cannot claim (%s); retrying", self.owner, e)
                    await asyncio.sleep(self._poll_interval)
                    continue
                except Exception:
                    self._release(batch)
                    log.exception("runner %s: claim failed; retrying", self.owner)
                    await asyncio.sleep(self._poll_interval)
                    continue
                except BaseException:
                    self._release(batch)
                    raise
                self._release(batch - len(claims))
                for claimed in claims:
                    await self._launch(claimed)
                # A full batch means more may be waiting: claim again now, and again
                # whenever a slot frees up, until a claim comes back short.
                self._backlog = len(claims) == batch
                if self._backlog:
                    continue
            else:
                self._backlog = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll_interval)

    def _release(self, slots: int) -> None:
        self._reserved = max(0, self._reserved - slots)

    async def _launch(self, claimed: ClaimedRun, agent_name: str | None = None) -> None:
        """Start executing a claimed run in the slot reserved for it.

        The slot stays reserved across the agent lookup (an await) and only
        turns into an active execution once the task exists, so no other claim
        or hand-off can take it in between. A hand-off names the thread's agent
        (its commit returned the thread), so no lookup is needed.
        """
        try:
            if agent_name is None:
                # The run is leased already: wait out an outage rather than strand it.
                with patient():
                    agent_name = await self._agent_of(claimed)
            agent = self._services.agents.get(agent_name)
            execution = RunExecutor(
                self._services, agent, claimed, lease_seconds=self._lease_seconds
            )
            task = asyncio.create_task(_patiently(execution), name=f"run {claimed.run.id}")
            self._executions[task] = execution
            self._by_run[claimed.run.id] = execution
            task.add_done_callback(self._finished)
            self._count_claim(claimed, agent.name)
        except Exception:
            # Hand the run back so another claim (here or elsewhere) resumes it.
            log.exception("runner %s: could not start run %s", self.owner, claimed.run.id)
            with contextlib.suppress(Exception):
                await self._services.store.release(claimed.lease)
        finally:
            self._release(1)

    def _count_claim(self, claimed: ClaimedRun, agent: str) -> None:
        metrics = self._services.metrics
        metrics.active_runs.add(1)
        run = claimed.run
        if run.attempts > 1:
            # A resumed run (its pending actions answered) is claimed again by design.
            if run.operation != "resume":
                metrics.lease_recoveries.add(1)
            return
        metrics.runs_started.add(1, {"agent": agent})
        if run.execution_started_at is not None:
            # Both instants come from the database's clock.
            waited = (run.execution_started_at - run.created_at).total_seconds()
            metrics.run_queue.record(max(waited, 0.0), {"agent": agent})

    # ---- direct hand-off (Send on an idle thread) ---------------------------

    def reserve(self) -> str | None:
        """Reserve a slot for a run committed already leased to this runner."""
        if self._stopping or self.active + self._reserved >= self._concurrency:
            return None
        self._reserved += 1
        return self.owner

    def unreserve(self) -> None:
        """Give back a reservation whose commit did not happen."""
        self._reserved = max(0, self._reserved - 1)

    async def adopt(self, claimed: ClaimedRun, agent: str) -> None:
        """Execute a run whose lease was written with its creation (in its reserved slot)."""
        await self._launch(claimed, agent)

    async def _agent_of(self, claimed: ClaimedRun) -> str:
        # A thread's agent never changes, so one lookup per thread is enough.
        thread_id = claimed.run.thread_id
        agent = self._agent_cache.get(thread_id)
        if agent is None:
            thread = await self._services.store.get_thread(claimed.run.scope, thread_id)
            agent = thread.agent if thread else ""
            if len(self._agent_cache) >= AGENT_CACHE_SIZE:
                self._agent_cache.pop(next(iter(self._agent_cache)))
            self._agent_cache[thread_id] = agent
        return agent

    def _finished(self, task: asyncio.Task[None]) -> None:
        execution = self._executions.pop(task, None)
        if execution is not None:
            self._services.metrics.active_runs.add(-1)
        if execution is not None and self._by_run.get(execution.run_id) is execution:
            del self._by_run[execution.run_id]
        if self._backlog:
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
            # Let the loop finish on its own: a claim in flight must become an
            # execution (and be drained) rather than be abandoned with its lease.
            with contextlib.suppress(Exception):
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
