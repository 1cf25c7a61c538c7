"""The circuit breaker of one plugin: back off after repeated failures, probe its health.

After ``backoff_after`` consecutive plugin failures calls fail at once with
HOOK_UNAVAILABLE while a probe health-checks the plugin every
``health_interval``; SERVING ends the back-off, which otherwise doubles (from
``backoff_initial`` up to ``backoff_max``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai_grpc.plugins._config import PluginConfig
from pai_grpc.plugins._errors import HookUnavailable

log = logging.getLogger("pai_grpc.plugins")


@dataclass
class _Circuit:
    failures: int = 0
    open_until: float = 0.0
    backoff: float = 0.0


class Backoff:
    """Counts a plugin's consecutive failures and backs off from it (see the module doc)."""

    def __init__(self, config: PluginConfig) -> None:
        self.config = config
        #: The plugin's name in diagnostics (the adapter sets it once described).
        self.plugin: str = config.name or config.address
        #: The plugin's health stub (set on connect).
        self.health: health_pb2_grpc.HealthStub | None = None
        self._circuit = _Circuit()
        self._probe: asyncio.Task[None] | None = None

    async def close(self) -> None:
        """Stop the health probe."""
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None

    def check(self, phase: str) -> None:
        """Fail at once (HOOK_UNAVAILABLE) while backing off."""
        if self._circuit.open_until > time.monotonic():
            raise HookUnavailable(self.plugin, phase, "backing off after repeated failures")

    def succeeded(self) -> None:
        """The plugin answered: the failure count starts over."""
        self._circuit.failures = 0

    def failed(self) -> None:
        """The plugin failed: count it, and back off after ``backoff_after`` in a row."""
        circuit = self._circuit
        circuit.failures += 1
        if circuit.failures >= self.config.backoff_after and circuit.open_until <= time.monotonic():
            circuit.backoff = min(
                max(circuit.backoff * 2, self.config.backoff_initial), self.config.backoff_max
            )
            circuit.open_until = time.monotonic() + circuit.backoff
            log.warning("lifecycle plugin %s: backing off for %.1fs", self.plugin, circuit.backoff)
            if self._probe is None or self._probe.done():
                self._probe = asyncio.create_task(self._health_probe())

    async def check_health(self) -> bool:
        """Health-check the plugin once; a SERVING answer ends any back-off."""
        try:
            assert self.health is not None
            reply = await self.health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
            serving = bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
        except grpc.aio.AioRpcError as e:
            # A plugin without health checking answers UNIMPLEMENTED: it is up.
            serving = bool(e.code() == grpc.StatusCode.UNIMPLEMENTED)
        if serving and self._circuit.open_until:
            self._circuit = _Circuit()
            log.info("lifecycle plugin %s is serving again", self.plugin)
        return serving

    async def _health_probe(self) -> None:
        """While backed off, health-check the plugin; close the circuit once it serves."""
        while self._circuit.open_until > 0:
            wait = min(self.config.health_interval, self._circuit.open_until - time.monotonic())
            await asyncio.sleep(max(0.05, wait))
            if await self.check_health():
                return
            if self._circuit.open_until <= time.monotonic():
                self._circuit.backoff = min(self._circuit.backoff * 2, self.config.backoff_max)
                self._circuit.open_until = time.monotonic() + self._circuit.backoff
