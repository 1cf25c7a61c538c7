"""Memory bounds by bytes: live run events per executing run, and the context cache."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

from pai.v1 import runs_pb2
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.runtime._context_cache import ContextCache
from pai_grpc.server import DEV_SCOPE
from pai_grpc.testing import serve_in_process
from tests.runtime.support import call_texts, collect, new_thread, send, wait_run

WINDOW = 4096


def _payload(event: runs_pb2.RunEvent) -> bytes:
    copy = runs_pb2.RunEvent()
    copy.CopyFrom(event)
    copy.ClearField("time")
    return copy.SerializeToString(deterministic=True)


def _durable_text_kept(channel: Any) -> int:
    """Encoded bytes the live channel keeps of events the log already holds."""
    return sum(len(e.body) for e in channel.since(0) if e.seq <= channel.durable_seq)


async def test_live_events_are_bounded_by_bytes_and_late_readers_get_every_event(
    database_url: str,
) -> None:
    words = " ".join(f"word{i}" for i in range(3000))
    model = ScriptedModel([words], chunk_delay=0.0005)
    async with serve_in_process(database_url, model=model, run_event_buffer_bytes=WINDOW) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "go")).run_id
        early = asyncio.create_task(collect(srv, run_id, timeout=60))
        broker = srv.app.runtime.broker
        kept_max = 0
        dropped = False
        late: asyncio.Task[list[runs_pb2.RunEvent]] | None = None
        opened = False
        while True:
            channel = broker.channel(run_id)
            if channel is None:
                if opened:
                    break  # the execution ended
                await asyncio.sleep(0.001)
                continue
            opened = True
            kept_max = max(kept_max, _durable_text_kept(channel))
            if channel.first_seq > 200 and late is None:
                # Memory no longer holds the start: this reader begins in the log.
                dropped = True
                late = asyncio.create_task(collect(srv, run_id, timeout=60))
            await asyncio.sleep(0.002)
        assert dropped, "the run outgrew the window"
        assert kept_max <= WINDOW
        await wait_run(srv, run_id)
        log = await collect(srv, run_id)
        assert log[-1].status.status == runs_pb2.RUN_STATUS_COMPLETED
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        expected = [_payload(e) for e in log]
        assert [_payload(e) for e in await early] == expected
        assert late is not None
        assert [_payload(e) for e in await late] == expected


async def test_the_context_cache_evicts_by_bytes_and_serves_correct_contexts(
    database_url: str,
) -> None:
    model = ScriptedModel(["ok"])
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model)])
    budget = 40_000
    async with serve_in_process(database_url, agents=agents, context_cache_bytes=budget) as srv:
        cache: ContextCache = srv.app.runtime.services.contexts
        assert cache.max_bytes == budget
        threads = [await new_thread(srv) for _ in range(3)]
        sent: dict[str, list[str]] = {t: [] for t in threads}
        for turn in range(4):
            for n, thread_id in enumerate(threads):
                body = f"t{n} turn{turn} " + "x" * 4000
                run = await send(srv, thread_id, body)
                await wait_run(srv, run.run_id)
                sent[thread_id].append(body)
                # Each step saw exactly its thread's history, evicted or not.
                expected: list[str] = []
                for said in sent[thread_id]:
                    expected += [said, "ok"]
                assert call_texts(model.calls[-1]) == expected[:-1]
                assert cache.size <= budget
        # Three threads of ~4 x 2 x 4 KB each do not fit: some were evicted.
        assert len(cache) < len(threads)
        assert cache.size == sum(e.size for e in cache._entries.values())


async def test_the_context_cache_counts_what_its_entries_really_take(sqlite_url: str) -> None:
    """The byte budget is honest: a cached thread's size is close to its measured memory.

    Short messages are the hard case (their fixed cost is most of them): the
    old estimate counted a fourth of what they take.
    """
    model = ScriptedModel(["ok"])
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model)])
    async with serve_in_process(sqlite_url, agents=agents) as srv:
        thread_id = await new_thread(srv)
        for turn in range(40):
            await wait_run(srv, (await send(srv, thread_id, f"hi {turn}")).run_id)
        cache = ContextCache(srv.app.store)  # a fresh cache: only this thread in it
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            snapshot = await cache.read(DEV_SCOPE, thread_id)
            del snapshot
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        real = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
        assert len(cache) == 1
        assert 0.7 <= real / cache.size <= 1.3, (real, cache.size)
