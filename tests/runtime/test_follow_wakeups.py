"""A reader following a run's log in the store loses no wake-up.

Such a reader (the run executes in another process) reads the log, asks the
run's status, then waits to be told of the next commit. A commit announced
between its read and its wait found nobody waiting: the reader slept its
whole poll interval with the run's next events in the log. On PostgreSQL,
with two runner processes, one run in 25 took over 500 ms instead of ~20.
"""

from __future__ import annotations

import asyncio
import gc

from pai_grpc.models import ScriptedModel, text_step
from pai_grpc.streams import Broker
from pai_grpc.testing import serve_in_process
from tests.runtime.support import new_thread, send, wait_run


async def test_a_change_announced_while_the_reader_reads_wakes_its_next_wait() -> None:
    broker = Broker()
    follower = broker.follow("run_a")
    # The reader reads the log here; meanwhile the run's next commit is announced.
    broker.notify("run_a")
    # Its wait returns at once, as changed (a lost wake-up slept the whole timeout).
    assert await asyncio.wait_for(follower.wait(timeout=60), 10) is True
    # Nothing announced since: the next wait times out, unchanged.
    assert await follower.wait(timeout=0.01) is False
    follower.close()


async def test_a_waiting_reader_is_woken_and_other_runs_do_not_wake_it() -> None:
    broker = Broker()
    follower = broker.follow("run_a")
    waiting = asyncio.ensure_future(follower.wait(timeout=60))
    await asyncio.sleep(0)
    broker.notify("run_b")  # nobody follows run_b: nothing to wake
    await asyncio.sleep(0.01)
    assert not waiting.done()
    broker.notify("run_a")
    assert await asyncio.wait_for(waiting, 10) is True
    follower.close()
    follower.close()  # idempotent


async def test_followers_share_a_run_and_the_last_one_out_leaves_nothing_behind() -> None:
    broker = Broker()
    first, second = broker.follow("run_a"), broker.follow("run_a")
    broker.notify("run_a")
    assert await asyncio.wait_for(first.wait(timeout=60), 10) is True
    assert await asyncio.wait_for(second.wait(timeout=60), 10) is True
    first.close()
    second.close()
    # A new follower starts from nothing announced: what came before it is not a change.
    broker.notify("run_a")
    third = broker.follow("run_a")
    assert await third.wait(timeout=0.01) is False
    third.close()
    assert broker.holds("run_a") == 0


async def test_a_stream_dropped_before_its_first_read_releases_its_hold(sqlite_url: str) -> None:
    # A run whose log is read from the store: one that ended here, once forgotten.
    async with serve_in_process(sqlite_url, model=ScriptedModel([text_step("a")])) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "hello")).run_id
        await wait_run(srv, run_id)
        broker = srv.app.runtime.services.broker
        broker.drop_ended_events()
        broker.forget_thread(thread_id)
        stream = await srv.app.runtime.stream_run("default", run_id)
        assert broker.holds(run_id) == 1
        del stream  # the caller went away before reading
        gc.collect()
        assert broker.holds(run_id) == 0
