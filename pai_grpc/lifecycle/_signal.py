"""AbortSignal: the run's stop/cancel signal and attempt-scoped signals (AMC-04)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class AbortSignal:
    """A one-shot abort signal hooks can observe or combine.

    The runtime owns the run's signal (set on cancellation, stop or lease
    loss); ``around_model_call`` may pass an extra attempt signal to
    ``next(ModelCallPatch(signal=...))``, which is combined with the runtime
    signal so stop and cancellation still reach the provider.
    """

    def __init__(self) -> None:
        self._reason: str | None = None
        self._aborted = False
        self._listeners: list[Callable[[str], None]] = []
        self._event: asyncio.Event | None = None

    @property
    def aborted(self) -> bool:
        """Whether the signal fired."""
        return self._aborted

    @property
    def reason(self) -> str | None:
        """Why it fired."""
        return self._reason

    def abort(self, reason: str = "aborted") -> None:
        """Fire the signal (later calls do nothing)."""
        if self._aborted:
            return
        self._aborted = True
        self._reason = reason
        if self._event is not None:
            self._event.set()
        for listener in self._listeners:
            listener(reason)
        self._listeners.clear()

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(reason)`` when the signal fires (at once if it did)."""
        if self._aborted:
            listener(self._reason or "aborted")
        else:
            self._listeners.append(listener)

    async def wait(self) -> str:
        """Wait until the signal fires; return its reason."""
        if not self._aborted:
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()
        return self._reason or "aborted"

    @classmethod
    def timeout(cls, seconds: float, reason: str = "MODEL_CALL_TIMEOUT") -> AbortSignal:
        """A signal that fires after ``seconds`` (like ``AbortSignal.timeout``)."""
        signal = cls()
        asyncio.get_running_loop().call_later(seconds, signal.abort, reason)
        return signal

    @classmethod
    def any(cls, *signals: AbortSignal) -> AbortSignal:
        """A signal that fires when any of ``signals`` fires."""
        combined = cls()
        for s in signals:
            s.add_listener(combined.abort)
        return combined
