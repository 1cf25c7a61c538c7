"""A reader waiting for a run's chunks is served while the model's chunks keep coming.

A model (or a provider's network buffer) can hand over many chunks at once:
the execution then publishes them without ever waiting, and a reader that
waits on the same event loop would see none of them until the step ended.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from pai.v1 import run_service_pb2
from pai_grpc.domain import StepStreamChunk
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import serve_in_process
from tests.runtime.support import new_thread, send

WORDS = 2_000


class _CountingModel(ScriptedModel):
    """The scripted model, counting the chunks the execution has taken from it."""

    def __init__(self) -> None:
        # The step starts after a moment, so the reader is waiting when the burst comes.
        super().__init__([" ".join(["w"] * WORDS)], first_chunk_delay=0.2)
        self.taken = 0

    async def _emit(self, chunks: list[StepStreamChunk]) -> AsyncIterator[StepStreamChunk]:
        async for chunk in super()._emit(chunks):
            self.taken += 1
            yield chunk


async def test_a_waiting_reader_gets_the_first_delta_before_the_burst_is_through(
    sqlite_url: str,
) -> None:
    model = _CountingModel()
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model)])
    async with serve_in_process(sqlite_url, agents=agents) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "go")).run_id
        taken_at_first_delta: int | None = None
        deltas = 0
        async for response in srv.runs.StreamRun(
            run_service_pb2.StreamRunRequest(run_id=run_id), timeout=60
        ):
            if response.event.chunk.WhichOneof("chunk") == "text_delta":
                deltas += 1
                if taken_at_first_delta is None:
                    taken_at_first_delta = model.taken
        assert deltas == WORDS
        assert taken_at_first_delta is not None
        # Before, the reader saw its first delta once all of them had been published.
        assert taken_at_first_delta < WORDS // 2
