"""Hook calls on a run's timeline: what each hook call came to, as run events.

The execution of a run sets an emitter in :data:`current_hook_calls` for its
task (the runtime's event sink); every hook call made through the composed
lifecycle is then recorded as one :class:`~pai_grpc.domain.HookCallEvent`
when it returns or fails. Outside an execution (history rewrites, plugin
processes, tests calling hooks directly) the emitter is unset and nothing is
recorded. The emitter is a plain callback so that the lifecycle never imports
the runtime.

A remote plugin that fails open returns a skip to the composition, which
cannot tell it from the plugin's own skip: the adapter marks the open call
with :func:`hook_failed_open` so the event says ``failed_open`` with its
reason instead.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pai_grpc.domain import HookCallEvent, HookCallOutcome

#: Records one hook call of the run the current task executes.
HookCallEmitter = Callable[[HookCallEvent], object]

#: The emitter of the execution running in the current task (None outside runs).
current_hook_calls: ContextVar[HookCallEmitter | None] = ContextVar("pai_hook_calls", default=None)

#: Phases whose hooks return a value to pass on, not a decision.
_VALUE_PHASES = frozenset({"resolve_model_context", "around_model_call"})
#: Decision kinds are type names: bounded by the decision classes, never content.
_MAX_DECISION = 40


@dataclass
class _OpenCall:
    """The hook call in progress in this task (a failed-open mark lands here)."""

    hook: str
    phase: str
    failed_open: str | None = None


_open_call: ContextVar[_OpenCall | None] = ContextVar("pai_open_hook_call", default=None)


def decision_kind(phase: str, decision: Any) -> str:
    """The kind of ``decision`` in snake case (``none``, ``next_step``, ...), never its content."""
    if decision is None:
        return "none"
    if phase in _VALUE_PHASES:
        return "result"
    name = type(decision).__name__
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()[:_MAX_DECISION]


def step_index(input: Any) -> int | None:
    """The index of the step a phase input belongs to, when it has one."""
    index = getattr(getattr(input, "step", None), "index", None)
    return index if type(index) is int else None


@contextmanager
def observe_hook_call(hook: str, phase: str, step: int | None) -> Iterator[_Outcome]:
    """Time one hook call and record it on the run's timeline when it ends.

    The caller sets :attr:`_Outcome.decision` when the hook returns; an
    exception leaving the block records a failure with its reason (and is
    re-raised). Cancellation records nothing: the execution is going away.
    """
    emit = current_hook_calls.get()
    outcome = _Outcome()
    if emit is None:
        yield outcome
        return
    call = _OpenCall(hook, phase)
    token = _open_call.set(call)
    started = time.perf_counter()
    try:
        yield outcome
    except Exception as e:
        reason = getattr(e, "reason", None)
        outcome.failure = "timeout" if reason == "HOOK_TIMEOUT" else "error"
        outcome.reason = str(reason) if reason else type(e).__name__
        raise
    finally:
        _open_call.reset(token)
        elapsed = (time.perf_counter() - started) * 1000
        if outcome.decision is not None or outcome.failure is not None:
            if call.failed_open is not None:
                kind: HookCallOutcome = "failed_open"
                reason, decision = call.failed_open, ""
            elif outcome.failure is not None:
                kind, reason, decision = outcome.failure, outcome.reason, ""
            else:
                kind, reason = "ok", None
                decision = decision_kind(phase, outcome.decision.value)  # type: ignore[union-attr]
            emit(
                HookCallEvent(
                    phase=phase,
                    hook=hook,
                    outcome=kind,
                    decision=decision,
                    duration_ms=elapsed,
                    step=step,
                    reason=reason,
                )
            )


class _Returned:
    """A hook's return value (boxed: ``None`` is a decision too)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Outcome:
    """What the observed call came to, filled in by the caller and the observer."""

    __slots__ = ("decision", "failure", "reason")

    def __init__(self) -> None:
        self.decision: _Returned | None = None
        self.failure: HookCallOutcome | None = None
        self.reason: str | None = None

    def returned(self, value: Any) -> Any:
        """Note the hook's return value and hand it back."""
        self.decision = _Returned(value)
        return value


def hook_failed_open(hook: str, phase: str, reason: str, step: int | None = None) -> None:
    """Record that a remote hook failed open (the call returns a skip).

    Marks the hook call in progress when it is this hook's; otherwise (a
    streaming phase consumed outside a hook call) records an event of its own.
    """
    call = _open_call.get()
    if call is not None and call.hook == hook and call.phase == phase:
        call.failed_open = reason
        return
    emit = current_hook_calls.get()
    if emit is not None:
        emit(HookCallEvent(phase=phase, hook=hook, outcome="failed_open", step=step, reason=reason))


__all__ = [
    "HookCallEmitter",
    "current_hook_calls",
    "decision_kind",
    "hook_failed_open",
    "observe_hook_call",
    "step_index",
]
