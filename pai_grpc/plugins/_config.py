"""How to reach a plugin and how to treat its failures (per plugin and phase)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pai_grpc._wire import ClientTls
from pai_grpc.lifecycle.internal import PHASES

FailureMode = Literal["closed", "open"]
DEFAULT_TIMEOUT = 1.0


class PluginConfigError(Exception):
    """A plugin is unreachable or misdescribed at start-up (never silently open)."""


@dataclass(frozen=True)
class PhasePolicy:
    """Timeout (seconds) and failure mode of one phase."""

    timeout: float = DEFAULT_TIMEOUT
    failure_mode: FailureMode = "closed"


@dataclass
class PluginConfig:
    """How to reach a plugin and how to treat its failures.

    Attributes:
        address: ``host:port`` of the LifecyclePluginService.
        name: Diagnostics name (default: the name the plugin describes).
        timeout: Default per-phase timeout in seconds.
        failure_mode: Default failure mode (``closed`` or ``open``).
        phases: Per-phase overrides; every key must be a phase the plugin declares.
        only: Call only these of the declared phases (default: all declared).
        backoff_after: Consecutive failures before the adapter backs off.
        backoff_initial: First back-off, doubled per failed health check.
        backoff_max: Longest back-off.
        health_interval: How often a backed-off plugin is health-checked; a
            SERVING answer ends the back-off early.
        tls: TLS of the channel to the plugin (plaintext without).
    """

    address: str
    name: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    failure_mode: FailureMode = "closed"
    phases: dict[str, PhasePolicy] = field(default_factory=dict)
    only: frozenset[str] | None = None
    backoff_after: int = 3
    backoff_initial: float = 1.0
    backoff_max: float = 30.0
    health_interval: float = 1.0
    tls: ClientTls | None = None

    def __post_init__(self) -> None:
        for phase in [*self.phases, *(self.only or ())]:
            if phase not in PHASES:
                raise PluginConfigError(f"unknown lifecycle phase {phase!r}")
        policies = [(self.timeout, self.failure_mode)]
        policies += [(p.timeout, p.failure_mode) for p in self.phases.values()]
        for timeout, mode in policies:
            if mode not in ("closed", "open"):
                raise PluginConfigError(f"failure_mode must be closed or open, not {mode!r}")
            if not timeout > 0:
                raise PluginConfigError("timeouts must be positive")
