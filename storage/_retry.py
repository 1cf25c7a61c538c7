"""Compare-and-swap retry loops."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
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
