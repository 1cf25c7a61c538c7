"""Retry loops: compare-and-swap conflicts, and waiting out database outages."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from storage.errors import VersionConflict

T = TypeVar("T")


async def retry_on_conflict(
    attempt: Callable[[], Awaitable[T]],
    *,
    attempts: int = 50,
    base_delay: float = 0.001,
    max_delay: float = 0.05,
) -> T:
    """Run ``attempt`` (read fresh state, then commit a version-checked write set) until it wins.

    Each :class:`VersionConflict` means another writer committed first; the
    attempt is retried with jittered exponential back-off so contending
    writers spread out. The last conflict is re-raised after ``attempts``.
    """
    delay = base_delay
    for n in range(attempts):
        try:
            return await attempt()
        except VersionConflict:
            if n == attempts - 1:
                raise
            await asyncio.sleep(random.uniform(0, delay))
            delay = min(delay * 2, max_delay)
    raise AssertionError("unreachable")


# ---- database outages --------------------------------------------------------

#: Whether database work in the current task waits out an outage (see :func:`patient`).
_PATIENT: ContextVar[bool] = ContextVar("storage_patient", default=False)

#: SQLSTATEs that mean the server went away or is not accepting connections:
#: class 08 (connection exception) and admin/crash shutdown, cannot connect now.
_OUTAGE_STATES = ("57P01", "57P02", "57P03")


@contextmanager
def patient() -> Iterator[None]:
    """Database work in this block (and in tasks it starts) waits out outages.

    A request handler should fail fast with :class:`~storage.errors.Unavailable`
    so its client can retry elsewhere; a run's execution should instead pause
    and carry on the moment the database is back, still under its lease,
    rather than fail and wait for the lease to expire. Work whose commit
    outcome is unknown (the connection dropped during COMMIT) is never
    repeated: it raises ``Unavailable(ambiguous=True)`` even here.
    """
    token = _PATIENT.set(True)
    try:
        yield
    finally:
        _PATIENT.reset(token)


def is_patient() -> bool:
    """Whether the current task waits out database outages."""
    return _PATIENT.get()


def outage_delay(attempt: int) -> float:
    """Back-off between attempts to reach a database that is down (at most 1 s)."""
    step: float = 0.05 * 2.0 ** min(attempt, 5)
    return min(step, 1.0) * random.uniform(0.8, 1.0)


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` means the database cannot be reached (as opposed to a bad statement)."""
    from sqlalchemy.exc import DBAPIError

    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, DBAPIError) and e.connection_invalidated:
            return True
        if isinstance(e, OSError | TimeoutError):  # refused, reset, unreachable, timed out
            return True
        state = getattr(e, "sqlstate", None)
        if isinstance(state, str) and (state.startswith("08") or state in _OUTAGE_STATES):
            return True
        if type(e).__name__ == "InterfaceError" and "connection is closed" in str(e):
            return True
        e = getattr(e, "orig", None) or e.__cause__
    return False
