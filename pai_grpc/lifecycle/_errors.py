"""Lifecycle errors: a hook that throws fails the run (CMPS-04); a bad decision is rejected."""

from __future__ import annotations

from pai_grpc.errors import FailedPrecondition, PaiError


class HookError(PaiError):
    """A hook raised; the run fails with this reason."""

    default_reason = "HOOK_FAILED"

    def __init__(self, hook: str, phase: str, error: BaseException) -> None:
        super().__init__(
            f"lifecycle hook {hook!r} failed in {phase}: {type(error).__name__}: {error}",
            reason="HOOK_FAILED",
        )
        self.hook = hook
        self.phase = phase


class InvalidDecision(PaiError):
    """A hook returned something that is not a decision of its phase (or a bad patch)."""

    default_reason = "HOOK_INVALID_DECISION"

    def __init__(self, hook: str, phase: str, detail: str) -> None:
        super().__init__(
            f"lifecycle hook {hook!r} returned an invalid {phase} decision: {detail}",
            reason="HOOK_INVALID_DECISION",
        )
        self.hook = hook
        self.phase = phase


class FacadeClosed(FailedPrecondition):
    """A facade write outside its episode (waiting, terminal, lease lost) or phase."""

    default_reason = "FACADE_CLOSED"


class VersionConflict(Exception):
    """``mutate()`` with an expected version or private metadata found the thread changed.

    Raised by the facade in process and in a plugin process alike; read the
    thread again and retry. Not a :class:`PaiError`: a hook that lets it escape
    fails the run as any other exception does (``HOOK_FAILED``).
    """

    def __init__(self, thread_id: str, expected: object, actual: object = None) -> None:
        super().__init__(f"thread {thread_id!r} changed: expected {expected!r}, found {actual!r}")
        self.thread_id = thread_id
        self.expected = expected
        self.actual = actual
