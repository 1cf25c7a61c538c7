"""Bounded retries with exponential backoff and jitter, for calls that are safe to repeat.

A call is safe to repeat when it reads, or when it carries a ``request_id``
(the server replays the first outcome instead of doing the work twice).
Only transport-level failures are retried: UNAVAILABLE (server restarting,
connection refused or reset, shutting down) and a stream reset by the peer.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc

from pai_grpc.client._errors import PaiClientError, error_from_rpc

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failed call is tried again.

    Attributes:
        max_attempts: Tries in all (1 turns retries off). For a run's event
            stream the count restarts whenever an event arrives, so only
            consecutive failures without progress count.
        initial_backoff: Seconds before the first retry.
        max_backoff: Cap on the wait between two tries.
        multiplier: Growth of the wait per try.
        jitter: Fraction of each wait drawn at random (0..1), so that many
            clients cut off together do not come back in lockstep.
    """

    max_attempts: int = 6
    initial_backoff: float = 0.1
    max_backoff: float = 3.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def delay(self, retry: int, hint: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based).

        ``hint`` is the server's ``RetryInfo`` delay; it is a floor, never cut by jitter.
        """
        base = min(self.max_backoff, self.initial_backoff * self.multiplier**retry)
        wait = base * (1 - self.jitter) + random.uniform(0, base * self.jitter)
        return max(wait, hint or 0.0)


#: The default for unary calls and for reconnecting streams.
DEFAULT_RETRY = RetryPolicy()
#: Never retry.
NO_RETRY = RetryPolicy(max_attempts=1)


def is_transient(err: grpc.aio.AioRpcError) -> bool:
    """Whether a failed call may succeed when simply repeated (transport trouble only)."""
    code = err.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    # A stream reset by the peer (proxy restart, connection dropped mid-message).
    details = (err.details() or "").upper()
    return code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN) and "RST_STREAM" in details


async def with_retry(
    call: Callable[[], Awaitable[T]], policy: RetryPolicy, *, retry: bool = True
) -> T:
    """Await ``call()``, repeating it on transient failures; raise a typed error otherwise.

    Raises:
        PaiClientError: The call failed for good (its typed subclass).
    """
    attempt = 0
    while True:
        try:
            return await call()
        except grpc.aio.AioRpcError as e:
            attempt += 1
            if not (retry and is_transient(e)) or attempt >= policy.max_attempts:
                raise error_from_rpc(e) from None
            hint = error_from_rpc(e).retry_after
            await asyncio.sleep(policy.delay(attempt - 1, hint))


__all__ = ["DEFAULT_RETRY", "NO_RETRY", "PaiClientError", "RetryPolicy", "is_transient"]
