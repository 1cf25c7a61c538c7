"""Storage benchmarks: write-set commits/s and claims/s, against a trivial transaction."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sqlalchemy import text

from pai_grpc.bench._common import Report, Result, bench_store, concurrent_rate, rate
from pai_grpc.domain import new_id
from storage import (
    PROMOTE_NEXT,
    ClaimedRun,
    NewMessage,
    NewRun,
    NewThread,
    RunUpdate,
    Store,
    ThreadPatch,
    WriteSet,
)

SCOPE = "bench"


async def _thread(store: Store) -> str:
    thread_id = new_id("thr")
    await store.commit(
        WriteSet(scope=SCOPE, thread_id=thread_id, new_thread=NewThread(id=thread_id, agent="a"))
    )
    return thread_id


def _append(thread_id: str) -> WriteSet:
    return WriteSet(
        scope=SCOPE,
        thread_id=thread_id,
        thread=ThreadPatch(metadata={"n": 1}),
        append_messages=[
            NewMessage(
                id=new_id("msg"),
                role="assistant",
                parts=[{"type": "text", "text": "benchmark step " * 8}],
            )
        ],
    )


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Measure one backend."""
    async with bench_store(backend, workdir) as store:

        async def trivial() -> None:
            await store.run_in_transaction(lambda c: c.execute(text("SELECT 1")))

        base = await rate(trivial)
        report.add(Result(backend, "baseline: empty write transaction", base, "txn/s"))

        thread_id = await _thread(store)

        async def append() -> None:
            await store.commit(_append(thread_id))

        value = await rate(append)
        report.add(
            Result(
                backend,
                "write set (root + message), 1 writer",
                value,
                "commits/s",
                base,
                "baseline",
            )
        )

        threads = [await _thread(store) for _ in range(8)]

        async def append_many(i: int) -> None:
            await store.commit(_append(threads[i]))

        value = await concurrent_rate(append_many, workers=8)
        report.add(
            Result(
                backend, "write set, 8 writers on 8 threads", value, "commits/s", base, "baseline"
            )
        )

        count = 400
        for _ in range(count):
            thread = await _thread(store)
            run_id = new_id("run")
            await store.commit(
                WriteSet(
                    scope=SCOPE,
                    thread_id=thread,
                    thread=ThreadPatch(status="running", active_run_id=run_id),
                    insert_runs=[
                        NewRun(id=run_id, status="queued", initiator="send", operation="send")
                    ],
                )
            )
        claimed: list[ClaimedRun] = []

        async def claim() -> None:
            got = await store.claim_run("bench", lease_seconds=60)
            if got is not None:
                claimed.append(got)

        value = await rate(claim, seconds=1.0)
        report.add(Result(backend, "claims (claim_run)", value, "claims/s", base, "baseline"))

        async def finish(got: ClaimedRun) -> None:
            await store.commit(
                WriteSet(
                    scope=SCOPE,
                    thread_id=got.run.thread_id,
                    thread=ThreadPatch(active_run_id=PROMOTE_NEXT),
                    update_runs=[
                        RunUpdate(
                            id=got.run.id, lease=got.lease, status="completed", release_lease=True
                        )
                    ],
                )
            )

        started = time.perf_counter()
        for batch in range(0, len(claimed), 4):
            await asyncio.gather(*(finish(c) for c in claimed[batch : batch + 4]))
        value = len(claimed) / (time.perf_counter() - started)
        report.add(
            Result(
                backend,
                "terminal transition (fenced+promote), 4 wide",
                value,
                "commits/s",
                base,
                "baseline",
            )
        )
