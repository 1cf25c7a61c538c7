"""The ``[retention]`` table: how long run events, request results and idle threads stay.

Kept apart from :mod:`pai_grpc._config_file` (which embeds it in ``ConfigFile``);
its models are closed and strict like every table there.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from pydantic import Field

from pai_grpc._config_table import Table

if TYPE_CHECKING:
    from storage import RetentionPolicy

DEFAULT_EVENTS_AFTER_TERMINAL = 3600.0
DEFAULT_IDEMPOTENCY_TTL = 86400.0
DEFAULT_SWEEP_INTERVAL = 60.0
DEFAULT_BATCH_ROWS = 5000


class RetentionTable(Table):
    """Bounded storage growth: what the sweeper removes, and how often it runs."""

    events_after_terminal: float = Field(
        DEFAULT_EVENTS_AFTER_TERMINAL,
        ge=0,
        description="Seconds after a run ends before its text, reasoning and tool-input "
        "deltas are removed from its event log (StreamRun then sends a `compacted` event in "
        "their place; status events, committed messages, pending actions and other chunks "
        "stay). 0 compacts at the next sweep.",
    )
    idempotency_ttl: float = Field(
        DEFAULT_IDEMPOTENCY_TTL,
        gt=0,
        description="Seconds a `request_id` replays its first result. After it the key is "
        "forgotten: a request repeating it is treated as a new request.",
    )
    idle_threads_after: float | None = Field(
        None,
        gt=0,
        description="Seconds without any write after which an idle thread is deleted with "
        "everything in it, as DeleteThread would. Unset (the default): threads are kept.",
    )
    sweep_interval: float = Field(
        DEFAULT_SWEEP_INTERVAL,
        ge=0,
        description="Seconds between sweeps in each runner process (the embedded runner of "
        "`serve` too). One sweeper works at a time across processes on PostgreSQL. 0: no "
        "sweeps in runners (run `pai-grpc sweep` instead).",
    )
    batch_rows: int = Field(
        DEFAULT_BATCH_ROWS,
        ge=1,
        description="Rows one sweep transaction removes, roughly (a run is compacted whole).",
    )

    def policy(self) -> RetentionPolicy:
        """The storage retention policy these keys describe."""
        # Imported here: the config models load in plugin processes, which have no storage.
        from storage import RetentionPolicy

        return RetentionPolicy(
            events_after_terminal=timedelta(seconds=self.events_after_terminal),
            idempotency_ttl=timedelta(seconds=self.idempotency_ttl),
            idle_threads_after=_span(self.idle_threads_after),
            batch_rows=self.batch_rows,
        )


def _span(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)
