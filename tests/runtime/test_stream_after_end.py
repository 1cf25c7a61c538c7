"""A StreamRun arriving just after its run ended in this process reads nothing.

Short runs often end before their StreamRun arrives. The process remembers
for a moment that the run ended, in which scope and at which seq, so the
stream needs no read of the run; and for a second its events, so it needs no
read of the log either. The answers are those of the database path.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest

from pai.v1 import run_service_pb2, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc._config_retention import RetentionTable
from pai_grpc.config import ConfigFile
from pai_grpc.errors import NotFoundError
from pai_grpc.models import ScriptedModel, text_step
from pai_grpc.runtime import _reads as reads_module
from pai_grpc.streams import Broker, EncodedRunEvent
from pai_grpc.streams._broker import ENDED_EVENTS_RUN_BYTES, ENDED_EVENTS_TOTAL_BYTES
from pai_grpc.testing import InProcessServer, serve_in_process
from tests.runtime.support import (
    collect,
    count_log_reads,
    lines_run,
    new_thread,
    rpc_error,
    send,
    wait_run,
)


def _count_get_run(monkeypatch: pytest.MonkeyPatch, store: Any) -> list[str]:
    """Record each run the store is asked for (the read still happens)."""
    asked: list[str] = []
    real = store.get_run

    async def counted(scope: str, run_id: str) -> Any:
        asked.append(run_id)
        return await real(scope, run_id)

    monkeypatch.setattr(store, "get_run", counted)
    return asked


async def test_a_stream_of_a_run_that_just_ended_here_reads_nothing(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serve_in_process(database_url) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "hello there")).run_id
        assert (await wait_run(srv, run_id)).status == runs_pb2.RUN_STATUS_COMPLETED
        asked = _count_get_run(monkeypatch, srv.app.store)
        reads = count_log_reads(monkeypatch, srv.app.store)
        events = await collect(srv, run_id)
        assert asked == []
        assert reads == []
        assert events[-1].status.status == runs_pb2.RUN_STATUS_COMPLETED
        assert [e.seq for e in events] == sorted({e.seq for e in events})
        last = events[-1].seq
        # Resuming mid-way and at the end answer as the database path does.
        assert [e.seq for e in await collect(srv, run_id, after_seq=events[1].seq)] == [
            e.seq for e in events[2:]
        ]
        assert await collect(srv, run_id, after_seq=last) == []
        beyond = run_service_pb2.StreamRunRequest(run_id=run_id, after_seq=last + 1)
        error = await rpc_error(_drain(srv.runs.StreamRun(beyond)))
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "beyond" in (error.details() or "")
        assert asked == []
        assert reads == []
        # The log says the same.
        srv.app.runtime.services.broker.drop_ended_events()
        assert await collect(srv, run_id) == events
        assert reads == [0]


async def test_a_run_whose_log_is_compacted_at_once_is_always_read_from_its_log(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``events_after_terminal = 0`` the next sweep may compact any ended run: no copies."""
    retention = ConfigFile(retention=RetentionTable(events_after_terminal=0, sweep_interval=0))
    async with serve_in_process(sqlite_url, file=retention) as srv:
        assert srv.app.runtime.services.broker.ended_events_seconds == 0
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "hello there")).run_id
        await wait_run(srv, run_id)
        reads = count_log_reads(monkeypatch, srv.app.store)
        events = await collect(srv, run_id)
        assert events[-1].status.status == runs_pb2.RUN_STATUS_COMPLETED
        assert reads == [0]


def _run(broker: Broker, run_id: str, body_bytes: int, events: int = 2) -> None:
    """Execute a run through a channel of ``broker``: ``events`` events, the last terminal."""
    channel = broker.open(run_id, 1, scope="s", thread_id="thr")
    for seq in range(1, events + 1):
        body = bytes(body_bytes // events)
        channel.publish(EncodedRunEvent(seq, body, terminal=seq == events))
        channel.mark_durable(seq)
    broker.close(channel)


def test_ended_runs_keep_their_events_within_a_budget() -> None:
    """A big run keeps none; all runs together keep the newest within the total budget."""
    # A window that holds the big run whole: the limit is the ended run's.
    broker = Broker(window_bytes=4 * ENDED_EVENTS_RUN_BYTES)
    _run(broker, "run_big", ENDED_EVENTS_RUN_BYTES + 1)
    big = broker.ended("run_big")
    assert big is not None
    assert big.events == ()
    assert not big.replays(0)  # its stream reads the log
    each = ENDED_EVENTS_RUN_BYTES // 2
    runs = [f"run_{i}" for i in range(2 * ENDED_EVENTS_TOTAL_BYTES // each)]
    for run_id in runs:
        _run(broker, run_id, each)
    kept = [r for r in runs if broker.ended(r).replays(0)]  # type: ignore[union-attr]
    assert kept == runs[-len(kept) :]  # the newest
    assert 0 < len(kept) * each <= ENDED_EVENTS_TOTAL_BYTES
    # Every run is still known to have ended (no read of the run), kept events or not.
    assert all(broker.ended(r) is not None for r in runs)


async def test_a_run_of_a_deleted_thread_is_not_found_even_just_after_it_ended(
    sqlite_url: str,
) -> None:
    async with serve_in_process(sqlite_url) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "hello")).run_id
        await wait_run(srv, run_id)
        await srv.threads.DeleteThread(tpb.DeleteThreadRequest(thread_id=thread_id))
        error = await rpc_error(
            _drain(srv.runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=run_id)))
        )
        assert error.code() == grpc.StatusCode.NOT_FOUND


async def test_a_run_that_ended_here_is_not_found_in_another_scope(sqlite_url: str) -> None:
    async with serve_in_process(sqlite_url) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "hello")).run_id
        await wait_run(srv, run_id)
        assert srv.app.runtime.services.broker.ended(run_id) is not None
        with pytest.raises(NotFoundError):
            await srv.app.runtime.stream_run("another-scope", run_id)


async def _drain(call: Any) -> None:
    async for _ in call:
        pass


def _lines_to_end_a_run(remembered: int) -> int:
    """Lines of the broker run to end one run, with ``remembered`` earlier runs whose
    events have gone (their second is up) still remembered as ended."""
    broker = Broker()
    broker.ended_events_seconds = 0.05
    for i in range(remembered):
        _run(broker, f"run_old_{i}", 1_000)
    time.sleep(0.1)
    _run(broker, "run_recent", 1_000)  # the old runs' events go now, once
    assert broker.ended("run_old_0") is not None
    assert broker.ended("run_old_0").events == ()  # type: ignore[union-attr]
    lines = lines_run(
        lambda: _run(broker, "run_new", 1_000), sys.modules[Broker.__module__].__file__
    )
    assert broker.ended("run_recent").replays(0)  # type: ignore[union-attr]
    return lines


def test_ending_a_run_costs_the_same_however_many_ended_runs_are_remembered() -> None:
    """The broker remembers ended runs for ten seconds (thousands on a busy server);
    ending one more must not walk the ones whose events are already gone.

    Counted in lines the broker runs, not in time: before, every run's end
    walked all of them (a quarter of a millisecond per run on the runs
    benchmark).
    """
    assert _lines_to_end_a_run(5_000) == _lines_to_end_a_run(10)


#: Deltas of a long answer: its events take a few hundred KiB, as a long
#: streamed answer does (one event per delta).
LONG_ANSWER_WORDS = 4_000


@asynccontextmanager
async def _long_run_ended(database_url: str) -> AsyncIterator[tuple[InProcessServer, str]]:
    """A server whose model answers with a long text at once, and the run that answer ended."""
    answer = " ".join(["w"] * LONG_ANSWER_WORDS)
    model = ScriptedModel(lambda call: text_step(answer))
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "go")).run_id
        assert (await wait_run(srv, run_id)).status == runs_pb2.RUN_STATUS_COMPLETED
        yield srv, run_id


async def test_a_long_run_that_just_ended_here_replays_from_memory(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model answering at once can finish a long run before its StreamRun arrives.

    The run's events are still in memory: the stream replays them instead
    of reading the log back page by page. Before, an ended run kept its
    events only up to 64 KiB: the benchmark's stream of 2,000 deltas read
    all of them back from the log (its StreamRun arrived after the end).
    """
    async with _long_run_ended(database_url) as (srv, run_id):
        reads = count_log_reads(monkeypatch, srv.app.store)
        events = await collect(srv, run_id)
        assert reads == []
        assert len(events) > LONG_ANSWER_WORDS
        assert events[-1].status.status == runs_pb2.RUN_STATUS_COMPLETED
        # Exactly the log's events.
        srv.app.runtime.services.broker.drop_ended_events()
        assert await collect(srv, run_id) == events
        assert reads[0] == 0


async def test_a_log_of_many_pages_is_read_back_without_waiting_for_wake_ups(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader behind by more than a page reads the next page at once.

    Nothing announces a commit that happened before a reader's read: a
    finished run's log (or the backlog of a run executing elsewhere) is all
    there already. The reader used to wait for a wake-up after every page,
    so it slept the poll interval (0.5 s) per 500 events: a 4,000-delta
    answer replayed from the log took 4 s, and the served benchmark's stream
    of 8,000 deltas ran at 1,300 deltas/s instead of 22,000. Here the poll
    interval is an hour: only a reader that does not wait gets through.
    """
    monkeypatch.setattr(reads_module, "FOLLOW_POLL_SECONDS", 3600.0)
    async with _long_run_ended(database_url) as (srv, run_id):
        srv.app.runtime.services.broker.drop_ended_events()
        reads = count_log_reads(monkeypatch, srv.app.store)
        events = await collect(srv, run_id, timeout=60)
        assert len(events) > LONG_ANSWER_WORDS
        assert events[-1].status.status == runs_pb2.RUN_STATUS_COMPLETED
        assert [e.seq for e in events] == sorted({e.seq for e in events})
        # Page after page, each from where the last one ended.
        assert len(reads) == -(-len(events) // 500)
        assert reads[1:] == [events[n * 500 - 1].seq for n in range(1, len(reads))]
        # From the middle too.
        middle = events[len(events) // 2].seq
        assert [e.seq for e in await collect(srv, run_id, middle, timeout=60)] == [
            e.seq for e in events if e.seq > middle
        ]
