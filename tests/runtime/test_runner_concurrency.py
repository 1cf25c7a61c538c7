"""A runner never executes more runs at once than its configured concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pai_grpc.domain import StepStreamChunk
from pai_grpc.models import ScriptedModel
from pai_grpc.models._protocol import ModelCall
from pai_grpc.testing import serve_in_process
from tests.runtime.support import new_thread, send, wait_run


class CountingModel(ScriptedModel):
    """A slow scripted model that records how many of its calls overlap at most."""

    def __init__(self) -> None:
        super().__init__(["one two three four"], chunk_delay=0.02)
        self.running = 0
        self.peak = 0

    async def stream(self, call: ModelCall) -> AsyncIterator[StepStreamChunk]:
        chunks = await super().stream(call)
        return self._counted(chunks)

    async def _counted(
        self, chunks: AsyncIterator[StepStreamChunk]
    ) -> AsyncIterator[StepStreamChunk]:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            self.running -= 1


async def test_sends_and_claims_never_exceed_the_runner_concurrency(database_url: str) -> None:
    model = CountingModel()
    concurrency = 2
    async with serve_in_process(
        database_url, model=model, runner_concurrency=concurrency, lease_seconds=30
    ) as srv:
        threads = await asyncio.gather(*(new_thread(srv) for _ in range(12)))
        # Waves of Sends: each wave hands runs to the runner directly while its
        # claim loop is busy claiming what the previous wave left runnable.
        handles = []
        for _ in range(3):
            handles += await asyncio.gather(*(send(srv, t, "go") for t in threads))
            await asyncio.sleep(0.03)
        for handle in handles:
            await wait_run(srv, handle.run_id, timeout=90)
    assert model.peak >= 1
    assert model.peak <= concurrency, f"{model.peak} model calls ran at once"
