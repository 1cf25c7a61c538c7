"""The shared services of one process's runtime."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from pai_grpc.runtime._agents import AgentRegistry
from pai_grpc.runtime._context_cache import ContextCache
from pai_grpc.runtime._history import HistoryRewrites
from pai_grpc.runtime._quotas import ScopeQuotas
from pai_grpc.runtime._signals import Signals
from pai_grpc.runtime._validate import Limits
from pai_grpc.streams import ENDED_EVENTS_SECONDS, Broker, ThreadHint, ThreadHub
from pai_grpc.telemetry import Metrics, Telemetry, metrics_for
from storage import ClaimedRun, CommitResult, Store, WriteSet


class Handoff(Protocol):
    """A local runner that can take a run in the same write that creates it."""

    owner: str

    def reserve(self) -> str | None:
        """Reserve a slot; return the lease owner to write, or ``None`` when full."""
        ...

    def unreserve(self) -> None:
        """Give back a reservation whose commit did not happen."""
        ...

    async def adopt(self, claimed: ClaimedRun, agent: str) -> None:
        """Execute a run (of a thread of ``agent``) committed already leased to this runner."""
        ...


@dataclass
class Services:
    """Storage, fan-out and wake-ups shared by mutations, readers and runners."""

    store: Store
    agents: AgentRegistry
    broker: Broker
    threads: ThreadHub
    signals: Signals
    limits: Limits
    contexts: ContextCache
    history: HistoryRewrites
    #: The embedded runner, when this process has one (Send hands runs to it directly).
    handoff: Handoff | None = None
    lease_seconds: float = 30.0
    #: Where traces and metrics go (a no-op unless the process exports them).
    telemetry: Telemetry = field(default_factory=Telemetry.noop)
    #: Per-scope limits (none unless the process sets them: see ``[limits]``).
    quotas: ScopeQuotas = field(default_factory=ScopeQuotas)

    @classmethod
    def create(
        cls,
        store: Store,
        agents: AgentRegistry,
        limits: Limits | None = None,
        telemetry: Telemetry | None = None,
    ) -> Services:
        """Services with fresh in-process hubs."""
        broker, threads = Broker(), ThreadHub()
        if telemetry is not None:
            store.observer = metrics_for(telemetry).storage_observer(store.dialect)
        contexts = ContextCache(store)
        # What this process commits extends its cached contexts without a read;
        # another process's change to a thread ends the freshness of a primed head.
        store.commit_listeners.append(contexts.committed)
        # A run's events replayed from memory must be its log: a sweep here
        # that compacted logs, or maintenance SQL, ends that (a sweep elsewhere
        # cannot compact a run this young, see bound_memory).
        store.log_rewrite_listeners.append(broker.drop_ended_events)
        signals = Signals(store, broker, threads)
        signals.on_remote_thread(contexts.changed)
        return cls(
            store=store,
            agents=agents,
            broker=broker,
            threads=threads,
            signals=signals,
            limits=limits or Limits(),
            contexts=contexts,
            history=HistoryRewrites(),
            telemetry=telemetry or Telemetry.noop(),
        )

    @property
    def metrics(self) -> Metrics:
        """The metric instruments of :attr:`telemetry`."""
        return metrics_for(self.telemetry)

    def bound_memory(
        self,
        *,
        run_event_buffer_bytes: int,
        context_cache_bytes: int,
        events_after_terminal: float | None = None,
    ) -> None:
        """Set the memory budgets: live events per executing run, and the context cache.

        ``events_after_terminal``: seconds after which retention compacts an
        ended run's log (None: never). A run that ended here replays its
        events from memory for at most half of that, so a reader never gets
        deltas its log no longer holds.
        """
        self.broker.window_bytes = run_event_buffer_bytes
        self.contexts.max_bytes = context_cache_bytes
        if events_after_terminal is not None:
            self.broker.ended_events_seconds = min(ENDED_EVENTS_SECONDS, events_after_terminal / 2)

    async def commit(
        self,
        ws: WriteSet,
        *,
        hint: ThreadHint | None = None,
        runnable: bool = False,
        runs: tuple[str, ...] = (),
    ) -> CommitResult:
        """Commit a write set and deliver its wake-ups (here at once, elsewhere by NOTIFY)."""
        if hint is not None:
            ws.notify.append(self.signals.note_thread(hint))
        if runnable:
            ws.notify.append(self.signals.note_runnable())
        for run_id in runs:
            ws.notify.append(self.signals.note_run(run_id))
        result = await self.store.commit(ws)
        self.after_commit(hint=hint, runnable=runnable, runs=runs)
        return result

    def after_commit(
        self, *, hint: ThreadHint | None = None, runnable: bool = False, runs: tuple[str, ...] = ()
    ) -> None:
        """Fire the local side of a commit's wake-ups."""
        if hint is not None:
            self.signals.fire_thread(hint)
        for run_id in runs:
            self.broker.notify(run_id)
        if runnable:
            self.signals.fire_runnable()
