"""Per-scope quotas: active runs (counted in the database) and a Send rate (per process).

The active-run quota is enforced by the storage provider in the transaction
that inserts the run (:attr:`storage.WriteSet.max_active_runs`), so it holds
across every API process sharing the database. The Send rate is a token
bucket per scope kept in this process's memory: with N API replicas a scope
may send N times the configured rate in total.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pai_grpc.errors import ResourceExhausted
from storage import ActiveRunLimit

#: The back-off suggested when a scope holds its quota of active runs: runs
#: usually end within seconds, and no single moment is known when one will.
ACTIVE_RUNS_RETRY_SECONDS = 2.0
#: Buckets kept before full ones (indistinguishable from absent) are dropped.
_PRUNE_AT = 4096


@dataclass
class _Bucket:
    tokens: float
    stamp: float


@dataclass
class ScopeQuotas:
    """The limits one scope lives under; 0 disables a limit.

    Attributes:
        max_active_runs: Queued, running and waiting runs a scope may hold.
        sends_per_second: Sustained Send rate per scope in this process.
        send_burst: Sends a scope may make at once after being quiet (0: the
            rate rounded up, at least 1).
        clock: Monotonic seconds (replaceable so a test can step time).
    """

    max_active_runs: int = 0
    sends_per_second: float = 0.0
    send_burst: int = 0
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, _Bucket] = field(default_factory=dict, repr=False)

    @property
    def burst(self) -> float:
        """The bucket's capacity."""
        return float(self.send_burst or max(1, math.ceil(self.sends_per_second)))

    def take_send(self, scope: str) -> None:
        """Spend one Send token of ``scope``, or raise RESOURCE_EXHAUSTED with the wait."""
        rate = self.sends_per_second
        if rate <= 0:
            return
        now = self.clock()
        capacity = self.burst
        bucket = self._buckets.get(scope)
        if bucket is None:
            if len(self._buckets) >= _PRUNE_AT:
                self._prune(now)
            bucket = self._buckets[scope] = _Bucket(capacity, now)
        level = min(capacity, bucket.tokens + (now - bucket.stamp) * rate)
        bucket.stamp = now
        if level >= 1.0:
            bucket.tokens = level - 1.0
            return
        bucket.tokens = level
        raise ResourceExhausted(
            f"scope {scope!r} sends faster than {rate:g} per second (burst {capacity:g}); "
            "retry after the suggested delay",
            reason="SEND_RATE_EXCEEDED",
            metadata={"sends_per_second": f"{rate:g}", "send_burst": f"{capacity:g}"},
            retry_after=(1.0 - level) / rate,
        )

    def _prune(self, now: float) -> None:
        rate, capacity = self.sends_per_second, self.burst
        for scope, bucket in list(self._buckets.items()):
            if bucket.tokens + (now - bucket.stamp) * rate >= capacity:
                del self._buckets[scope]

    @staticmethod
    def active_runs_error(err: ActiveRunLimit) -> ResourceExhausted:
        """The client-facing error for a refused run (the storage check's outcome)."""
        return ResourceExhausted(
            f"scope {err.scope!r} already has {err.active} active runs "
            f"(limit {err.limit}); retry when one ends",
            reason="TOO_MANY_ACTIVE_RUNS",
            metadata={"max_active_runs_per_scope": str(err.limit), "active_runs": str(err.active)},
            retry_after=ACTIVE_RUNS_RETRY_SECONDS,
        )


__all__ = ["ACTIVE_RUNS_RETRY_SECONDS", "ScopeQuotas"]
