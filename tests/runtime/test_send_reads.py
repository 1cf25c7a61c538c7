"""A Send to an idle thread commits without reading it, and its run reads no context.

The run's first step starts from what the Send committed (the process's
context cache holds every earlier message and the Send's commit extended it),
so a warm thread's run costs the database its two commits and nothing else.
Every shortcut falls back to a read when it cannot be sure.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from pai.v1 import runs_pb2
from pai_grpc.domain import new_id
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.runtime._context_cache import ContextCache
from pai_grpc.server import DEV_SCOPE
from pai_grpc.telemetry import Telemetry
from pai_grpc.testing import serve_in_process
from storage import CommitResult, NewMessage, NewThread, Store, WriteSet
from tests.runtime.support import call_texts, lines_run, new_thread, rpc_error, send, wait_run


def _count_calls(monkeypatch: pytest.MonkeyPatch, store: Store, *names: str) -> dict[str, int]:
    """Count calls of the store's ``names`` (each still does its real work)."""
    counts = dict.fromkeys(names, 0)
    for name in names:
        real: Callable[..., Any] = getattr(store, name)

        def counted(*args: Any, _name: str = name, _real: Any = real, **kw: Any) -> Any:
            counts[_name] += 1
            return _real(*args, **kw)

        monkeypatch.setattr(store, name, counted)
    return counts


async def test_a_send_to_an_idle_thread_and_its_run_read_nothing(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedModel(["ok"])
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model)])
    async with serve_in_process(database_url, agents=agents) as srv:
        thread_id = await new_thread(srv)
        first = await send(srv, thread_id, "one")
        assert (await wait_run(srv, first.run_id)).status == runs_pb2.RUN_STATUS_COMPLETED
        store = srv.app.store
        finished: list[str] = []
        store.commit_listeners.append(
            lambda ws, _r: finished.extend(u.id for u in ws.update_runs if u.status == "completed")
        )
        reads = _count_calls(monkeypatch, store, "get_thread", "context", "get_messages")
        second = await send(srv, thread_id, "two")
        for _ in range(1500):
            if second.run_id in finished:
                break
            await asyncio.sleep(0.01)
        assert second.run_id in finished
        assert reads == {"get_thread": 0, "context": 0, "get_messages": 0}
        # The context came from the cache and is exactly the thread's history.
        assert call_texts(model.calls[-1]) == ["one", "ok", "two"]
        # A third Send on a thread that a stale cache entry would misread.
        third = await send(srv, thread_id, "three")
        assert (await wait_run(srv, third.run_id)).status == runs_pb2.RUN_STATUS_COMPLETED
        assert call_texts(model.calls[-1]) == ["one", "ok", "two", "ok", "three"]


async def test_a_send_to_a_busy_thread_queues_and_is_not_a_storage_conflict(
    sqlite_url: str,
) -> None:
    """The speculative idle commit is refused, read, and queued: one run at a time."""
    memory = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[memory])
    # The first run is still streaming when the second Send arrives.
    model = ScriptedModel(["ok", "ok"], first_chunk_delay=0.5)
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model)])
    telemetry = Telemetry(trace.NoOpTracerProvider(), provider)
    try:
        async with serve_in_process(sqlite_url, agents=agents, telemetry=telemetry) as srv:
            thread_id = await new_thread(srv)
            running = await send(srv, thread_id, "one")
            queued = await send(srv, thread_id, "two")
            assert queued.status == runs_pb2.RUN_STATUS_QUEUED
            assert queued.run_id != running.run_id
            assert (await wait_run(srv, queued.run_id)).status == runs_pb2.RUN_STATUS_COMPLETED
            missing = await rpc_error(send(srv, "thr_" + "0" * 26, "anyone?"))
            assert missing.code() == grpc.StatusCode.NOT_FOUND
        data = memory.get_metrics_data()
        conflicts = [
            p.value
            for rm in (data.resource_metrics if data else [])
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "pai.storage.conflicts"
            for p in m.data.data_points
        ]
        assert sum(conflicts) == 0
    finally:
        provider.shutdown()


def _append(thread_id: str, text: str, *, context: bool = True) -> WriteSet:
    return WriteSet(
        scope=DEV_SCOPE,
        thread_id=thread_id,
        append_messages=[
            NewMessage(
                id=new_id("msg"),
                role="user",
                parts=[{"type": "text", "text": text}],
                visible_context=context,
            )
        ],
    )


async def _cached_thread(store: Store) -> tuple[ContextCache, str]:
    cache = ContextCache(store)
    store.commit_listeners.append(cache.committed)
    thread_id = new_id("thr")
    await store.commit(
        WriteSet(
            scope=DEV_SCOPE, thread_id=thread_id, new_thread=NewThread(thread_id, DEFAULT_AGENT)
        )
    )
    await store.commit(_append(thread_id, "one"))
    await cache.read(DEV_SCOPE, thread_id)
    return cache, thread_id


def _said(snapshot: Any) -> list[str]:
    return [part.text for m in snapshot.messages for part in m.parts]


async def test_a_commit_during_a_context_read_never_duplicates_messages(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, thread_id = await _cached_thread(store)
    real = store.context

    async def overtaken(*args: Any, **kw: Any) -> Any:
        # The read is under way when this process's own commit lands (and extends
        # the cache); the read's snapshot then includes what that commit wrote.
        monkeypatch.setattr(store, "context", real)
        await store.commit(_append(thread_id, "two"))
        return await real(*args, **kw)

    monkeypatch.setattr(store, "context", overtaken)
    raced = await cache.read(DEV_SCOPE, thread_id)
    assert _said(raced) == ["one", "two"]
    assert raced.count == 2
    assert _said(await cache.read(DEV_SCOPE, thread_id)) == ["one", "two"]


async def test_this_process_commits_extend_the_cache_and_a_primed_head_is_read_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, thread_id = await _cached_thread(store)
    hidden = await store.commit(_append(thread_id, "note", context=False))
    result: CommitResult = await store.commit(_append(thread_id, "two"))
    assert hidden.thread is not None
    reads = _count_calls(monkeypatch, store, "context")
    cache.prime(DEV_SCOPE, result)
    primed = await cache.read(DEV_SCOPE, thread_id)
    assert reads["context"] == 0
    assert _said(primed) == ["one", "two"]
    assert primed.count == 3
    # Freshness is for one read only: the next one asks the database.
    assert _said(await cache.read(DEV_SCOPE, thread_id)) == ["one", "two"]
    assert reads["context"] == 1
    # Another process's change ends a primed head's freshness.
    cache.prime(DEV_SCOPE, result)
    cache.changed(thread_id)
    await cache.read(DEV_SCOPE, thread_id)
    assert reads["context"] == 2


async def _lines_to_hear_a_remote_change(store: Store, cached: int) -> int:
    """Lines of the cache run when another process changed one of ``cached`` threads."""
    cache = ContextCache(store)
    thread_ids = [new_id("thr") for _ in range(cached)]
    for thread_id in thread_ids:
        await store.commit(
            WriteSet(
                scope=DEV_SCOPE,
                thread_id=thread_id,
                new_thread=NewThread(thread_id, DEFAULT_AGENT),
            )
        )
        cache.prime(DEV_SCOPE, await store.commit(_append(thread_id, "one")))
    assert len(cache) == cached
    changed = thread_ids[cached // 2]
    lines = lines_run(lambda: cache.changed(changed), sys.modules[ContextCache.__module__].__file__)
    # The change was heard: the primed head is no longer used, the thread is read.
    reads = 0
    real = store.context

    async def counted(*args: Any, **kw: Any) -> Any:
        nonlocal reads
        reads += 1
        return await real(*args, **kw)

    store.context = counted  # type: ignore[method-assign]
    try:
        assert _said(await cache.read(DEV_SCOPE, changed)) == ["one"]
    finally:
        del store.context
    assert reads == 1
    return lines


async def test_another_process_change_costs_the_same_however_many_threads_are_cached(
    store: Store,
) -> None:
    """Every thread another process changes is announced to every process: hearing one
    must not walk the whole cache (thousands of threads on a busy server)."""
    assert await _lines_to_hear_a_remote_change(store, 1_000) == (
        await _lines_to_hear_a_remote_change(store, 10)
    )
