"""A reader waiting for a run's chunks is served while the model's chunks keep coming.

A model (or a provider's network buffer) can hand over many chunks at once:
the execution then publishes them without ever waiting, and a reader that
waits on the same event loop would see none of them until the step ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pai.v1 import run_service_pb2, runs_pb2
from pai_grpc.domain import StepStreamChunk
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import serve_in_process
from tests.runtime.support import collect, new_thread, send

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


class _SignallingModel(_CountingModel):
    """Sets ``bursting`` once the execution has taken its first chunks."""

    def __init__(self) -> None:
        super().__init__()
        self.bursting = asyncio.Event()

    async def _emit(self, chunks: list[StepStreamChunk]) -> AsyncIterator[StepStreamChunk]:
        async for chunk in super()._emit(chunks):
            if self.taken == 10:
                self.bursting.set()
            yield chunk


async def test_other_calls_are_served_while_a_run_publishes_a_burst_nobody_reads(
    sqlite_url: str,
) -> None:
    """No reader is attached yet (a client's StreamRun still on its way): the loop stays shared."""
    model = _SignallingModel()
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model)])
    async with serve_in_process(sqlite_url, agents=agents) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "go")).run_id
        await asyncio.wait_for(model.bursting.wait(), 30)
        run = (await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=run_id))).run
        taken_when_answered = model.taken
        # Before, the call was answered once the whole burst had been published.
        assert taken_when_answered < WORDS // 2
        assert run.status == runs_pb2.RUN_STATUS_RUNNING
        await collect(srv, run_id)
