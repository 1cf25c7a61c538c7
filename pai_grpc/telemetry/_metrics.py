"""The service's metric instruments, created once per :class:`Telemetry`.

Labels are bounded by configuration (agent, model, tool, plugin names) or by
small closed sets (status, direction, phase); never by thread or run ids.
Free-form values (a canceller's reason, a tool name a model invented) are
folded into ``other`` / ``_unknown`` so a client cannot grow the series count.

Names follow OpenTelemetry; the Prometheus exporter turns ``pai.runs.started``
(a counter) into ``pai_runs_started_total`` and ``pai.run.queue`` (a histogram
in ``s``) into ``pai_run_queue_seconds``: :data:`PROMETHEUS_NAMES` lists what
a scrape shows.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics

from pai_grpc.telemetry._core import INSTRUMENTATION_NAME, Telemetry

__all__ = [
    "DURATION_BUCKETS",
    "PROMETHEUS_NAMES",
    "RUN_DURATION_BUCKETS",
    "Count",
    "Metrics",
    "RunLabels",
    "bounded_reason",
    "current_run",
    "metrics_for",
]

#: Buckets (seconds) of latencies: RPCs, hooks, commits, queue wait, first chunk.
DURATION_BUCKETS: Sequence[float] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
#: Buckets (seconds) of whole runs, which may wait for tools for minutes.
RUN_DURATION_BUCKETS: Sequence[float] = (
    0.1,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
)

#: Every metric family a Prometheus scrape of the service shows (histograms add
#: ``_bucket``, ``_sum`` and ``_count`` series).
PROMETHEUS_NAMES: frozenset[str] = frozenset(
    {
        "pai_runs_started_total",
        "pai_runs_finished_total",
        "pai_run_queue_seconds",
        "pai_time_to_first_chunk_seconds",
        "pai_run_duration_seconds",
        "pai_model_tokens_total",
        "pai_tool_calls_total",
        "pai_hook_duration_seconds",
        "pai_hook_failures_total",
        "pai_lease_recoveries_total",
        "pai_active_runs",
        "pai_active_streams",
        "pai_storage_commit_seconds",
        "pai_storage_conflicts_total",
        "pai_retention_removed_total",
        "rpc_server_duration_seconds",
    }
)

_REASON = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


def bounded_reason(reason: str | None) -> str:
    """A reason fit for a label: an UPPER_SNAKE code as is, free text as ``other``.

    Error reasons (``MAX_STEPS``, ``HOOK_FAILED``) are a closed vocabulary; a
    canceller's reason or a hook's free-form one is not, and must not become a
    label value.
    """
    if not reason:
        return ""
    if reason == "cancelled":  # the runtime's own reason when a canceller gave none
        return reason
    return reason if _REASON.match(reason) else "other"


class Gauge:
    """A process-wide up-down count, read when the metrics are collected.

    Two per run and two per stream: an observable instrument over a plain
    integer costs an addition per change, where a synchronous up-down counter
    costs an SDK measurement (attribute hashing and a lock) each time.
    """

    def __init__(self, meter: metrics.Meter, name: str, *, unit: str, description: str) -> None:
        self.value = 0
        meter.create_observable_up_down_counter(
            name, callbacks=[self._observe], unit=unit, description=description
        )

    def add(self, amount: int) -> None:
        """Change the count by ``amount``."""
        self.value += amount

    def _observe(self, _options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        return [metrics.Observation(self.value)]


def _count_nothing(amount: int, attributes: Mapping[str, Any] | None = None) -> None:
    """What :meth:`Count.add` does when the meter records nothing."""


class Count:
    """A process-wide monotonic count per label set, read when the metrics are collected.

    Takes the place of a synchronous counter (same ``add(amount, attributes)``)
    and is exported the same way (a cumulative monotonic sum; Prometheus
    ``<name>_total``). A synchronous counter costs an SDK measurement per
    ``add`` (a measurement object, attribute validation and hashing, a lock):
    on a one-step run four of them were among the largest costs of having
    metrics on. Here an ``add`` is a dictionary update; the SDK sees one
    observation per label set per collection.
    """

    def __init__(self, meter: metrics.Meter, name: str, *, unit: str, description: str) -> None:
        #: label set -> (its attributes, its count).
        self._counts: dict[frozenset[tuple[str, Any]], list[Any]] = {}
        # Commits (conflicts) count on the storage thread, runs on the event loop.
        self._lock = threading.Lock()
        if isinstance(meter, metrics.NoOpMeter):
            self.add = _count_nothing  # type: ignore[method-assign]  # telemetry off: free
            return
        meter.create_observable_counter(
            name, callbacks=[self._observe], unit=unit, description=description
        )

    def add(self, amount: int, attributes: Mapping[str, Any] | None = None) -> None:
        """Count ``amount`` more for the label set ``attributes``."""
        key = frozenset(attributes.items()) if attributes else frozenset()
        with self._lock:
            entry = self._counts.get(key)
            if entry is None:
                self._counts[key] = [dict(attributes or {}), amount]
            else:
                entry[1] += amount

    def _observe(self, _options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        with self._lock:
            return [
                metrics.Observation(count, attributes)
                for attributes, count in self._counts.values()
            ]


class Metrics:
    """The instruments of one meter (no-ops when the meter provider is)."""

    def __init__(self, meter: metrics.Meter) -> None:
        def seconds(name: str, description: str, buckets: Sequence[float]) -> metrics.Histogram:
            # Advisory buckets: the SDK's default ones (0..10000) suit milliseconds.
            return meter.create_histogram(
                name,
                unit="s",
                description=description,
                explicit_bucket_boundaries_advisory=buckets,
            )

        self.runs_started = Count(
            meter,
            "pai.runs.started",
            unit="{run}",
            description="Runs claimed for their first execution.",
        )
        self.runs_finished = Count(
            meter,
            "pai.runs.finished",
            unit="{run}",
            description="Runs that reached a terminal status, by status and reason.",
        )
        self.run_queue = seconds(
            "pai.run.queue", "From a run's creation to its first claim.", DURATION_BUCKETS
        )
        self.time_to_first_chunk = seconds(
            "pai.time_to_first_chunk",
            "From a run's creation to the first chunk its model streamed.",
            DURATION_BUCKETS,
        )
        self.run_duration = seconds(
            "pai.run.duration",
            "From a run's first claim to its terminal status.",
            RUN_DURATION_BUCKETS,
        )
        self.model_tokens = Count(
            meter, "pai.model.tokens", unit="{token}", description="Tokens the model reported."
        )
        self.tool_calls = Count(
            meter, "pai.tool.calls", unit="{call}", description="Tool calls decided, by outcome."
        )
        self.hook_duration = seconds(
            "pai.hook.duration", "Time spent in one lifecycle hook call.", DURATION_BUCKETS
        )
        self.hook_failures = Count(
            meter,
            "pai.hook.failures",
            unit="{failure}",
            description="Lifecycle hook calls that failed.",
        )
        self.lease_recoveries = Count(
            meter,
            "pai.lease.recoveries",
            unit="{run}",
            description="Runs claimed again after an execution ended without finishing them.",
        )
        self.active_runs = Gauge(
            meter, "pai.active_runs", unit="{run}", description="Runs executing in this process."
        )
        self.active_streams = Gauge(
            meter,
            "pai.active_streams",
            unit="{stream}",
            description="Open StreamRun, SendAndStream and WatchThread calls.",
        )
        self.storage_commit = seconds(
            "pai.storage.commit", "Time to commit one write set.", DURATION_BUCKETS
        )
        self.storage_conflicts = Count(
            meter,
            "pai.storage.conflicts",
            unit="{conflict}",
            description="Write sets refused by a version guard (another writer was first).",
        )
        self.retention_removed = Count(
            meter,
            "pai.retention.removed",
            unit="{row}",
            description="Rows the sweeper removed, by kind (events, idempotency_keys, threads).",
        )
        self.rpc_server_duration = seconds(
            "rpc.server.duration", "Duration of inbound RPCs.", DURATION_BUCKETS
        )

    def storage_observer(self, backend: str) -> StorageObserver:
        """A callback for :attr:`storage.Store.observer` labelled with ``backend``."""
        return StorageObserver(self, backend)


class StorageObserver:
    """Records each commit's duration, and its conflicts, for a store."""

    def __init__(self, metrics_: Metrics, backend: str) -> None:
        self._metrics = metrics_
        self._attributes = {"backend": backend}

    def __call__(self, seconds: float, conflict: bool) -> None:
        """Record one commit (``conflict``: refused by a version guard)."""
        self._metrics.storage_commit.record(seconds, self._attributes)
        if conflict:
            self._metrics.storage_conflicts.add(1, self._attributes)


_instances: weakref.WeakKeyDictionary[metrics.MeterProvider, Metrics] = weakref.WeakKeyDictionary()


def metrics_for(telemetry: Telemetry) -> Metrics:
    """The instruments of ``telemetry``'s meter provider (created on first use)."""
    provider = telemetry.meter_provider
    try:
        return _instances[provider]
    except KeyError:
        created = Metrics(provider.get_meter(INSTRUMENTATION_NAME))
        _instances[provider] = created
        return created
    except TypeError:  # a provider that cannot be weakly referenced: no caching
        return Metrics(provider.get_meter(INSTRUMENTATION_NAME))


@dataclass(frozen=True)
class RunLabels:
    """What the task executing a run knows about it, for metrics and log lines."""

    run_id: str
    thread_id: str
    agent: str
    metrics: Metrics


#: The run the current task executes (None outside executions).
current_run: ContextVar[RunLabels | None] = ContextVar("pai_current_run", default=None)
