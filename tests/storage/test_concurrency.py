"""Concurrency on PostgreSQL with real concurrent connections."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage import (
    LeaseLost,
    RunUpdate,
    Store,
    ThreadPatch,
    WriteSet,
    retry_on_conflict,
)
from tests.conftest import open_store
from tests.storage.helpers import (
    SCOPE,
    event,
    finish_and_promote,
    make_thread,
    queue_run,
    start_run,
    text_message,
)

pytestmark = [pytest.mark.postgres, pytest.mark.rule("RT-09")]


@pytest.fixture
async def pg(tmp_path: Path) -> AsyncIterator[Store]:
    async with open_store("postgresql", tmp_path) as store:
        yield store


async def test_twenty_cas_writers_on_one_thread_lose_nothing(pg: Store) -> None:
    thread_id = await make_thread(pg)

    async def writer(n: int) -> None:
        async def attempt() -> None:
            thread = await pg.get_thread(SCOPE, thread_id)
            assert thread is not None
            await pg.commit(
                WriteSet(
                    scope=SCOPE,
                    thread_id=thread_id,
                    expected_version=thread.version,
                    thread=ThreadPatch(metadata={**thread.metadata, f"w{n}": True}),
                    append_messages=[text_message(f"writer-{n}")],
                )
            )

        await retry_on_conflict(attempt, attempts=500)

    await asyncio.gather(*(writer(n) for n in range(20)))
    page = await pg.list_messages(SCOPE, thread_id, view="all", limit=100)
    texts = [m.parts[0]["text"] for m in page.items]  # type: ignore[index]
    assert sorted(texts) == sorted(f"writer-{n}" for n in range(20))  # each exactly once
    assert [m.position for m in page.items] == list(range(20))  # dense
    thread = await pg.get_thread(SCOPE, thread_id)
    assert thread is not None
    assert thread.metadata == {f"w{n}": True for n in range(20)}  # no lost update
    assert thread.version == 21


async def test_four_claimers_drain_two_hundred_runs_exactly_once(pg: Store) -> None:
    threads = [await make_thread(pg) for _ in range(20)]
    expected: set[str] = set()
    for thread_id in threads:
        expected.add(await start_run(pg, thread_id))
        for _ in range(9):
            expected.add(await queue_run(pg, thread_id))
    assert len(expected) == 200

    claimed: list[str] = []
    violations: list[str] = []
    order: dict[str, list[int]] = {}

    async def claimer(name: str) -> None:
        idle = 0
        while idle < 20:
            got = await pg.claim_run(name, lease_seconds=30)
            if got is None:
                idle += 1
                await asyncio.sleep(0.01)
                continue
            idle = 0
            run = got.run
            # Durable check: right after the claim, this is the thread's only running run.
            runs = await pg.list_runs(SCOPE, run.thread_id, limit=100)
            running = [r.id for r in runs.items if r.status == "running"]
            if running != [run.id]:
                violations.append(f"{run.thread_id}: running {running} after claiming {run.id}")
            claimed.append(run.id)
            order.setdefault(run.thread_id, []).append(run.thread_seq)
            await asyncio.sleep(0)  # let other claimers race while this one is active
            await pg.commit(finish_and_promote(got, run.thread_id))

    await asyncio.gather(*(claimer(f"c{i}") for i in range(4)))
    assert violations == []
    assert len(claimed) == 200
    assert set(claimed) == expected  # each exactly once
    assert all(seqs == list(range(10)) for seqs in order.values())  # queue order per thread
    for thread_id in threads:
        thread = await pg.get_thread(SCOPE, thread_id)
        assert thread is not None
        assert thread.status == "idle"


async def test_a_claimer_whose_lease_expired_cannot_write(pg: Store) -> None:
    thread_id = await make_thread(pg)
    run_id = await start_run(pg, thread_id)
    slow = await pg.claim_run("slow", lease_seconds=0.3)
    assert slow is not None
    await asyncio.sleep(0.5)
    fast = await pg.claim_run("fast", lease_seconds=30)
    assert fast is not None
    assert fast.run.id == run_id

    async def stale_write() -> None:
        await pg.commit(
            WriteSet(
                scope=SCOPE,
                thread_id=thread_id,
                append_messages=[text_message("stale step")],
                update_runs=[RunUpdate(id=run_id, lease=slow.lease, step_count=1, last_seq=1)],
                events=[event(run_id, 1)],
            )
        )

    results = await asyncio.gather(*(stale_write() for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, LeaseLost) for r in results)
    page = await pg.list_messages(SCOPE, thread_id, view="all")
    assert [m.parts[0]["text"] for m in page.items] == ["hi"]  # type: ignore[index]
    assert await pg.read_events(SCOPE, run_id) == []
    run = await pg.get_run(SCOPE, run_id)
    assert run is not None
    assert (run.step_count, run.lease_owner) == (0, "fast")
