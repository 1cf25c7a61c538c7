"""The sweeper: retention passes in runner processes, one at a time across them.

Every runner process (the embedded runner of ``serve`` too) runs one. Each
pass is :meth:`storage.Store.sweep`: bounded batches in short transactions,
under a lock that lets one sweeper work at a time on PostgreSQL (the others
skip the pass), so adding runners never multiplies the retention load.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from pai_grpc.runtime._records import compaction_marker_body
from pai_grpc.telemetry import Metrics
from storage import RetentionPolicy, Store, SweepReport

log = logging.getLogger("pai_grpc.sweeper")


class Sweeper:
    """Runs a retention pass every ``interval`` seconds until stopped."""

    def __init__(
        self,
        store: Store,
        policy: RetentionPolicy,
        *,
        interval: float,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._policy = policy
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        #: The last pass's report (None before the first).
        self.last: SweepReport | None = None

    def start(self) -> None:
        """Start sweeping (the first pass after one interval, not during start-up)."""
        if self._task is None and self._interval > 0:
            self._task = asyncio.create_task(self._loop(), name="sweeper")

    async def stop(self) -> None:
        """Stop; a pass in progress is abandoned between statements (each batch is atomic)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def sweep_once(self) -> SweepReport:
        """One pass now."""
        report = await self._store.sweep(self._policy, encode_marker=compaction_marker_body)
        self.last = report
        if self._metrics is not None:
            for kind, rows in (
                ("events", report.removed_events),
                ("idempotency_keys", report.expired_keys),
                ("threads", report.deleted_threads),
            ):
                if rows:
                    self._metrics.retention_removed.add(rows, {"kind": kind})
        if report.ran and (
            report.compacted_runs
            or report.expired_keys
            or report.deleted_threads
            or report.repaired_queues
        ):
            log.info("sweep: %s", report)
        return report

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.sweep_once()
            except Exception:
                # An outage or a conflict: the next pass picks the work up again.
                log.warning("sweep failed; retrying in %.0fs", self._interval, exc_info=True)
