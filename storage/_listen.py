"""LISTEN/NOTIFY on PostgreSQL: cross-process wake-ups for runners and stream readers.

One dedicated connection listens on the provider's channels and hands each
payload to a callback. If the connection drops, it reconnects with back-off;
in the meantime readers and runners fall back to polling, so a lost
notification costs latency, never correctness.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("storage.listen")


class Listener:
    """Delivers notifications of a set of channels to callbacks."""

    def __init__(
        self,
        dsn: str,
        handlers: dict[str, Callable[[str], None]],
        *,
        server_settings: dict[str, str] | None = None,
    ) -> None:
        self._dsn = dsn
        self._handlers = handlers
        self._server_settings = server_settings or {}
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()

    async def start(self, *, wait: float = 5.0) -> None:
        """Connect and start listening (waits up to ``wait`` seconds for the first connection)."""
        self._task = asyncio.create_task(self._run(), name="storage listener")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), wait)

    async def close(self) -> None:
        """Stop listening."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _dispatch(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        handler = self._handlers.get(channel)
        if handler is None:
            return
        try:
            handler(payload)
        except Exception:
            log.exception("notification handler for %s failed", channel)

    async def _run(self) -> None:
        import asyncpg

        delay = 0.1
        while True:
            conn = None
            try:
                conn = await asyncpg.connect(self._dsn, server_settings=self._server_settings)
                for channel in self._handlers:
                    await conn.add_listener(channel, self._dispatch)
                self._connected.set()
                delay = 0.1
                closed = asyncio.Event()
                conn.add_termination_listener(lambda _c, done=closed: done.set())
                await closed.wait()
                log.warning("notification connection closed; reconnecting")
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("notification connection failed (%s); retrying in %.1fs", e, delay)
                await asyncio.sleep(delay)
                # Capped low: until it reconnects, cross-process wake-ups fall back to polling.
                delay = min(delay * 2, 2.0)
            finally:
                if conn is not None and not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await conn.close()
