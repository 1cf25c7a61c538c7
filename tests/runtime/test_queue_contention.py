"""Sends and cancels racing on busy threads leave every queue whole (PostgreSQL).

Many Sends queue runs on a few threads while some of them are cancelled
and the active runs finish and promote the next: every run ends, each
thread ends idle with nothing queued, and its runs ran one at a time in
queue order. Before the promotion read the queue after waiting for the
thread's row, some rounds stranded a run as queued behind nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import random

import grpc
import pytest

from pai.v1 import run_service_pb2
from pai_grpc.models import ScriptedModel
from pai_grpc.testing import serve_in_process
from tests.conftest import POSTGRES_URL, private_schema
from tests.runtime.support import new_thread, send, wait_run

ROUNDS = 6
THREADS = 3
SENDS = 15


@pytest.mark.rule("RT-09")
async def test_racing_sends_and_cancels_leave_every_queue_whole() -> None:
    rng = random.Random(7)
    async with private_schema() as schema:
        model = ScriptedModel(lambda call: "ok", chunk_delay=0.001)
        async with serve_in_process(
            f"{POSTGRES_URL}?schema={schema}", model=model, sends_per_second=0
        ) as srv:
            refused: list[grpc.StatusCode] = []

            async def cancel(run_id: str, delay: float) -> None:
                await asyncio.sleep(delay)
                try:
                    await srv.runs.CancelRun(run_service_pb2.CancelRunRequest(run_id=run_id))
                except grpc.aio.AioRpcError as e:
                    refused.append(e.code())

            for _ in range(ROUNDS):
                threads = [await new_thread(srv) for _ in range(THREADS)]
                handles = await asyncio.gather(
                    *(send(srv, t, f"m{i}") for t in threads for i in range(SENDS))
                )

                chosen = rng.sample(handles, len(handles) // 3)
                await asyncio.gather(*(cancel(h.run_id, rng.random() * 0.05) for h in chosen))
                # The run ended first: the only refusal a race may bring.
                assert set(refused) <= {grpc.StatusCode.FAILED_PRECONDITION}
                for h in handles:
                    await wait_run(srv, h.run_id, timeout=30)
                for thread_id in threads:
                    thread = await srv.store.get_thread("default", thread_id)
                    assert thread is not None
                    assert (thread.status, thread.active_run_id) == ("idle", None)
                    runs = (await srv.store.list_runs("default", thread_id, limit=100)).items
                    assert all(r.status in ("completed", "cancelled") for r in runs)
                    ran = sorted(
                        (r for r in runs if r.status == "completed"), key=lambda r: r.thread_seq
                    )
                    for before, after in itertools.pairwise(ran):
                        assert before.ended_at is not None
                        assert after.started_at is not None
                        assert before.ended_at <= after.started_at
