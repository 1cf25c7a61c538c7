"""Hook failures an execution records when remote hooks fail open.

The policy is in docs/plugin-protocol.md, "Failure semantics".

The execution sets a :class:`HookReport` in a context variable for its task;
the remote adapter records skipped hooks there; the execution writes the
counts onto the run record with its next transition, so clients see why a
hook did not run.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass
class HookReport:
    """Fail-open hook failures of one run, and the hooks skipped for the current step."""

    #: (plugin, phase, reason) -> count, including earlier episodes of the run.
    failures: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: (plugin, phase, step id): skipped for the rest of that step.
    skipped: set[tuple[str, str, str]] = field(default_factory=set)
    dirty: bool = False

    @classmethod
    def from_json(cls, raw: list[Any]) -> HookReport:
        """The report of a run record's ``hook_failures``."""
        report = cls()
        for item in raw:
            if isinstance(item, dict):
                key = (str(item.get("plugin")), str(item.get("phase")), str(item.get("reason")))
                report.failures[key] = int(item.get("count") or 1)
        return report

    def record(self, plugin: str, phase: str, reason: str, step_id: str) -> None:
        """Count a fail-open failure and skip the hook for the rest of the step."""
        key = (plugin, phase, reason)
        self.failures[key] = self.failures.get(key, 0) + 1
        self.skipped.add((plugin, phase, step_id))
        self.dirty = True

    def skipping(self, plugin: str, phase: str, step_id: str) -> bool:
        """Whether the hook already failed open in this step."""
        return (plugin, phase, step_id) in self.skipped

    def to_json(self) -> list[dict[str, Any]]:
        """The run record's ``hook_failures``."""
        return [
            {"plugin": p, "phase": ph, "reason": r, "count": n}
            for (p, ph, r), n in sorted(self.failures.items())
        ]


#: The report of the execution running in the current task (None outside runs).
current_report: ContextVar[HookReport | None] = ContextVar("pai_hook_report", default=None)
