"""The ``[limits]`` table: per-scope quotas, with defaults no single developer meets.

Kept apart from :mod:`pai_grpc._config_file` (which embeds it in ``ConfigFile``);
its models are closed and strict like every table there.
"""

from __future__ import annotations

from pydantic import Field

from pai_grpc._config_table import Table

#: Defaults: generous enough for any one person's use, low enough that a runaway
#: client of one scope cannot fill the database or starve the other scopes.
DEFAULT_MAX_ACTIVE_RUNS_PER_SCOPE = 1000
DEFAULT_SENDS_PER_SECOND = 50.0
DEFAULT_SEND_BURST = 100


class LimitsTable(Table):
    """Per-scope limits; exceeding one answers RESOURCE_EXHAUSTED with RetryInfo."""

    max_active_runs_per_scope: int = Field(
        DEFAULT_MAX_ACTIVE_RUNS_PER_SCOPE,
        ge=0,
        description="Queued, running and waiting runs one scope may hold at once, counted in "
        "the database (so across every process). A run-starting call beyond it answers "
        "RESOURCE_EXHAUSTED `TOO_MANY_ACTIVE_RUNS`. 0 disables the limit.",
    )
    sends_per_second: float = Field(
        DEFAULT_SENDS_PER_SECOND,
        ge=0,
        description="Sustained Send rate per scope (a token bucket kept by each API process: "
        "with N replicas a scope may send N times this). Beyond it Send answers "
        "RESOURCE_EXHAUSTED `SEND_RATE_EXCEEDED` with the wait in RetryInfo. 0 disables it.",
    )
    send_burst: int = Field(
        DEFAULT_SEND_BURST,
        ge=0,
        description="Sends a quiet scope may make at once (the bucket's size). 0: the rate "
        "rounded up, at least 1.",
    )
